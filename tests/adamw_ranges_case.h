// The ranges of one shard that the CPU and GPU engine-ops tests run
// EngineOps::adamw_quantize_ranges on, and its per-range reference.
#pragma once

#include <cstdint>
#include <iterator>
#include <span>
#include <vector>

#include "engine/engine_ops.h"
#include "formats/format.h"
#include "engine/optimizer.h"

namespace mxdp::testing {

struct RangeCase {
  std::vector<AdamWRange> list;
  int64_t numel = 0;  // the shard: past the last range, whole blocks
};

// What a bucket's decay runs look like, and harder: `tiny` rounds of small
// ranges (a 768-element bias, a LayerNorm's 2 x 768, one block, lengths that are
// not whole blocks or float4s, an empty range), gaps between some ranges (no
// range touches them: bf16's make the next range's pointers unaligned), the
// choices cycling through 0, 1, 2, and one long range of `big` elements in the
// middle. Every begin at a block boundary of f.
inline RangeCase range_case(WeightFormat f, int tiny, int64_t big) {
  const int64_t block = format_traits(f).block;
  const auto round_up = [&](int64_t x) { return (x + block - 1) / block * block; };
  const int64_t lens[] = {768, 1536, 32, 5, 1000, 0, 33, 2304, 31};
  const int64_t gaps[] = {0, 0, 3, 0, 64, 0, 1, 0, 0};  // elements skipped before the range (then whole blocks)
  RangeCase c;
  int64_t end = 0;
  int k = 0;
  const auto add = [&](int64_t gap, int64_t len) {
    const int64_t begin = round_up(end + gap);
    c.list.push_back({begin, len, int32_t(k++ % 3)});
    end = begin + len;
  };
  for (int round = 0; round < tiny; ++round) {
    for (size_t i = 0; i < std::size(lens); ++i) add(gaps[i], lens[i]);
    if (round == tiny / 2) add(0, big);
  }
  if (tiny == 0) add(0, big);
  c.numel = round_up(end) + 256;  // a tail no range covers
  return c;
}

// Three AdamW choices that differ in every range-dependent way: no decay, the
// engine's decay, and another learning rate with another decay. first_t is t.
inline std::vector<AdamWChoice> range_choices(int64_t t) {
  return {adamw_choice(AdamWParams{2e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, t}),
          adamw_choice(AdamWParams{2e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t}),
          adamw_choice(AdamWParams{5e-4f, 0.9f, 0.95f, 1e-8f, 0.05f, t})};
}

// The contract's right-hand side: adamw_quantize of each range, one by one.
inline void adamw_quantize_each(EngineOps& ops, WeightFormat f, ScaleRounding r, float* p, float* m, float* v,
                                const float* g, const StepControl* ctl, std::span<const AdamWChoice> choices,
                                const std::vector<AdamWRange>& list, uint8_t* codes, uint8_t* scales) {
  const FormatTraits& ft = format_traits(f);
  for (const AdamWRange& a : list)
    ops.adamw_quantize(f, r, p + a.begin, m + a.begin, v + a.begin, g + a.begin, a.len, ctl, choices[a.choice],
                       codes + ft.code_bytes(a.begin), scales + ft.scales_bytes(a.begin));
}

}  // namespace mxdp::testing
