// Byte-level BPE from a Hugging Face tokenizer.json: GPT-2's kind (what
// `tokenizers` writes for ByteLevelBPETokenizer, the files of GPT-2 models)
// and the Llama 3, Qwen2 / Qwen2.5 and SmolLM2 families. Encoding gives the ids
// the `tokenizers` package gives with add_special_tokens=False
// (tests/test_bpe.cpp, tests/test_tokenizers.cpp):
//
//   1. added tokens (added_tokens, e.g. <|endoftext|>, <|begin_of_text|>,
//      <|im_start|>) are cut out of the raw text first, leftmost-longest, and
//      become their own ids (numbered as `tokenizers` numbers them on loading:
//      a vocabulary token's id, else the next id after the vocabulary and the
//      added tokens before it; the published files say the same ids);
//   2. every other piece is normalized (NFC where the normalizer says so,
//      unicode_nfc.h), then split by the pre-tokenizer (pretokenizer.h: GPT-2's
//      ByteLevel regex, Llama 3's or Qwen2's Split regex, SmolLM2's Digits +
//      ByteLevel), and each piece's UTF-8 bytes are mapped to printable
//      characters (GPT-2's bytes_to_unicode table: bytes 0x21-0x7E, 0xA1-0xAC
//      and 0xAE-0xFF stand for themselves, the other 68 bytes for U+0100 onwards);
//   3. a piece that is a vocabulary token is that token when ignore_merges is set
//      (Llama 3); else it starts as its characters and is merged by the model's
//      merge list: always the pair of lowest rank, leftmost first, until none
//      applies (a character missing from the vocabulary becomes unk_token if
//      there is one, else it is dropped, as `tokenizers` does).
// Decoding maps each token's characters back to bytes (a token with a
// character outside the table, such as an added token, gives its UTF-8 as is);
// special tokens are kept (skip_special_tokens=False).
//
// Supported: normalizer null or NFC; the pre-tokenizers of pretokenizer.h;
// decoder ByteLevel or null; post_processor ByteLevel, TemplateProcessing, a
// Sequence of them, or null (the template adds BOS only when `tokenizers` is
// asked for special tokens; mxdp never adds them); model BPE without dropout,
// byte_fallback, continuing_subword_prefix / end_of_word_suffix; merges as
// "a b" strings or [a, b] pairs; added tokens without lstrip / rstrip /
// single_word, and not "normalized" under NFC. Anything else is refused with an
// error naming the field.
//
// Not thread-safe: encode() caches the ids of the words it has seen.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/pretokenizer.h"
#include "data/tokenizer.h"

namespace mxdp {

// Ids are below this (the shards of `mxdp prepare` need them below 65536).
inline constexpr int64_t kMaxTokenizerId = int64_t(1) << 24;

class BpeTokenizer final : public Tokenizer {
 public:
  // Reads and validates a tokenizer.json; errors name the file and the field.
  explicit BpeTokenizer(const std::string& path);
  // The same from the file's text; `what` names it in errors.
  BpeTokenizer(const std::string& json_text, const std::string& what);

  std::string describe() const override;
  int vocab_size() const override { return vocab_size_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;

 private:
  struct PairHash {
    size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9e3779b97f4a7c15ull); }
  };
  struct Merge {
    int32_t rank, id;
  };
  void parse(const std::string& json_text);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_chunk(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word_bytes, std::vector<int32_t>& out) const;

  std::string what_;
  int vocab_size_ = 0;
  bool ignore_merges_ = false, fuse_unk_ = false, nfc_ = false;
  std::optional<PreTokenizer> pre_tokenizer_;
  int32_t unk_id_ = -1;
  std::unordered_map<std::string, int32_t> vocab_;          // token (mapped characters) -> id
  std::vector<std::string> id_to_token_;                    // id -> token ("" where no token)
  std::vector<bool> is_added_;                              // id is an added token
  std::unordered_map<uint64_t, Merge, PairHash> merges_;    // (left id << 32 | right id) -> merge
  std::vector<std::pair<std::string, int32_t>> added_;      // added tokens: content, id
  int32_t byte_id_[256];                                    // id of each byte's character, -1 if none
  std::string byte_char_[256];                              // each byte's character, UTF-8
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // word bytes -> ids
};

}  // namespace mxdp
