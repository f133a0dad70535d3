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
#include "flat_payload.h"

namespace mxdp::testing {

struct RangeCase {
  std::vector<AdamWRange> list;
  int64_t numel = 0;  // the shard: past the last range, whole blocks
  // The shard's payload: its codes, then its scales (a slab format's 16-byte
  // aligned after the codes, as many as its ranges' tiles).
  int64_t code_bytes = 0, payload_bytes = 0;
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
  const FlatShape ps = flat_shape(f, c.numel);
  c.code_bytes = ps.code_bytes;
  c.payload_bytes = ps.shard_bytes;
  return c;
}

// A slab format's shard (fp8b128): pieces of matrices as a bucket holds them,
// each its own tiles, and harder: widths that are whole tiles (128), not
// (1600, 48, 144, 16), rows that fill no last tile (300, 200, 1), an empty
// piece, `big_rows` rows of 1600 in the middle, choices cycling through 0, 1,
// 2. gap4: the gaps between pieces are whole float4s (the one-pass kernel's
// case) or not (3 elements: a piece's pointers off their 16-byte alignment).
// Scales piece after piece, as the layout places them.
inline RangeCase slab_case(WeightFormat f, int64_t big_rows, bool gap4) {
  const FormatTraits& ft = format_traits(f);
  struct Matrix {
    int64_t rows, cols, gap;
  };
  const Matrix ms[] = {{256, 1600, 0}, {300, 48, 4}, {0, 64, 0},   {200, 144, 0},
                       {big_rows, 1600, 8}, {1, 16, 4}, {128, 128, 0}, {130, 1600, 4}};
  RangeCase c;
  int64_t end = 0, scales = 0;
  int k = 0;
  for (const Matrix& x : ms) {
    const int64_t begin = end + (gap4 ? x.gap : x.gap ? 3 : 0);
    c.list.push_back({begin, x.rows * x.cols, int32_t(k++ % 3), x.cols, scales});
    end = begin + x.rows * x.cols;
    scales += ft.matrix_scales(x.rows, x.cols);
  }
  c.numel = end + 256;
  c.code_bytes = (c.numel + 15) / 16 * 16;
  c.payload_bytes = c.code_bytes + scales * ft.scale_bytes;
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
  for (const AdamWRange& a : list) {
    const int64_t scales_at = ft.block_rows > 1 ? a.scale_pos * ft.scale_bytes : ft.scales_bytes(a.begin);
    ops.adamw_quantize(f, r, p + a.begin, m + a.begin, v + a.begin, g + a.begin, a.len, ctl, choices[a.choice],
                       codes + ft.code_bytes(a.begin), scales ? scales + scales_at : nullptr, a.cols);
  }
}

}  // namespace mxdp::testing
