#include "models/cuda/attention.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <map>
#include <tuple>

#include "util/check.h"
#include "util/cuda_check.h"

namespace fe = cudnn_frontend;

#define MXDP_CUDNN_CHECK(call)                                                                 \
  do {                                                                                         \
    cudnnStatus_t mxdp_st_ = (call);                                                           \
    if (mxdp_st_ != CUDNN_STATUS_SUCCESS)                                                      \
      MXDP_FAIL("cuDNN call failed: " #call ": ", cudnnGetErrorString(mxdp_st_));              \
  } while (0)

#define MXDP_FE_CHECK(call, what)                                                              \
  do {                                                                                         \
    auto mxdp_e_ = (call);                                                                     \
    if (mxdp_e_.is_bad()) MXDP_FAIL("cuDNN frontend: ", what, ": " #call ": ", mxdp_e_.get_message()); \
  } while (0)

namespace mxdp::cuda {

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

struct Key {
  int B, T, H, KVH, HS;
  bool backward;
  bool operator<(const Key& o) const {
    return std::tie(B, T, H, KVH, HS, backward) < std::tie(o.B, o.T, o.H, o.KVH, o.HS, o.backward);
  }
};

// Strides of a [B, H, T, HS] view of a [B, T, W] row-major activation whose
// head h starts at column h*HS (W = (H + 2 KVH) HS for qkv, H HS for out).
std::vector<int64_t> head_strides(int T, int HS, int64_t W) { return {T * W, HS, W, 1}; }

void check_heads(int H, int KVH) {
  MXDP_CHECK(KVH >= 1 && H % KVH == 0, "attention: ", H, " query heads cannot share ", KVH,
             " key/value heads (H must be a multiple of KVH)");
}

}  // namespace

struct Attention::Impl {
  cudaStream_t stream;
  cudnnHandle_t handle = nullptr;
  std::map<Key, std::shared_ptr<fe::graph::Graph>> graphs;
  void* workspace = nullptr;
  int64_t workspace_size = 0;

  std::shared_ptr<fe::graph::Graph> graph(const Key& k) {
    auto it = graphs.find(k);
    if (it != graphs.end()) return it->second;
    // W: the qkv row width; with KVH == H (GPT-2) 3C, and every dim and
    // stride below is the multi-head graph's.
    const int64_t B = k.B, T = k.T, H = k.H, KVH = k.KVH, HS = k.HS, C = H * HS, W = (H + 2 * KVH) * HS;
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto t = [&](const char* name, int64_t uid, int64_t heads, std::vector<int64_t> stride) {
      return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, heads, T, HS}).set_stride(stride));
    };
    auto Q = t("Q", kQ, H, head_strides(int(T), int(HS), W));
    auto K = t("K", kK, KVH, head_strides(int(T), int(HS), W));
    auto V = t("V", kV, KVH, head_strides(int(T), int(HS), W));
    const float scale = 1.0f / std::sqrt(float(HS));
    if (!k.backward) {
      auto opts = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_causal_mask(true).set_attn_scale(scale);
      auto [O, stats] = g->sdpa(Q, K, V, opts);
      O->set_output(true).set_uid(kO).set_dim({B, H, T, HS}).set_stride(head_strides(int(T), int(HS), C));
      stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({B, H, T, 1}).set_stride({H * T, T, 1, 1});
    } else {
      auto O = t("O", kO, H, head_strides(int(T), int(HS), C));
      auto dO = t("dO", kdO, H, head_strides(int(T), int(HS), C));
      auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(kStats).set_dim({B, H, T, 1})
                                 .set_stride({H * T, T, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
      auto opts = fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_causal_mask(true)
                      .set_attn_scale(scale).set_deterministic_algorithm(true);
      auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
      dQ->set_output(true).set_uid(kdQ).set_dim({B, H, T, HS}).set_stride(head_strides(int(T), int(HS), W));
      dK->set_output(true).set_uid(kdK).set_dim({B, KVH, T, HS}).set_stride(head_strides(int(T), int(HS), W));
      dV->set_output(true).set_uid(kdV).set_dim({B, KVH, T, HS}).set_stride(head_strides(int(T), int(HS), W));
    }
    const char* what = k.backward ? "attention backward graph" : "attention forward graph";
    MXDP_FE_CHECK(g->validate(), what);
    MXDP_FE_CHECK(g->build_operation_graph(handle), what);
    MXDP_FE_CHECK(g->create_execution_plans({fe::HeurMode_t::A}), what);
    MXDP_FE_CHECK(g->check_support(handle), what);
    MXDP_FE_CHECK(g->build_plans(handle), what);
    const int64_t need = g->get_workspace_size();
    if (need > workspace_size) {
      MXDP_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (workspace) MXDP_CUDA_CHECK(cudaFree(workspace));
      MXDP_CUDA_CHECK(cudaMalloc(&workspace, size_t(need)));
      workspace_size = need;
    }
    graphs.emplace(k, g);
    return g;
  }
};

Attention::Attention(cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  MXDP_CUDNN_CHECK(cudnnCreate(&impl_->handle));
  MXDP_CUDNN_CHECK(cudnnSetStream(impl_->handle, stream));
}

Attention::~Attention() {
  cudaStreamSynchronize(impl_->stream);
  impl_->graphs.clear();
  if (impl_->workspace) cudaFree(impl_->workspace);
  cudnnDestroy(impl_->handle);
}

int64_t Attention::workspace_bytes() const { return impl_->workspace_size; }
const void* Attention::workspace() const { return impl_->workspace; }

void Attention::forward(uint16_t* out, float* stats, const uint16_t* qkv, int B, int T, int H, int HS) {
  forward_gqa(out, stats, qkv, B, T, H, H, HS);
}

void Attention::backward(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out,
                         const float* stats, int B, int T, int H, int HS) {
  backward_gqa(dqkv, dout, qkv, out, stats, B, T, H, H, HS);
}

void Attention::forward_gqa(uint16_t* out, float* stats, const uint16_t* qkv, int B, int T, int H, int KVH, int HS) {
  check_heads(H, KVH);
  auto g = impl_->graph({B, T, H, KVH, HS, false});
  const int64_t Q = int64_t(H) * HS, KV = int64_t(KVH) * HS;
  auto* q = const_cast<uint16_t*>(qkv);
  std::unordered_map<int64_t, void*> ptrs = {{kQ, q}, {kK, q + Q}, {kV, q + Q + KV}, {kO, out}, {kStats, stats}};
  MXDP_FE_CHECK(g->execute(impl_->handle, ptrs, impl_->workspace), "attention forward");
}

void Attention::backward_gqa(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out,
                             const float* stats, int B, int T, int H, int KVH, int HS) {
  check_heads(H, KVH);
  auto g = impl_->graph({B, T, H, KVH, HS, true});
  const int64_t Q = int64_t(H) * HS, KV = int64_t(KVH) * HS;
  auto* q = const_cast<uint16_t*>(qkv);
  std::unordered_map<int64_t, void*> ptrs = {
      {kQ, q}, {kK, q + Q}, {kV, q + Q + KV}, {kO, const_cast<uint16_t*>(out)}, {kdO, const_cast<uint16_t*>(dout)},
      {kStats, const_cast<float*>(stats)}, {kdQ, dqkv}, {kdK, dqkv + Q}, {kdV, dqkv + Q + KV}};
  MXDP_FE_CHECK(g->execute(impl_->handle, ptrs, impl_->workspace), "attention backward");
}

}  // namespace mxdp::cuda
