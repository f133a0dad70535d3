// Text generation from a GPT: temperature and top-k sampling, byte-level.
#pragma once

#include <cstdint>
#include <string>

#include "gpt.h"

namespace mxdp {

struct SampleOptions {
  int tokens = 200;          // new tokens to generate
  float temperature = 0.8f;  // 0 = greedy (argmax)
  int top_k = 40;            // 0 = no top-k filter
  uint64_t seed = 0;
};

// Continues `prompt` (an empty prompt starts from a newline) and returns only
// the generated text. Uses the model's current compute weights; the context is
// cropped to the model's max_seq. Deterministic for a given seed.
std::string generate(GptModel& model, const std::string& prompt, const SampleOptions& opt);

}  // namespace mxdp
