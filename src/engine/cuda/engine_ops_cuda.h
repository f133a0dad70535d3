// EngineOps on a CUDA device: device memory, the kernels of quant_cuda.h, and
// small kernels for the rest. Bitwise equal to the CPU ops for every operation
// but sum_squares, whose fixed reduction tree differs from the CPU's sequential
// sum (deterministic run to run on the same device, equal within rounding).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "engine/engine_ops.h"
#include "engine/optimizer.h"

namespace mxdp::cuda {

// Work is ordered on `stream` (a new non-blocking stream when null) of the
// current device.
std::unique_ptr<EngineOps> make_cuda_ops(cudaStream_t stream = nullptr);

namespace detail {
// The fused kernels behind EngineOps::adamw_quantize / adamw_amax, for
// benchmarks: `unroll` = float4s each thread keeps in flight per array (1, 2
// or 4; kFusedUnroll is what the ops use). Every choice gives the same bits.
inline constexpr int kFusedUnroll = 2;
void adamw_quantize(WeightFormat f, ScaleRounding r, float* p, float* m, float* v, const float* g, int64_t n,
                    const StepControl* ctl, const AdamWChoice& s, uint8_t* codes, uint8_t* scales,
                    cudaStream_t stream, int unroll = kFusedUnroll);
void adamw_amax(float* p, float* m, float* v, const float* g, int64_t n, const StepControl* ctl,
                const AdamWChoice& s, float* amax, cudaStream_t stream, int unroll = kFusedUnroll);
// fp8b128's AdamW + stage in one pass over a rows x cols slab piece (compact
// tile scales), the bits of adamw_amax then fp8b128_quantize. Needs cols % 4
// == 0, p, m, v and g 16-byte aligned and codes 4-byte aligned: false (and
// nothing enqueued) otherwise, for the caller's two-pass fallback.
// min_blocks: the kernel's CTAs an SM, 1 or 2 (kTileMinBlocks is what the ops
// use); both give the same bits.
inline constexpr int kTileMinBlocks = 2;
bool adamw_tile_quant(float* p, float* m, float* v, const float* g, int64_t rows, int64_t cols,
                      const StepControl* ctl, const AdamWChoice& a, uint8_t* codes, float* scales,
                      cudaStream_t stream, int min_blocks = kTileMinBlocks);
// Whether adamw_quantize_ranges of a slab format's `ranges` (made by CUDA
// ops) with these base pointers runs in one launch: every range's cols and
// begin multiples of 4, p, m, v, g 16-byte and codes, scales 4-byte aligned.
// Otherwise it runs adamw_quantize range by range; the same bits.
bool slab_ranges_in_one_launch(const AdamWRanges& ranges, const float* p, const float* m, const float* v,
                               const float* g, const uint8_t* codes, const uint8_t* scales);
}  // namespace detail

}  // namespace mxdp::cuda
