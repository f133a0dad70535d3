// llm.c's token shards: what karpathy/llm.c's dev/data scripts (FineWeb,
// TinyStories, tiny Shakespeare, ...) write, readable by `mxdp train --data`.
//
// File layout (little-endian; dev/data/data_common.py, write_datafile):
//   header  256 x int32: [0] magic, [1] version, [2] token count, the rest
//           unused
//   tokens  count tokens, of the width the magic and version name:
//             GPT-2   (model_desc "gpt-2"):   magic 20240520, version 1,
//                     uint16 tokens, vocabulary 50257
//             Llama 3 (model_desc "llama-3"): magic 20240801, version 7,
//                     uint32 tokens, vocabulary 128256
// The file size must be exactly 1024 + width*count. Any other version under a
// magic is refused, naming what llm.c writes.
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

inline constexpr size_t kLlmcHeaderBytes = 256 * 4;

// One of the two kinds of shard llm.c writes.
struct LlmcFormat {
  int32_t magic;
  uint32_t version;
  uint32_t token_bytes;  // 2: uint16, 4: uint32
  uint32_t vocab_size;   // every token is below it
  const char* name;      // the tokenizer, for messages
};
inline constexpr LlmcFormat kLlmcGpt2{20240520, 1, 2, 50257, "GPT-2"};
inline constexpr LlmcFormat kLlmcLlama3{20240801, 7, 4, 128256, "Llama 3"};

struct LlmcHeader {
  const LlmcFormat* format = nullptr;
  uint64_t count = 0;  // tokens after the header
};

// The format whose magic the first 4 bytes of `bytes` (size of them present)
// are; nullptr when they are neither of llm.c's.
const LlmcFormat* llmc_format_of(const unsigned char* bytes, size_t size);
// The format of the regular file `path` by its magic; nullptr when it is not
// a regular file or does not start with one of llm.c's magics.
const LlmcFormat* llmc_format_of_file(const std::string& path);
bool is_llmc_shard(const std::string& path);
// Validates the header of an llm.c shard whose whole file is `bytes` (`size`
// bytes): magic, the version that goes with it, and size == 1024 +
// token_bytes*count. Errors name `path`.
LlmcHeader parse_llmc_header(const unsigned char* bytes, size_t size, const std::string& path);

// The training and validation shards that `--data` names, when it names
// llm.c shards: a glob ("dir/fineweb_*.bin"), a comma-separated list of files
// or globs, one shard file, or a directory without mxdp's train.bin whose
// *.bin files are llm.c shards. A shard whose file name has "val" (or
// "valid", "validation") as a word (split at _ - . and spaces; llm.c names
// them fineweb_val_000000.bin, TinyStories_val.bin) is validation data, every
// other one training data; glob matches are taken in sorted order, list
// entries in the order given. Both sets must be non-empty, and every shard of
// both of one format (GPT-2 and Llama 3 shards are two tokenizers' ids: a mix
// is refused, naming a file of each).
// Returns nullopt when `data` is something else (a directory with train.bin,
// a text file, a path that does not exist), which the caller handles.
struct LlmcShardSet {
  std::vector<std::string> train, val;
};
std::optional<LlmcShardSet> find_llmc_shards(const std::string& data);

}  // namespace mxdp
