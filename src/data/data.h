// Data: byte-level tokenizer, token shard files, and the loaders that cut them
// into next-token batches for data-parallel training.
//
// Tokenizer. Vocabulary of 256: token = byte value (0..255). Any byte string
// encodes, every token sequence of values < 256 decodes back to the same bytes.
//
// Shard file (`train.bin`, `val.bin`), all integers little-endian:
//
//   offset  size  field
//        0     8  magic       "MXDPTOK1" (ASCII, no terminator)
//        8     4  version     uint32, = 1
//       12     4  vocab_size  uint32, every token is < vocab_size (256 here)
//       16     4  token_bytes uint32, 2: tokens are uint16 (vocab_size <= 65536);
//                             4: uint32 (larger vocabularies, up to 2^24)
//       20     4  reserved    uint32, = 0
//       24     8  count       uint64, number of tokens
//       32     8  checksum    uint64, FNV-1a 64 over the payload bytes
//       40    24  reserved    zero
//       64   token_bytes*count  payload tokens
//
// The file size must be exactly 64 + token_bytes*count. Opening a shard checks magic,
// version, token_bytes, size, checksum and every token < vocab_size, and fails
// with a message naming the file and what is wrong.
//
// DataLoader (training). The shard is cut into K = (N-1)/T windows of T+1
// tokens (N = tokens in the shard): window k starts at offset_e + k*T, so
// consecutive windows share one token and every token but the first is a
// target once per epoch. Each epoch e draws offset_e in [0, N-1-K*T] (the
// slack left at the end) and a permutation of the K windows, both from a
// SplitMix64 stream seeded by (seed, e), with our own Fisher-Yates (no
// std::shuffle, whose output differs between standard libraries). Step s of
// epoch e uses the global batch of windows perm[s*G .. s*G+G-1], G =
// world_size*B; rank r takes sequences r*B .. r*B+B-1 of it. An epoch has
// floor(K/G) steps (the last K mod G windows of the permutation are skipped).
// The global batch depends only on (shard, seed, T, G), so a run with dp=1,
// batch G sees exactly the union of what dp=W ranks of batch B see, and a
// checkpoint can be resumed with any (W, B) of the same product G.
//
// EvalLoader (validation). Windows at fixed offsets 0, T, 2T, ... in order, no
// randomness; batch i uses windows i*G .. i*G+G-1, rank r again its slice r*B..
// r*B+B-1. Every eval pass reads the same eval_batches batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "util/hash.h"
#include "models/model.h"

