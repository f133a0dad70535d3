// Causal multi-head (and grouped-query) self-attention of the GPU models through cuDNN's fused
// scaled-dot-product attention (flash attention: the T x T softmax is never
// stored; backward recomputes it from the per-row log-sum-exp "stats"), built
// with the cuDNN frontend's graph API. The backward uses cuDNN's deterministic
// algorithm, so gradients are bitwise repeatable run to run.
//
// Graphs are built once per (B, H, KV heads, T, head size) and kept: building
// is start-up work, never per step.
//
// Grouped-query attention (Llama, Qwen2): KVH <= H k/v heads, H a multiple of
// KVH; q head h reads k/v head h / (H / KVH). cuDNN takes the fewer k/v heads
// directly (no copies); its backward sums each k/v head's gradient over its
// group. With KVH == H the graphs are exactly the multi-head ones.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

namespace mxdp::cuda {

class Attention {
 public:
  explicit Attention(cudaStream_t stream);
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;

  // qkv [B, T, 3C] bf16, rows [q | k | v], head h at columns h*HS..(h+1)*HS-1
  // of each part (C = H * HS); softmax scale 1/sqrt(HS), causal.
  // out [B, T, C] bf16; stats [B, H, T] fp32 (what backward needs).
  void forward(uint16_t* out, float* stats, const uint16_t* qkv, int B, int T, int H, int HS);
  // dqkv [B, T, 3C] is overwritten with the gradient of q, k and v.
  void backward(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out, const float* stats,
                int B, int T, int H, int HS);

  // Grouped-query: qkv [B, T, (H + 2 KVH) HS], rows [q (H heads) | k (KVH) |
  // v (KVH)]; out [B, T, H HS], stats [B, H, T]; dqkv as qkv, overwritten.
  void forward_gqa(uint16_t* out, float* stats, const uint16_t* qkv, int B, int T, int H, int KVH, int HS);
  void backward_gqa(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out,
                    const float* stats, int B, int T, int H, int KVH, int HS);

  // Bytes of workspace the graphs built so far need (held once, shared).
  int64_t workspace_bytes() const;
  const void* workspace() const;  // moves when a new shape needs more

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxdp::cuda
