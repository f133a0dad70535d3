// EngineOps: everything the data-parallel engine does to memory, behind one
// narrow interface, so that the engine's logic (layout, freshness chain,
// collective order, checkpoints) is the same code on the CPU and on a GPU.
//
// Pointers are in the ops' memory space (host for the CPU ops, device memory
// for CUDA ops); the model's weights() live there too. Operations are ordered
// on stream() (nullptr on the CPU); copy_to_host and the host-valued results
// (amax, sum_squares) are complete on return: those are the host waits, which
// host_waits() counts. An optimizer step makes none: its scalars (grad norm,
// clip coefficient, skip, AdamW count) are decided on the stream by
// step_control and read there by the fused AdamW passes, and its results reach
// the host through copy_to_host_async, read after wait(mark) once the host has
// gone on to the next step. Every operation is deterministic: the same inputs
// give the same bits run to run (fixed reduction order).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "models/model.h"
#include "engine/optimizer.h"
#include "engine/options.h"
#include "formats/fp8_block.h"
#include "util/check.h"

namespace mxdp {

// The optimizer step's scalars, in ops memory: written by step_control from the
// step's grad-norm partial sums, read by the fused AdamW passes of the same step.
struct StepControl {
  double grad_norm = 0;  // global grad norm before clipping
  int64_t updates = 0;   // AdamW updates applied so far, this step's included if it applied
  float grad_scale = 1;  // clip coefficient (1: none)
  int32_t skip = 0;      // 1: non-finite grad norm; AdamW leaves p, m, v as they are
};

// step_control's arithmetic, the definition every implementation gives the bits
// of: total = sum over c < cols, then r < rows, of partials[r * stride + c] (that
// order, in double); grad_norm = sqrt(total); skip = !isfinite(grad_norm);
// grad_scale = float(clip / (grad_norm + 1e-6)) when clip > 0 and that is < 1,
// else 1; updates += !skip.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline void step_control_of(const double* partials, int rows, int stride, int cols, double clip_grad,
                            StepControl& c) {
  double total = 0;
  for (int col = 0; col < cols; ++col)
    for (int r = 0; r < rows; ++r) total += partials[size_t(r) * stride + col];
  c.grad_norm = std::sqrt(total);
  c.skip = c.grad_norm - c.grad_norm == 0.0 ? 0 : 1;  // x - x is 0 exactly when x is finite
  c.grad_scale = 1.0f;
  if (!c.skip && clip_grad > 0) {
    const double coeff = clip_grad / (c.grad_norm + 1e-6);
    if (coeff < 1.0) c.grad_scale = float(coeff);
  }
  c.updates += c.skip ? 0 : 1;
}

// One piece of an unpack: len elements of a gathered payload (codes, the
// scales of a format that has them, the tensor amax of one that needs it:
// format.h) into a model's compute weights. Every pointer in the ops' memory space.
struct UnpackPiece {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  const float* amax = nullptr;  // formats with tensor_amax only
  void* dst = nullptr;
  int64_t len = 0;
  int64_t cols = 0;             // slab formats only: the piece is a (len / cols) x cols matrix
};

// The argument check of a slab format's (block_rows > 1: fp8b128) range: a
// (n / cols) x cols row-major matrix whose cols the format takes. The caller
// starts it on a slab boundary of its param (the layout's pieces do), so its
// tiles are the param's; its rows need not fill the last slab, since a param's
// last slab may be short.
inline void check_slab_range(WeightFormat f, int64_t n, int64_t cols, const char* op) {
  const FormatTraits& t = format_traits(f);
  if (t.block_rows == 1) return;
  MXDP_CHECK(cols > 0 && n % cols == 0 && t.eligible(std::max<int64_t>(n / cols, 1), cols), op, ": ", t.name,
             " takes whole rows of a matrix whose cols are a multiple of 16; got ", n, " elements of ", cols,
             " columns");
}

// The argument check every implementation's quantize / dequantize makes: a
// format whose traits have tensor_amax needs its amax pointer.
inline void check_tensor_amax(WeightFormat f, const float* tensor_amax, const char* op) {
  MXDP_CHECK(!format_traits(f).tensor_amax || tensor_amax, op, ": ", to_string(f), " needs the tensor amax");
}

