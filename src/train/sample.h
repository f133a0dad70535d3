// Text generation from a language model (models/registry.h): temperature and
// top-k sampling.
#pragma once

#include <cstdint>
#include <string>

#include "models/registry.h"
#include "data/tokenizer.h"

namespace mxdp {

struct SampleOptions {
  int tokens = 200;          // new tokens to generate
  float temperature = 0.8f;  // 0 = greedy (argmax)
  int top_k = 40;            // 0 = no top-k filter
  uint64_t seed = 0;
};

// Continues `prompt` (an empty prompt starts from a newline) and returns only
// the generated text, as bytes (tokenizer.decode). Uses the model's current
// compute weights; the context is cropped to the model's max_seq().
// Deterministic for a given seed. Only ids both the model and the tokenizer
// know are drawn (a model whose vocabulary is larger than the tokenizer's
// never emits the rest); a prompt token outside the model's vocabulary is an error.
// `hooks`: what the model's forwards are handed (nullptr: NullHooks, weights
// already in place; a model computing in FP8 needs hooks with its FP8 weights).
std::string generate(LanguageModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& opt, ModelHooks* hooks = nullptr);
// The same with the byte tokenizer.
std::string generate(LanguageModel& model, const std::string& prompt, const SampleOptions& opt);

// The end-of-run sample of `mxdp train` on stdout: a "sample (...):" line, then
// prompt + generated text (invalid UTF-8 replaced, utf8.h). Skipped with a note
// when the data's tokens (`data_vocab` ids) need a tokenizer the data does not
// come with (llm.c shards without a tokenizer.json beside them).
// Why `tokenizer` cannot decode tokens of data encoded with a vocabulary of
// data_vocab (the byte tokenizer is right for data_vocab <= 256; any other
// must have exactly that vocabulary); "" when it can.
std::string tokenizer_mismatch(const Tokenizer& tokenizer, uint32_t data_vocab);

void print_run_sample(LanguageModel& model, const Tokenizer& tokenizer, uint32_t data_vocab, const std::string& prompt,
                      const SampleOptions& opt, ModelHooks* hooks = nullptr);

}  // namespace mxdp
