// Byte-level BPE from a Hugging Face tokenizer.json of GPT-2's kind: what
// `tokenizers` writes for ByteLevelBPETokenizer / GPT-2 (and the files that
// ship with GPT-2 models). Encoding gives the ids the `tokenizers` package
// gives (tests/test_bpe.cpp checks it on a tokenizer trained on the corpus):
//
//   1. added tokens (added_tokens, e.g. <|endoftext|>) are cut out of the text
//      first, leftmost-longest, and become their own ids;
//   2. every other piece is pre-tokenized by the ByteLevel pre-tokenizer: an
//      optional prefix space (add_prefix_space), then GPT-2's regex (use_regex)
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      and each piece's UTF-8 bytes are mapped to printable characters
//      (GPT-2's bytes_to_unicode table: bytes 0x21-0x7E, 0xA1-0xAC and
//      0xAE-0xFF stand for themselves, the other 68 bytes for U+0100 onwards);
//   3. each word starts as its characters and is merged by the model's merge
//      list: always the pair of lowest rank, leftmost first, until none applies
//      (a character missing from the vocabulary becomes unk_token if there is
//      one, else it is dropped, as `tokenizers` does).
// Decoding maps each token's characters back to bytes (a token with a
// character outside the table, such as an added token, gives its UTF-8 as is).
//
// Supported: normalizer null; pre_tokenizer ByteLevel; decoder ByteLevel or
// null; post_processor ByteLevel or null; model BPE without dropout, without
// continuing_subword_prefix / end_of_word_suffix; merges as "a b" strings or
// [a, b] pairs; added tokens without lstrip / rstrip / single_word. Anything
// else is refused with an error naming the field.
//
// Not thread-safe: encode() caches the ids of the words it has seen.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/tokenizer.h"

namespace mxdp {

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

  // Step 2 alone: the byte ranges [begin, end) of the pre-tokens of `text`
  // (valid UTF-8) under GPT-2's regex. For tests.
  static std::vector<std::pair<size_t, size_t>> split_gpt2(std::string_view text);

 private:
  struct PairHash {
    size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9e3779b97f4a7c15ull); }
  };
  struct Merge {
    int32_t rank, id;
  };
  void parse(const std::string& json_text);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word_bytes, std::vector<int32_t>& out) const;

  std::string what_;
  int vocab_size_ = 0;
  bool add_prefix_space_ = false, use_regex_ = true, ignore_merges_ = false, fuse_unk_ = false;
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
