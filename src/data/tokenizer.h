// Tokenizers: text <-> token ids, for `mxdp prepare` (encode a corpus) and
// `mxdp sample` (encode the prompt, decode what the model writes).
//
//   bytes : token = byte value, vocabulary 256 (data.h's ByteTokenizer); the default.
//   bpe   : a byte-level BPE tokenizer given as a Hugging Face tokenizer.json
//           (GPT-2, Llama 3, Qwen2, SmolLM2; bpe.h).
//
// decode() returns bytes: a sequence of tokens can cut a UTF-8 character in
// two, so text printed to a terminal goes through utf8.h.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/data.h"

namespace mxdp {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string describe() const = 0;  // for logs: "bytes (vocab 256)", "bpe FILE (vocab N)"
  virtual int vocab_size() const = 0;        // every id is in [0, vocab_size)
  // Throws mxdp::Error for text the tokenizer cannot take (the BPE tokenizer
  // needs valid UTF-8).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws mxdp::Error for an id outside [0, vocab_size).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();
// A Hugging Face tokenizer.json (bpe.h); an empty path gives the byte tokenizer.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// The file name under which `mxdp prepare --tokenizer` keeps a copy of the
// tokenizer next to the shards it wrote, so that the data says how to read it.
inline constexpr const char* kDataTokenizerFile = "tokenizer.json";
// DIR/tokenizer.json if it exists, else the byte tokenizer.
std::unique_ptr<Tokenizer> data_tokenizer(const std::string& dir);

// `mxdp prepare --tokenizer FILE`: encodes the whole text file `input_path`
// with the tokenizer at `tokenizer_path` and writes output_dir/train.bin (the
// first tokens) and output_dir/val.bin (the last floor(val_fraction * count)
// tokens), shards whose vocab_size is the tokenizer's (2-byte tokens up to
// 65536 ids, 4-byte past that), plus a copy of the
// tokenizer as output_dir/tokenizer.json. Same checks as prepare() (data.h).
PrepareResult prepare_with_tokenizer(const std::string& input_path, const std::string& output_dir,
                                     double val_fraction, const std::string& tokenizer_path,
                                     std::FILE* log = stdout);

}  // namespace mxdp
