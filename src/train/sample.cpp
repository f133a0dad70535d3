#include "train/sample.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>

#include "util/check.h"
#include "util/splitmix.h"
#include "data/data.h"
#include "data/utf8.h"

namespace mxdp {

std::string generate(LanguageModel& model, const std::string& prompt, const SampleOptions& opt) {
  return generate(model, *make_byte_tokenizer(), prompt, opt);
}

std::string generate(LanguageModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& opt, ModelHooks* hooks_in) {
  MXDP_CHECK(opt.tokens >= 0, "sample: tokens must be >= 0, got ", opt.tokens);
  MXDP_CHECK(opt.temperature >= 0 && std::isfinite(opt.temperature),
             "sample: temperature must be >= 0, got ", opt.temperature);
  MXDP_CHECK(opt.top_k >= 0, "sample: top_k must be >= 0, got ", opt.top_k);
  const int model_vocab = model.vocab(), max_seq = model.max_seq();
  const int vocab = std::min(tokenizer.vocab_size(), model_vocab);  // ids that can be drawn
  std::vector<int32_t> toks = tokenizer.encode(prompt.empty() ? std::string("\n") : prompt);
  MXDP_CHECK(!toks.empty(), "sample: the prompt encodes to no tokens");
  for (int32_t t : toks)
    MXDP_CHECK(t < model_vocab, "sample: prompt token ", t, " (", tokenizer.describe(),
               ") is outside the model's vocabulary of ", model_vocab);
  const size_t prompt_len = toks.size();
  uint64_t state = opt.seed * kSplitmix64Gamma + 0x1234567ull;
  auto uniform = [&] { return double(splitmix64_mix(state += kSplitmix64Gamma) >> 11) * 0x1.0p-53; };
  NullHooks null_hooks;
  ModelHooks& hooks = hooks_in ? *hooks_in : null_hooks;
  std::vector<int> idx(vocab);
  for (int n = 0; n < opt.tokens; ++n) {
    const int T = int(std::min<size_t>(toks.size(), size_t(max_seq)));
    model.forward_logits(toks.data() + toks.size() - T, 1, T, hooks);
    std::vector<float> logits = model.logits_last(0);
    logits.resize(vocab);
    int next = 0;
    if (opt.temperature == 0) {
      next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      std::iota(idx.begin(), idx.end(), 0);
      int k = opt.top_k > 0 ? std::min(opt.top_k, vocab) : vocab;
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
      std::vector<double> p(k);
      double mx = logits[idx[0]], z = 0;
      for (int i = 0; i < k; ++i) z += (p[i] = std::exp((logits[idx[i]] - mx) / opt.temperature));
      double u = uniform() * z, acc = 0;
      next = idx[k - 1];
      for (int i = 0; i < k; ++i)
        if ((acc += p[i]) > u) {
          next = idx[i];
          break;
        }
    }
    toks.push_back(next);
  }
  return tokenizer.decode(std::span<const int32_t>(toks.data() + prompt_len, toks.size() - prompt_len));
}

std::string tokenizer_mismatch(const Tokenizer& tokenizer, uint32_t data_vocab) {
  const uint32_t v = uint32_t(tokenizer.vocab_size());
  if (data_vocab <= 256 && v == 256) return "";  // byte data, the byte tokenizer
  if (v == data_vocab) return "";
  if (v == 256)
    return ::fmt::format("the data's tokens (vocab {}) need their tokenizer; put its tokenizer.json next to the "
                         "data, or run `mxdp sample --tokenizer FILE`", data_vocab);
  return ::fmt::format("the tokenizer {} does not match the data, whose tokens were encoded with a vocabulary of {}: "
                       "use the tokenizer.json the data was prepared with", tokenizer.describe(), data_vocab);
}

void print_run_sample(LanguageModel& model, const Tokenizer& tokenizer, uint32_t data_vocab, const std::string& prompt,
                      const SampleOptions& so, ModelHooks* hooks) {
  const std::string why = tokenizer_mismatch(tokenizer, data_vocab);
  if (!why.empty()) {
    std::printf("sample: skipped: %s\n", why.c_str());
    std::fflush(stdout);
    return;
  }
  std::printf("sample (%d tokens, temperature %.1f, top-k %d):\n", so.tokens, so.temperature, so.top_k);
  write_text(stdout, prompt + generate(model, tokenizer, prompt, so, hooks) + "\n", false);
}

}  // namespace mxdp