// One range of a shard for adamw_quantize_ranges: len elements from element
// `begin` of the shard, updated with the step's AdamW scalars number `choice`
// (the engine's: 0 without weight decay, 1 with it). A slab format's range
// (block_rows > 1: fp8b128) is also a (len / cols) x cols matrix, one piece of
// a param starting on one of its slabs, whose tile scales start at scale
// number scale_pos of the shard's scales (the layout's Piece::scale_pos); a
// row-block format's range leaves both 0 (its scales follow from begin).
struct AdamWRange {
  int64_t begin = 0;
  int64_t len = 0;
  int32_t choice = 0;
  int64_t cols = 0;
  int64_t scale_pos = 0;
};
// The most AdamW choices one adamw_quantize_ranges call takes (a GPU kernel
// gets them all as its arguments).
inline constexpr int kMaxAdamWChoices = 4;

// A shard's ranges, made ready for adamw_quantize_ranges by the ops that run it
// (EngineOps::adamw_ranges): the list, and whatever those ops read it from in a
// step (a GPU's copy in device memory). The layout fixes a shard's ranges, so
// the engine makes this once: a step uploads nothing and never waits on the host.
// The list: a format without tensor_amax; ranges in order and disjoint (begin
// >= the previous begin + len), len >= 0, 0 <= choice < kMaxAdamWChoices.
// Row-block formats: each begin a multiple of the format's block, cols and
// scale_pos 0. Slab formats: cols > 0 and a matrix the format takes
// (check_slab_range), the ranges' scales in order and disjoint too.
class AdamWRanges {
 public:
  AdamWRanges(WeightFormat f, std::vector<AdamWRange> list);
  virtual ~AdamWRanges() = default;
  AdamWRanges(const AdamWRanges&) = delete;
  AdamWRanges& operator=(const AdamWRanges&) = delete;
  WeightFormat format() const { return format_; }
  const std::vector<AdamWRange>& list() const { return list_; }
  int choices_needed() const { return choices_needed_; }  // 1 + the largest choice (0: no range)
  // The argument check of adamw_quantize_ranges: one choice per index the list uses.
  void check_choices(std::span<const AdamWChoice> choices) const;
  // Where range r's scales start in a shard whose scales start at `scales`
  // (adamw_quantize_ranges' contract; nullptr for nullptr).
  uint8_t* scales_of(const AdamWRange& r, uint8_t* scales) const;

 private:
  WeightFormat format_;
  std::vector<AdamWRange> list_;
  int choices_needed_ = 0;
};

class EngineOps {
 public:
  virtual ~EngineOps() = default;
  virtual bool device_memory() const = 0;
  virtual void* stream() { return nullptr; }

  virtual void* alloc(size_t bytes) = 0;  // zero-filled; nullptr for 0 bytes
  virtual void release(void* p) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // within the memory space
  virtual void copy_to_host(void* host, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host, size_t bytes) = 0;

  // max |x|, NaN ignored (quant.h's amax).
  virtual float amax(const float* x, int64_t n) = 0;
  // A flat range of n elements, n a multiple of the format's block, into codes
  // and scales laid out as in a gather payload (format.h: codes, then scales;
  // none for bf16). tensor_amax: for a format whose traits have tensor_amax,
  // the whole param's amax, in ops memory (read on the stream, no host wait);
  // nullptr for every other format. cols: for a slab format (block_rows > 1,
  // fp8b128) the range is a (n / cols) x cols matrix (check_slab_range) and its
  // scales are its tiles' row-major; ignored by row-block formats.
  virtual void quantize(WeightFormat f, ScaleRounding r, const float* x, int64_t n, const float* tensor_amax,
                        uint8_t* codes, uint8_t* scales, int64_t cols = 0) = 0;
  // Into y in dtype `out`: fp32, or bf16 (round to nearest even of the fp32
  // dequantized value, so a bf16 model reads exactly bf16(dequantize(x))).
  // tensor_amax and cols as for quantize.
  virtual void dequantize(WeightFormat f, const uint8_t* codes, const uint8_t* scales, int64_t n,
                          const float* tensor_amax, void* y, ComputeDType out, int64_t cols = 0) = 0;
  // dequantize of every piece of `pieces` (count of them, in ops memory;
  // max_len the longest), in one launch on a GPU: the same bits as the calls
  // one by one.
  virtual void dequantize_pieces(WeightFormat f, const UnpackPiece* pieces, int count, int64_t max_len,
                                 ComputeDType out) = 0;
  virtual void to_bf16(const float* x, uint16_t* y, int64_t n) = 0;
  virtual void from_bf16(const uint16_t* x, float* y, int64_t n) = 0;
  virtual void scale(float* x, int64_t n, float c) = 0;
  virtual double sum_squares(const float* x, int64_t n) = 0;
  // The same sum, written to *out (ops memory) without a host round trip: the
  // engine collects every partial sum of a step this way and reads them once.
  virtual void sum_squares_into(const float* x, int64_t n, double* out) = 0;
  virtual void adamw(float* p, float* m, float* v, const float* g, int64_t n, const AdamWParams& a) = 0;

