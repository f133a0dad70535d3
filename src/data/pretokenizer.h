// The pre-tokenizers of the byte-level BPE families, as a Hugging Face
// tokenizer.json describes them, without a regex library: each known split
// pattern is a hand-written matcher over Unicode classes (unicode_class.h),
// and a tokenizer.json whose pattern is not one of them is refused, naming it.
//
//   ByteLevel (use_regex)      GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Split, behavior Isolated   Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//                                        ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//                              Qwen2:   the same with \p{N} for \p{N}{1,3}
//                              (and GPT-2's pattern, for files that spell it as a Split)
//   Digits                     individual_digits: every \p{N} alone; else runs of \p{N}
//   Sequence                   each step splits the pieces of the one before
//
// ByteLevel's add_prefix_space prepends a space to each piece it gets that does
// not start with one, as `tokenizers` does. The pieces are bytes (UTF-8); the
// byte -> character mapping of ByteLevel is the BPE model's business (bpe.h).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mxdp {

enum class SplitPattern { kGpt2, kLlama3, kQwen2 };

// The byte ranges [begin, end) of the matches of `pattern` in `text` (valid
// UTF-8), left to right; the patterns above match every character, so the
// ranges tile the text.
std::vector<std::pair<size_t, size_t>> split_pattern(SplitPattern pattern, std::string_view text);

class PreTokenizer {
 public:
  // From tokenizer.json's "pre_tokenizer" value; `what` names the file in errors.
  PreTokenizer(const nlohmann::json& j, const std::string& what);

  // Appends the pieces of `text` (valid UTF-8) to `out`.
  void split(std::string_view text, std::vector<std::string>& out) const;
  std::string describe() const;  // "Llama 3 split + ByteLevel", for logs
  // Whether ByteLevel prepends a space to its pieces (then a text cannot be
  // split in chunks without changing the pieces).
  bool adds_prefix_space() const;

 private:
  struct Step {
    enum Kind { kSplit, kDigits, kByteLevel } kind;
    SplitPattern pattern = SplitPattern::kGpt2;  // kSplit, and kByteLevel with use_regex
    bool individual_digits = false;              // kDigits
    bool add_prefix_space = false, use_regex = true;  // kByteLevel
  };
  void add_step(const nlohmann::json& j, const std::string& what);
  static void apply(const Step& s, std::string_view piece, std::vector<std::string>& out);

  std::vector<Step> steps_;
};

}  // namespace mxdp
