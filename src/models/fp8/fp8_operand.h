// An operand of the FP8 GEMMs (models/cuda/fp8_gemm.h on the GPU,
// models/fp8/fp8_gemm_emulated.h on the CPU): codes and scales in the layouts
// of formats/fp8_block.h, on the device or the host as the GEMM needs.
#pragma once

#include <cstdint>

#include "formats/quant.h"

namespace mxdp {

// How an operand's scales are laid out (formats/fp8_block.h): 1x128 blocks
// along K (activations, gradients), or 128x128 tiles (weights, padded GEMM layout).
enum class Fp8Scaling : uint8_t { Rows1x128, Tiles128 };

// A rows x K row-major FP8 matrix (K innermost) and its scales.
struct Fp8Operand {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
  Fp8Kind kind = Fp8Kind::E4M3;
  Fp8Scaling scaling = Fp8Scaling::Rows1x128;
};

}  // namespace mxdp