  // ---- the optimizer step's fused work (docs/engine.md, "The optimizer step")
  // *ctl (ops memory) updated by step_control_of (above) from rows x cols
  // partial sums (row r at partials + r * stride), on the stream.
  virtual void step_control(const double* partials, int rows, int stride, int cols, double clip_grad,
                            StepControl* ctl) = 0;
  // One pass over (g, m, v, p) reading *ctl (ops memory): unless ctl->skip,
  // AdamW on n elements with the gradient g[i] * ctl->grad_scale and the scalars
  // adamw_pick(a, ctl->updates), writing m, v, p; then p quantized into
  // codes/scales. Bitwise exactly adamw(p, m, v, g * grad_scale, n, params of
  // that t) followed by quantize(f, r, p, n, nullptr, ...); skipped, only the
  // quantize. f: a format without tensor_amax (one with it needs the whole
  // param's amax first: adamw_amax, the all-reduce, then quantize); cols as
  // for quantize.
  virtual void adamw_quantize(WeightFormat f, ScaleRounding r, float* p, float* m, float* v, const float* g,
                              int64_t n, const StepControl* ctl, const AdamWChoice& a, uint8_t* codes,
                              uint8_t* scales, int64_t cols = 0) = 0;
  // The fused pass over several ranges of one shard (p, m, v, g at the shard's
  // first element, codes and scales its payload's): for each range R of
  // `ranges`, in one launch on a GPU, bitwise exactly
  //   adamw_quantize(ranges.format(), r, p + R.begin, m + R.begin, v + R.begin,
  //                  g + R.begin, R.len, ctl, choices[R.choice],
  //                  codes + code_bytes(R.begin), scales + scales_bytes(R.begin))
  // (format.h's byte counts) for a row-block format, and for a slab format
  //   ... codes + code_bytes(R.begin), scales + R.scale_pos * scale_bytes, R.cols)
  // (its tiles: the format's scale_bytes each); elements and scales outside
  // every range untouched. `ranges` from these ops' adamw_ranges; choices: at least
  // ranges.choices_needed(), at most kMaxAdamWChoices, in host memory (a GPU
  // passes them to its kernel).
  virtual void adamw_quantize_ranges(ScaleRounding r, float* p, float* m, float* v, const float* g,
                                     const StepControl* ctl, std::span<const AdamWChoice> choices,
                                     const AdamWRanges& ranges, uint8_t* codes, uint8_t* scales) = 0;
  // adamw_quantize_ranges by its definition: adamw_quantize range by range
  // (the CPU's way, and a GPU's where one launch cannot take the ranges).
  void adamw_quantize_each_range(ScaleRounding r, float* p, float* m, float* v, const float* g,
                                 const StepControl* ctl, std::span<const AdamWChoice> choices,
                                 const AdamWRanges& ranges, uint8_t* codes, uint8_t* scales);
  // The list checked (AdamWRanges) and made ready for these ops; a GPU uploads
  // it here (a host wait: make it outside the step, once per layout).
  virtual std::unique_ptr<AdamWRanges> adamw_ranges(WeightFormat f, std::vector<AdamWRange> list) = 0;
  // The same AdamW, then *amax = max(*amax, amax(p)) in ops memory: the first
  // pass of the stage of a format with tensor_amax.
  virtual void adamw_amax(float* p, float* m, float* v, const float* g, int64_t n, const StepControl* ctl,
                          const AdamWChoice& a, float* amax) = 0;
  // *out = max(*out, amax(x)), *out in ops memory (no host round trip).
  virtual void amax_into(const float* x, int64_t n, float* out) = 0;
  // *out = x[0] + x[1] + ... + x[n-1], in double, in that order (ops memory).
  virtual void sum_into(const float* x, int64_t n, double* out) = 0;

