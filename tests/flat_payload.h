// The payload of a flat range of n elements as the engine ops write it (codes,
// then scales), shared by the CPU and GPU engine-ops tests. From quant.h's byte
// counts, not from the engine's layout (which pads whole shards).
#pragma once

#include <cstdint>

#include "engine/engine_ops.h"
#include "engine/options.h"
#include "formats/format.h"
#include "formats/quant.h"
#include "util/check.h"

namespace mxdp::testing {

// Codes then scales of a flat range of n elements (n need not be whole blocks).
struct FlatShape {
  int64_t code_bytes, shard_bytes;
};
inline FlatShape flat_shape(WeightFormat f, int64_t n) {
  switch (f) {
    case WeightFormat::Bf16: return {2 * n, 2 * n};
    case WeightFormat::Mxfp8: return {mxfp8_code_bytes(1, n), mxfp8_code_bytes(1, n) + mxfp8_scale_bytes_rowwise(1, n)};
    case WeightFormat::Nvfp4: return {nvfp4_code_bytes(1, n), nvfp4_code_bytes(1, n) + nvfp4_scale_bytes(1, n)};
    case WeightFormat::Fp8b128: break;
  }
  MXDP_FAIL("flat_shape: ", to_string(f), " quantizes 128x128 tiles of a matrix, not a flat range of elements");
}

// The control of an applied step with AdamW count t and clip coefficient gs
// (with adamw_choice of params whose t is t, it picks t's scalars).
inline StepControl step_ctl(int64_t t, float gs, bool skip = false) {
  StepControl c;
  c.updates = t;
  c.grad_scale = gs;
  c.skip = skip ? 1 : 0;
  return c;
}

}  // namespace mxdp::testing
