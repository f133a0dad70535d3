// Checkpoints: the fp32 master weights and AdamW moments of every param, the
// optimizer counters, and a JSON object ("extra") of whatever else the trainer
// needs back (data loader position, model config, schedule).
//
// A checkpoint is a step directory (mxdp train names it step_NNNNNN.ckpt):
//
//   manifest          the metadata, in the container below; written last
//   rank_00000.bin    the shards rank 0 owned when it saved
//   rank_00001.bin    ... one file per rank of the saving job, written in parallel
//
// Saving: rank 0 creates "<dir>.tmp.<pid>"; every rank writes and fsyncs its own
// rank file there (copying its shards to host memory a few MiB at a time: no
// rank ever holds more than that); after all have finished, rank 0 writes the
// manifest and renames the directory into place (atomically replacing an older
// one). A step directory is therefore complete or absent; a killed save leaves
// only a "*.tmp.<pid>" directory, which the trainer removes on its next run.
//
// Loading: any dp loads any checkpoint. A rank file holds "pieces", each a range
// of one param's elements; a loading rank reads the ranges it owns from
// whichever files hold them (its own rank's file first), verifying every chunk
// it reads against its checksum.
//
// Manifest container (and the whole file of a version-1, single-file
// checkpoint), little-endian:
//   "MXDPCKPT"            8 bytes magic
//   u32 format version    2: manifest of a step directory; 1: single file
//   u32 reserved (0)
//   u64 meta_len          length of the JSON metadata that follows
//   meta                  version 2: {"format":"mxdp step directory", "version",
//                         "iteration", "params":[{"name","shape"}...], "extra",
//                         "chunk_bytes", "files":[{"name","bytes","header_checksum"}...]}
//                         version 1: {"version", "iteration", "params", "extra"}
//   [version 1 only]      per param in order: master, m, v (fp32, numel each)
//   u64 checksum          FNV-1a 64 of every byte before it
//
// Rank file, little-endian:
//   "MXDPSHRD"            8 bytes magic
//   u32 version (1), u32 rank
//   u64 n_pieces, u64 chunk_bytes, u64 data_bytes
//   n_pieces x {u64 param, u64 begin, u64 len}      element ranges of params
//   n_chunks x u64        FNV-1a 64 of each data chunk (chunk c: data bytes
//                         [c*chunk_bytes, min((c+1)*chunk_bytes, data_bytes)))
//   u64 header checksum   FNV-1a 64 of every header byte before it
//   data                  per piece in order: master[len], m[len], v[len] (fp32)
// The manifest records each rank file's size and header checksum, so a file
// that is truncated, corrupt or from another checkpoint is refused.
//
// Nothing read from a file is trusted: every length, count and shape is checked
// for overflow and against the bytes present before it is used, and every
// malformed file is an mxdp::Error naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "io/fileio.h"
#include "util/hash.h"