  // ---- FP8 compute (docs/fp8.md): fp8b128 codes and tile scales of a
  // rows x cols matrix (formats/fp8_block.h, the same bits on every device)
  // Compact scales (the payload's) -> the GEMM layout (fp8b128_gemm_scale_count floats).
  virtual void fp8b128_scales_for_gemm(const float* scales, int64_t rows, int64_t cols, float* gemm_scales) = 0;
  // The transpose, both scale grids in the GEMM layout: codes_t (cols x rows)
  // and gemm_scales_t from codes and gemm_scales (fp8b128_transpose_gemm).
  virtual void fp8b128_transpose_gemm(const uint8_t* codes, const float* gemm_scales, int64_t rows, int64_t cols,
                                      uint8_t* codes_t, float* gemm_scales_t) = 0;
  // The same two over a list of matrices (formats/fp8_block.h's Fp8b128Job):
  // `jobs` in host memory, `dev` the same list in ops memory (what a GPU
  // launches on). One launch each on a GPU; the bits of the calls one by one:
  //   fp8b128_scales_for_gemm(J.scales, J.rows, J.cols, J.out_scales)
  //   fp8b128_transpose_gemm(J.codes, J.scales, J.rows, J.cols, J.codes_t, J.out_scales)
  virtual void fp8b128_scales_for_gemm_many(std::span<const Fp8b128Job> jobs, const Fp8b128Job* dev) = 0;
  virtual void fp8b128_transpose_gemm_many(std::span<const Fp8b128Job> jobs, const Fp8b128Job* dev) = 0;

  // ---- results read late, without a host wait inside the step
  // Host memory copy_to_host_async may land in (pinned for a GPU), zero-filled.
  virtual void* alloc_host(size_t bytes) = 0;
  virtual void release_host(void* p) = 0;
  // Starts the copy, ordered on the stream; `host` (from alloc_host) holds the
  // bytes once wait() on a later mark returns.
  virtual void copy_to_host_async(void* host, const void* src, size_t bytes) = 0;
  // A point after all work submitted so far; wait(mark) returns once that work
  // is done (the CPU's is done already). Marks are increasing.
  virtual int64_t mark() { return 0; }
  virtual void wait(int64_t /*mark*/) {}
  // Host waits so far: every stream synchronisation (a blocking copy, a
  // host-valued result, release), not counting wait(mark). The CPU ops never
  // wait: 0.
  virtual int64_t host_waits() const { return 0; }
};

// Host memory, fp32, the reference every other implementation is compared with.
std::unique_ptr<EngineOps> make_cpu_ops();

// Where an OpsArray lives: the ops' memory space (alloc), or host memory the
// ops can copy into without a host wait (alloc_host: pinned for a GPU).
enum class OpsSpace : uint8_t { Ops, Host };

// An owning array of n T from an EngineOps.
template <class T, OpsSpace S = OpsSpace::Ops>
class OpsArray {
 public:
  OpsArray() = default;
  OpsArray(EngineOps& ops, size_t n)
      : ops_(&ops), n_(n), p_(static_cast<T*>(S == OpsSpace::Ops ? ops.alloc(n * sizeof(T)) : ops.alloc_host(n * sizeof(T)))) {}
  OpsArray(OpsArray&& o) noexcept { swap(o); }
  OpsArray& operator=(OpsArray&& o) noexcept {
    OpsArray tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  OpsArray(const OpsArray&) = delete;
  OpsArray& operator=(const OpsArray&) = delete;
  ~OpsArray() {
    if (!ops_ || !p_) return;
    if constexpr (S == OpsSpace::Ops)
      ops_->release(p_);
    else
      ops_->release_host(p_);
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

 private:
  void swap(OpsArray& o) noexcept {
    std::swap(ops_, o.ops_);
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
  }
  EngineOps* ops_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};
template <class T>
using DeviceArray = OpsArray<T, OpsSpace::Ops>;  // in the ops' memory space (device memory for a GPU)
template <class T>
using HostArray = OpsArray<T, OpsSpace::Host>;

}  // namespace mxdp
