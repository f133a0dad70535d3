// EngineOps: everything the data-parallel engine does to memory, behind one
// narrow interface, so that the engine's logic (layout, freshness chain,
// collective order, checkpoints) is the same code on the CPU and on a GPU.
//
// Pointers are in the ops' memory space (host for the CPU ops, device memory
// for CUDA ops); the model's weights() live there too. Operations are ordered
// on stream() (nullptr on the CPU); copy_to_host and the host-valued results
// (amax, sum_squares) are complete on return: those are the host waits, which
// host_waits() counts (the engine's optimizer step makes one). Every operation
// is deterministic: the same inputs give the same bits run to run (fixed
// reduction order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "model.h"
#include "optimizer.h"
#include "options.h"

namespace mxdp {

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
  // and scales laid out as in a gather payload (bf16: codes only, 2 bytes each).
  // tensor_amax is used by NVFP4 only.
  virtual void quantize(WeightFormat f, ScaleRounding r, const float* x, int64_t n, float tensor_amax,
                        uint8_t* codes, uint8_t* scales) = 0;
  // Into y in dtype `out`: fp32, or bf16 (round to nearest even of the fp32
  // dequantized value, so a bf16 model reads exactly bf16(dequantize(x))).
  virtual void dequantize(WeightFormat f, const uint8_t* codes, const uint8_t* scales, int64_t n,
                          float tensor_amax, void* y, ComputeDType out) = 0;
  virtual void to_bf16(const float* x, uint16_t* y, int64_t n) = 0;
  virtual void from_bf16(const uint16_t* x, float* y, int64_t n) = 0;
  virtual void scale(float* x, int64_t n, float c) = 0;
  virtual double sum_squares(const float* x, int64_t n) = 0;
  // The same sum, written to *out (ops memory) without a host round trip: the
  // engine collects every partial sum of a step this way and reads them once.
  virtual void sum_squares_into(const float* x, int64_t n, double* out) = 0;
  virtual void adamw(float* p, float* m, float* v, const float* g, int64_t n, const AdamWParams& a) = 0;

  // ---- the optimizer step's fused work (docs/engine.md, "The optimizer step")
  // One pass over (g, m, v, p): AdamW on n elements with the gradient
  // g[i] * grad_scale (the clip coefficient; 1 leaves g as it is), writing m, v,
  // p, and the updated p quantized into codes/scales. Bitwise exactly
  // adamw(p, m, v, g * grad_scale, n, a) followed by quantize(f, r, p, n, ...).
  // f: BF16 or MXFP8 (NVFP4 needs the tensor amax first: adamw_amax, then
  // quantize_nvfp4).
  virtual void adamw_quantize(WeightFormat f, ScaleRounding r, float* p, float* m, float* v, const float* g,
                              int64_t n, float grad_scale, const AdamWParams& a, uint8_t* codes,
                              uint8_t* scales) = 0;
  // The same AdamW, then *amax = max(*amax, amax(updated p)) in ops memory:
  // the first pass of an NVFP4 stage.
  virtual void adamw_amax(float* p, float* m, float* v, const float* g, int64_t n, float grad_scale,
                          const AdamWParams& a, float* amax) = 0;
  // *out = max(*out, amax(x)), *out in ops memory (no host round trip).
  virtual void amax_into(const float* x, int64_t n, float* out) = 0;
  // NVFP4 quantize / dequantize with the tensor amax read from ops memory:
  // the same bits as quantize/dequantize given *tensor_amax as a host value.
  virtual void quantize_nvfp4(const float* x, int64_t n, const float* tensor_amax, uint8_t* codes,
                              uint8_t* scales) = 0;
  virtual void dequantize_nvfp4(const uint8_t* codes, const uint8_t* scales, int64_t n, const float* tensor_amax,
                                void* y, ComputeDType out) = 0;
  // *dst = value (ops memory), without waiting for anything.
  virtual void write_f64(double* dst, double value) = 0;
  // Host waits so far: every stream synchronisation (a blocking copy, a
  // host-valued result, release). The CPU ops never wait: 0.
  virtual int64_t host_waits() const { return 0; }
};

// Host memory, fp32, the reference every other implementation is compared with.
std::unique_ptr<EngineOps> make_cpu_ops();

// An owning array in an EngineOps' memory space.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(EngineOps& ops, size_t n) : ops_(&ops), n_(n), p_(static_cast<T*>(ops.alloc(n * sizeof(T)))) {}
  DeviceArray(DeviceArray&& o) noexcept { swap(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    DeviceArray tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (ops_ && p_) ops_->release(p_);
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

 private:
  void swap(DeviceArray& o) noexcept {
    std::swap(ops_, o.ops_);
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
  }
  EngineOps* ops_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace mxdp