namespace mxdp {

inline constexpr uint32_t kCheckpointVersion = 2;            // manifest of a step directory
inline constexpr uint32_t kSingleFileCheckpointVersion = 1;  // older single-file checkpoints (still load)
inline constexpr uint32_t kRankFileVersion = 1;
inline constexpr uint64_t kCheckpointChunkBytes = uint64_t(4) << 20;
inline constexpr uint64_t kMaxManifestBytes = uint64_t(256) << 20;
inline constexpr const char* kManifestName = "manifest";

// ---- whole checkpoints in memory (tools, tests, the version-1 format) --------

struct ParamState {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> master, m, v;
};

struct CheckpointData {
  int64_t version = 0;    // optimizer updates applied
  int64_t iteration = 0;  // optimizer steps taken (applied + skipped): the LR schedule's clock
  std::vector<ParamState> params;
  nlohmann::json extra = nlohmann::json::object();
};

// The version-1 single-file format. `what` names the source in error messages.
std::vector<uint8_t> serialize_checkpoint(const CheckpointData& c);
CheckpointData deserialize_checkpoint(std::span<const uint8_t> bytes, const std::string& what);

// Either format, whole: a step directory or a version-1 file. moments = false
// leaves m and v empty (a sampler needs only the masters).
CheckpointData read_checkpoint(const std::string& path, bool moments = true);

// ---- step directories ----------------------------------------------------------

struct CheckpointParam {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

struct RankFileInfo {
  std::string name;  // rank_file_name(rank)
  uint64_t bytes = 0;
  uint64_t header_checksum = 0;
};

struct CheckpointManifest {
  int64_t version = 0, iteration = 0;
  std::vector<CheckpointParam> params;
  nlohmann::json extra = nlohmann::json::object();
  uint64_t chunk_bytes = kCheckpointChunkBytes;
  std::vector<RankFileInfo> files;  // file i was written by rank i
};

std::string rank_file_name(int rank);  // "rank_00003.bin"
bool is_step_directory(const std::string& path);  // a directory holding a manifest
std::vector<uint8_t> serialize_manifest(const CheckpointManifest& m);
CheckpointManifest parse_manifest(std::span<const uint8_t> bytes, const std::string& what);
// Reads and validates <dir>/manifest.
CheckpointManifest read_manifest(const std::string& dir);

// What a checkpoint says about itself, without its tensors (either format).
struct CheckpointInfo {
  int64_t version = 0, iteration = 0;
  std::vector<CheckpointParam> params;
  nlohmann::json extra = nlohmann::json::object();
};
CheckpointInfo read_checkpoint_info(const std::string& path);

// One range of a param's elements held by a rank file.
struct StoredPiece {
  int64_t param = 0, begin = 0, len = 0;
};

struct RankFileHeader {
  uint32_t rank = 0;
  uint64_t chunk_bytes = 0, data_bytes = 0, header_bytes = 0, checksum = 0;
  std::vector<StoredPiece> pieces;
  std::vector<uint64_t> piece_offsets;  // data offset of each piece's master
  std::vector<uint64_t> chunk_sums;
};

// Validates a rank file's header. `bytes` starts at the file's first byte and
// holds at least the header (it may hold the whole file); `file_size` is the
// file's size; `params` are the manifest's. Needs 40 bytes to learn the header's
// length: rank_file_header_bytes() gives it from those (validated against file_size).
uint64_t rank_file_header_bytes(std::span<const uint8_t> first, uint64_t file_size, const std::string& what);
RankFileHeader parse_rank_file_header(std::span<const uint8_t> bytes, uint64_t file_size,
                                      const std::vector<CheckpointParam>& params, const std::string& what);

// Streams one rank's pieces into a rank file: append() the data in order (per
// piece: master, m, v), then finish() writes the checksums and syncs.
class RankFileWriter {
 public:
  RankFileWriter(const std::string& path, int rank, std::vector<StoredPiece> pieces,
                 uint64_t chunk_bytes = kCheckpointChunkBytes);
  void append(const float* host, size_t n);
  RankFileInfo finish();

 private:
  void flush_chunk();
  File file_;
  std::string name_;
  RankFileHeader h_;
  std::vector<uint8_t> chunk_;
  uint64_t written_ = 0;
};

// Reads element ranges of a step directory's tensors. Each rank file's header
// is read and checked once, when first needed; every data chunk is checked
// against its checksum as it is read (one chunk is cached).
class CheckpointReader {
 public:
  CheckpointReader(std::string dir, CheckpointManifest manifest);
  const CheckpointManifest& manifest() const { return m_; }
  // Reads file i's header now (a loading rank starts with its own rank's file,
  // which at the same dp holds everything it needs).
  void prefer(int file);
  // Checks that elements [begin, begin + n) of param p are stored (reading more
  // headers if needed), without reading data.
  void check_stored(int p, int64_t begin, int64_t n);
  // n elements of tensor t (0 master, 1 m, 2 v) of param p, from element begin.
  void read(int p, int64_t begin, int64_t n, int tensor, float* out);

 private:
  struct Span {
    int64_t begin, end;
    int file, piece;
  };
  void load_header(int file);
  void load_all_headers();
  const Span* find(int p, int64_t at);
  void read_bytes(int file, uint64_t offset, size_t bytes, uint8_t* out);
  std::string dir_;
  CheckpointManifest m_;
  std::vector<RankFileHeader> headers_;
  std::vector<bool> loaded_;
  std::vector<std::vector<Span>> index_;  // per param, sorted by begin
  bool all_loaded_ = false;
  int cache_file_ = -1;
  uint64_t cache_chunk_ = 0;
  std::vector<uint8_t> cache_;
};

// Puts the complete directory `staged` at `target` atomically, replacing what
// is there (the old one is removed afterwards), and syncs the parent directory.
void commit_directory(const std::string& staged, const std::string& target);

// ---- save directories (mxdp train) -----------------------------------------------

std::string checkpoint_name(int64_t step);           // "step_000012.ckpt"
int64_t checkpoint_step(const std::string& name);    // its step; -1 for any other name
// Removes what interrupted saves left in `dir` ("step_*.tmp.<pid>",
// "latest.tmp.<pid>"); returns the names removed.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);
// Removes all but the newest `keep` checkpoints of `dir` (never `keep_name`);
// returns the names removed.
std::vector<std::string> remove_old_checkpoints(const std::string& dir, int keep, const std::string& keep_name);

}  // namespace mxdp