namespace mxdp {

// ---- tokenizer --------------------------------------------------------------

struct ByteTokenizer {
  static constexpr int kVocabSize = 256;
  static std::vector<uint16_t> encode(std::string_view text);
  // Fails on a token outside [0, 256).
  static std::string decode(std::span<const uint16_t> tokens);
  static std::string decode(std::span<const int32_t> tokens);
};

// ---- shard files ------------------------------------------------------------

inline constexpr char kShardMagic[8] = {'M', 'X', 'D', 'P', 'T', 'O', 'K', '1'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;



// Writes a shard atomically (fileio.h, write_file_atomic): every write checked.
void write_shard(const std::string& path, std::span<const uint16_t> tokens,
                 uint32_t vocab_size = ByteTokenizer::kVocabSize);
// The same with 4-byte tokens, for a vocabulary past 65536 (at most kMaxShardVocab).
void write_shard(const std::string& path, std::span<const uint32_t> tokens, uint32_t vocab_size);
inline constexpr uint32_t kMaxShardVocab = uint32_t(1) << 24;

// Validates a whole shard file's bytes, as TokenDataset does on open (`what`
// names the file in errors).
struct ShardInfo {
  uint32_t vocab_size = 0;
  uint32_t token_bytes = 2;
  uint64_t count = 0;
};
ShardInfo check_shard_bytes(std::span<const uint8_t> bytes, const std::string& what);

// A validated, read-only, memory-mapped shard. Move-only. `path` may also be
// an llm.c token shard (llmc_shards.h; told apart by its magic): GPT-2 tokens
// (2 bytes, vocab_size 50257) or Llama 3 tokens (4 bytes, vocab_size 128256).
class TokenDataset {
 public:
  explicit TokenDataset(const std::string& path);
  // Several shards (either format) read in order as one token sequence; each
  // stays memory-mapped on its own. vocab_size is the largest of theirs.
  explicit TokenDataset(const std::vector<std::string>& paths);
  ~TokenDataset();
  TokenDataset(TokenDataset&& other) noexcept;
  TokenDataset& operator=(TokenDataset&& other) noexcept;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  const std::string& path() const { return path_; }
  uint32_t vocab_size() const { return vocab_size_; }
  size_t size() const { return count_; }
  // 2 (uint16) or 4 (uint32; then for every file of a dataset of several).
  uint32_t token_bytes() const { return token_bytes_; }
  // All tokens, for a dataset of one file of 2-byte tokens (throws otherwise: use window() or read()).
  std::span<const uint16_t> tokens() const;
  // Tokens [start, start + n) of 2-byte shards: in place when they lie in one
  // file, else copied into `scratch`. Requires start + n <= size().
  const uint16_t* window(size_t start, size_t n, std::vector<uint16_t>& scratch) const;
  // Tokens [start, start + n) of shards of either width, into out[0, n).
  void read(size_t start, size_t n, int32_t* out) const;

 private:
  void release();
  void open_llmc(const unsigned char* header, size_t size);  // the mapped file is an llm.c shard
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* payload_ = nullptr;  // count_ tokens of token_bytes_ each
  size_t count_ = 0;
  uint32_t token_bytes_ = 2;
  uint32_t vocab_size_ = 0;
  std::vector<TokenDataset> parts_;  // several files: each part, and where it starts
  std::vector<size_t> part_start_;
};

// ---- prepare ----------------------------------------------------------------

struct PrepareResult {
  size_t bytes_read = 0;
  uint64_t source_fnv1a64 = 0;  // FNV-1a 64 of the bytes tokenized
  size_t train_tokens = 0;
  size_t val_tokens = 0;
  std::string train_path;
  std::string val_path;
};

// Tokenizes the text file `input_path` (bytes) and writes `output_dir`/train.bin
// (the first bytes) and `output_dir`/val.bin (the last floor(val_fraction * n)
// bytes), creating `output_dir` if needed. 0 < val_fraction < 1; both parts
// must be non-empty. Prints a summary to `log` unless it is null.
PrepareResult prepare(const std::string& input_path, const std::string& output_dir,
                      double val_fraction, std::FILE* log = stdout);

// A text file given to `mxdp train --data` is prepared into prepared_dir(file)
// = "<file>.mxdp/" beside it (kjv.txt -> kjv.txt.mxdp/): the directory is named
// after the whole file name, so other.txt and other.md never share one. Beside
// the shards, source.json records what they were made from:
//   {"source": absolute path, "bytes": size, "fnv1a64": hash of the content,
//    "val_fraction": ..., "tokenizer": "byte"}
// prepare_cached() prepares the file unless source.json matches it as it is now
// (path, size and content hash; modification times play no part), so a changed
// or different source is prepared again, never mistaken for another. The record
// is written last and removed first, so an interrupted prepare is redone.
// Returns the directory; prints one line to `log` when it prepares.
std::string prepared_dir(const std::string& text_path);
std::string prepare_cached(const std::string& text_path, double val_fraction, std::FILE* log);

// ---- loaders ----------------------------------------------------------------

// Where a DataLoader is. Serialized with the geometry it was made for, so that
// restoring into a loader with a different seed, T, global batch or shard
// size is an error rather than a silently different data order.
struct DataLoaderState {
  uint64_t epoch = 0;
  uint64_t step = 0;  // next step within the epoch
  // Geometry, checked by set_state.
  uint64_t seed = 0;
  int64_t seq_len = 0;
  int64_t global_batch = 0;
  uint64_t dataset_tokens = 0;

  bool operator==(const DataLoaderState&) const = default;
};
void to_json(nlohmann::json& j, const DataLoaderState& s);
void from_json(const nlohmann::json& j, DataLoaderState& s);

// Training batches for rank `rank` of `world_size`. Keeps a reference to
// `dataset`, which must outlive it.
class DataLoader {
 public:
  DataLoader(const TokenDataset& dataset, int B, int T, int rank, int world_size, uint64_t seed);

  // Fills `batch` with this rank's B sequences of the next global batch and
  // advances. The pointers in `batch` stay valid until the next call.
  void next(Batch& batch);

  DataLoaderState state() const;
  void set_state(const DataLoaderState& s);

  int B() const { return B_; }
  int T() const { return T_; }
  size_t num_windows() const { return num_windows_; }
  size_t steps_per_epoch() const { return steps_per_epoch_; }
  // Start offset (into the shard) of window k of the current epoch's order,
  // i.e. of global sequence k % G of step k / G. For tests and debugging.
  size_t window_start(size_t k) const { return offset_ + size_t(perm_[k]) * size_t(T_); }

 private:
  void start_epoch(uint64_t epoch);
  const TokenDataset* data_;
  int B_, T_, rank_, world_size_;
  uint64_t seed_;
  size_t num_windows_ = 0, steps_per_epoch_ = 0;
  uint64_t epoch_ = 0, step_ = 0;
  size_t offset_ = 0;
  std::vector<uint32_t> perm_;
  std::vector<int32_t> inputs_, targets_;
};

// Deterministic validation batches: the same `eval_batches` batches every pass.
class EvalLoader {
 public:
  EvalLoader(const TokenDataset& dataset, int B, int T, int rank, int world_size, int eval_batches);
  // The most eval batches `tokens` tokens can give (0 when too few).
  static int max_batches(size_t tokens, int B, int T, int world_size);

  // Fills `batch` with the next batch of this pass; false after the last one.
  bool next(Batch& batch);
  void reset() { next_ = 0; }
  int num_batches() const { return eval_batches_; }

 private:
  const TokenDataset* data_;
  int B_, T_, rank_, world_size_, eval_batches_;
  int next_ = 0;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace mxdp
