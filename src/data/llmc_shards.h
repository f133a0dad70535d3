// llm.c's token shards: what karpathy/llm.c's dev/data scripts (FineWeb,
// TinyStories, tiny Shakespeare, ...) write, readable by `mxdp train --data`.
//
// File layout (little-endian):
//   header  256 x int32: [0] magic 20240520, [1] version, [2] token count,
//           the rest unused
//   tokens  count x uint16 (version 1: GPT-2 tokens, vocabulary 50257)
// The file size must be exactly 1024 + 2*count. Version 2 (uint32 LLaMA-3
// tokens) is refused: mxdp's loaders hold uint16 tokens.
//
// TokenDataset (data.h) opens such a file like its own shards (detected by the
// magic), memory-mapped; a list of them reads as one token sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mxdp {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr uint32_t kLlmcVersionGpt2 = 1;
inline constexpr size_t kLlmcHeaderBytes = 256 * 4;
inline constexpr uint32_t kGpt2VocabSize = 50257;

struct LlmcHeader {
  uint32_t version = 0;
  uint64_t count = 0;  // tokens after the header
};

// The first 4 bytes of `bytes` (size of them present) are llm.c's magic.
bool has_llmc_magic(const unsigned char* bytes, size_t size);
// True when `path` is a regular file that starts with llm.c's magic.
bool is_llmc_shard(const std::string& path);
// Validates the header of an llm.c shard whose whole file is `bytes` (`size`
// bytes): magic, version 1, and size == 1024 + 2*count. Errors name `path`.
LlmcHeader parse_llmc_header(const unsigned char* bytes, size_t size, const std::string& path);

// The training and validation shards that `--data` names, when it names
// llm.c shards: a glob ("dir/fineweb_*.bin"), a comma-separated list of files
// or globs, one shard file, or a directory without mxdp's train.bin whose
// *.bin files are llm.c shards. A shard whose file name has "val" (or
// "valid", "validation") as a word (split at _ - . and spaces; llm.c names
// them fineweb_val_000000.bin, TinyStories_val.bin) is validation data, every
// other one training data; glob matches are taken in sorted order, list
// entries in the order given. Both sets must be non-empty.
// Returns nullopt when `data` is something else (a directory with train.bin,
// a text file, a path that does not exist), which the caller handles.
struct LlmcShardSet {
  std::vector<std::string> train, val;
};
std::optional<LlmcShardSet> find_llmc_shards(const std::string& data);

}  // namespace mxdp
