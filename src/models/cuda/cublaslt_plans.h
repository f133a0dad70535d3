// What the two cuBLASLt wrappers (gemm.cu's Gemm, fp8_gemm.cu's Fp8Gemm) share:
// a handle, the fixed 32 MiB workspace, the stream they run on, and the cache
// of plans, one per shape, each holding its matmul descriptor, the layouts of
// A, B and C = D, and the algorithm chosen once for it. What goes into a plan
// is each wrapper's own (its shape key, the descriptor's attributes, its
// heuristic preferences, which answer it keeps); this header owns only the
// plans' lifetime and lookup, and the heuristic query those preferences go
// into. Include only from CUDA-aware sources.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "models/cuda/cluster_choice.h"
#include "models/cuda/output_hash.h"
#include "util/check.h"
#include "util/cuda_check.h"

// Checks a cuBLASLt call: a failure throws (MXDP_FAIL) with file:line, the call and its status.
#define MXDP_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                            \
    cublasStatus_t mxdp_st_ = (call);                                                             \
    if (mxdp_st_ != CUBLAS_STATUS_SUCCESS)                                                        \
      MXDP_FAIL("cuBLASLt call failed: " #call ": cublasStatus_t ", int(mxdp_st_));                 \
  } while (0)

namespace mxdp::cuda {

// One planned shape: C and D share the layout cd. A wrapper that keeps more per
// shape derives from it.
struct CublasLtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, cd = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool cluster_chosen = false;  // choose_cluster has run for it
};

// One buffer a GEMM writes (D, or a GELU epilogue's aux), whose bits choose_cluster compares.
struct GemmOutput {
  const void* ptr;
  size_t bytes;
};

// The cluster shapes kFastest times, besides the heuristic's own.
inline constexpr uint16_t kClusterShapes[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                                              CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1,
                                              CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x4x1};

// The cluster shape of an algorithm (0: cuBLASLt's automatic choice, or none set).
inline uint16_t cluster_of(const cublasLtMatmulAlgo_t& algo) {
  uint16_t shape = 0;
  size_t got = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &shape, sizeof shape, &got) !=
      CUBLAS_STATUS_SUCCESS)
    return 0;
  return shape;
}

// The handle, workspace and stream of one wrapper and its plans by Key (ordered
// by operator<). Destruction frees the plans' descriptors, then waits for the
// stream, whose queued GEMMs may still use the workspace, before freeing the
// workspace and the handle.
template <class Key, class Plan = CublasLtPlan>
class CublasLtPlans {
  static_assert(std::is_base_of_v<CublasLtPlan, Plan>, "a plan is a CublasLtPlan");

 public:
  static constexpr size_t kWorkspace = size_t(32) << 20;  // cuBLAS's recommendation for Hopper

  // wgrad_split_k false: the accumulating (wgrad) shapes are planned with no
  // workspace (heuristic() below).
  // A failed workspace allocation destroys the handle before it throws (no
  // destructor runs for a constructor that throws).
  CublasLtPlans(cudaStream_t stream, bool wgrad_split_k, ClusterChoice clusters = {})
      : stream_(stream), wgrad_split_k_(wgrad_split_k), clusters_(clusters) {
    MXDP_CUBLAS_CHECK(cublasLtCreate(&handle_));
    const cudaError_t err = cudaMalloc(&workspace_, kWorkspace);
    if (err != cudaSuccess) {
      cublasLtDestroy(handle_);
      MXDP_CUDA_CHECK(err);
    }
  }
  ~CublasLtPlans() {
    for (auto& [key, p] : plans_) release(p);
    cudaStreamSynchronize(stream_);
    cudaFree(workspace_);
    cublasLtDestroy(handle_);
  }
  CublasLtPlans(const CublasLtPlans&) = delete;
  CublasLtPlans& operator=(const CublasLtPlans&) = delete;

  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  cudaStream_t stream() const { return stream_; }
  // Number of distinct keys planned (the wrappers' cached_shapes()).
  size_t size() const { return plans_.size(); }
  // The cluster shape of each plan, in key order (the wrappers' plan_clusters()).
  std::vector<uint16_t> clusters() const {
    std::vector<uint16_t> v;
    for (const auto& [key, p] : plans_) v.push_back(cluster_of(p.algo));
    return v;
  }

  // The plan of key: the cached one, or, at the key's first call, a new plan
  // that make(plan) fills (descriptors, algorithm) and that is cached once make
  // returns. An error thrown by make caches nothing and frees the descriptors
  // make had created, so the next call of the key plans again from scratch.
  template <class Make>
  Plan& get(const Key& key, Make&& make) {
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    Plan p;
    try {
      make(p);
      return plans_.emplace(key, p).first->second;
    } catch (...) {
      release(p);
      throw;
    }
  }

  // cuBLASLt's heuristic for p's descriptors (C and D both p.cd): up to
  // `answers` algorithms into res, their number into found. The preference
  // allows the whole workspace, or none for an accumulating GEMM when split K
  // is off, which rules out the algorithms that split K and add the parts in
  // the workspace; more_preferences (when given) then sets the wrapper's own.
  // The status is returned for the wrapper's own message (or fallback).
  cublasStatus_t heuristic(const CublasLtPlan& p, bool accumulate, int answers, cublasLtMatmulHeuristicResult_t* res,
                           int* found,
                           const std::function<void(cublasLtMatmulPreference_t)>& more_preferences = {}) const {
    cublasLtMatmulPreference_t pref = nullptr;
    MXDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = accumulate && !wgrad_split_k_ ? 0 : kWorkspace;
    MXDP_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    if (more_preferences) more_preferences(pref);
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.cd, p.cd, pref, answers, res, found);
    cublasLtMatmulPreferenceDestroy(pref);
    return st;
  }

  // Sets p.algo's cluster shape as ClusterChoice says, once per plan (a later
  // call returns at once; a call while the stream is being captured into a
  // graph changes nothing: no timing, no host waits inside a graph), on a
  // plan the wrapper calls `movable`: one whose GEMM overwrites its outputs
  // (an accumulating one's repeated runs would add up, and its first output
  // could not be made again); any other keeps the heuristic's. run(algo)
  // enqueues the plan's GEMM on stream() with that algorithm and the call's
  // own operands and returns cuBLASLt's status; it runs several times, so
  // `outputs` (every buffer it writes) must be ones the caller's own call
  // then overwrites with the chosen algorithm, and none of its inputs: what
  // a refused candidate wrote never survives that call.
  //
  // A candidate must give the heuristic's bits: after the heuristic's runs
  // the outputs are hashed (output_hash.h), and after each candidate's runs
  // again; one whose hashes differ is refused (refused() counts them),
  // however fast. Most cluster shapes keep the bits (a cluster changes which
  // CTA loads which operand tile, not a CTA's tile or its order along K), but
  // not all: the bf16 dGELU epilogue under a 4x1 cluster on an H100
  // (cluster_choice.h). A hash is one run's bits on these operands, so the
  // check is of this shape's kernel, not a proof for all inputs;
  // GpuGemmClusters compares whole outputs of both wrappers at 1558M's shapes.
  // A candidate cuBLASLt refuses (cublasLtMatmulAlgoCheck, or the run's
  // status) is skipped; the heuristic's own stays the fallback.
  void choose_cluster(CublasLtPlan& p, bool movable, std::span<const GemmOutput> outputs,
                      const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&)>& run) {
    if (p.cluster_chosen) return;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    MXDP_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) return;  // a later eager call chooses
    p.cluster_chosen = true;
    if (!movable || clusters_.mode == ClusterChoice::kHeuristic) return;
    cublasLtMatmulAlgo_t a;
    if (clusters_.mode == ClusterChoice::kFixed) {
      if (!with(p, clusters_.shape, a) || run(p.algo) != CUBLAS_STATUS_SUCCESS) return;
      const std::vector<uint64_t> own = hashes(outputs);
      if (run(a) == CUBLAS_STATUS_SUCCESS && same_bits(outputs, own)) p.algo = a;
      return;
    }
    float best = time_ms(p.algo, run);
    if (best < 0) return;  // the heuristic's own is refused: the wrapper's call reports or falls back
    const std::vector<uint64_t> own = hashes(outputs);  // its last run's outputs
    cublasLtMatmulAlgo_t best_algo = p.algo;
    for (uint16_t shape : kClusterShapes) {
      if (shape == cluster_of(p.algo) || !with(p, shape, a)) continue;
      const float ms = time_ms(a, run);
      if (ms >= 0 && same_bits(outputs, own) && ms < best) best = ms, best_algo = a;
    }
    p.algo = best_algo;
  }

  // Number of candidates choose_cluster has refused for bits other than the
  // heuristic's, over all plans (the wrappers' clusters_refused()).
  size_t refused() const { return refused_; }

 private:
  // p.algo with that cluster shape into a, if cuBLASLt accepts it within the workspace.
  bool with(const CublasLtPlan& p, uint16_t shape, cublasLtMatmulAlgo_t& a) const {
    a = p.algo;
    cublasLtMatmulHeuristicResult_t check{};
    return cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &shape, sizeof shape) ==
               CUBLAS_STATUS_SUCCESS &&
           cublasLtMatmulAlgoCheck(handle_, p.desc, p.a, p.b, p.cd, p.cd, &a, &check) == CUBLAS_STATUS_SUCCESS &&
           check.workspaceSize <= kWorkspace;
  }

  // The hash of each output as the stream's queued work leaves it (a host wait).
  std::vector<uint64_t> hashes(std::span<const GemmOutput> outputs) const {
    std::vector<uint64_t> h;
    for (const GemmOutput& o : outputs) h.push_back(output_hash(o.ptr, o.bytes, stream_));
    return h;
  }

  // Whether the outputs hash as `own` (the heuristic's); a candidate that does not is counted as refused.
  bool same_bits(std::span<const GemmOutput> outputs, const std::vector<uint64_t>& own) {
    if (hashes(outputs) == own) return true;
    ++refused_;
    return false;
  }

  // The best of 3 windows of 3 back-to-back runs, after 2 warm-up runs: ms per
  // run, or -1 where a run is refused.
  float time_ms(const cublasLtMatmulAlgo_t& a,
                const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&)>& run) const {
    struct Events {  // destroyed on every way out, a throw included
      cudaEvent_t start = nullptr, stop = nullptr;
      ~Events() {
        if (start) cudaEventDestroy(start);
        if (stop) cudaEventDestroy(stop);
      }
    } ev;
    MXDP_CUDA_CHECK(cudaEventCreate(&ev.start));
    MXDP_CUDA_CHECK(cudaEventCreate(&ev.stop));
    for (int i = 0; i < 2; ++i)
      if (run(a) != CUBLAS_STATUS_SUCCESS) return -1;
    float best = -1;
    for (int w = 0; w < 3; ++w) {
      MXDP_CUDA_CHECK(cudaEventRecord(ev.start, stream_));
      for (int i = 0; i < 3; ++i)
        if (run(a) != CUBLAS_STATUS_SUCCESS) return -1;
      MXDP_CUDA_CHECK(cudaEventRecord(ev.stop, stream_));
      MXDP_CUDA_CHECK(cudaEventSynchronize(ev.stop));
      float ms = 0;
      MXDP_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
      if (best < 0 || ms / 3 < best) best = ms / 3;
    }
    return best;
  }

  // The descriptors a plan holds (those created: a plan whose make threw may hold some).
  static void release(CublasLtPlan& p) {
    for (cublasLtMatrixLayout_t* l : {&p.a, &p.b, &p.cd})
      if (*l) cublasLtMatrixLayoutDestroy(std::exchange(*l, nullptr));
    if (p.desc) cublasLtMatmulDescDestroy(std::exchange(p.desc, nullptr));
  }

  cudaStream_t stream_;
  bool wgrad_split_k_;
  ClusterChoice clusters_;
  size_t refused_ = 0;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace mxdp::cuda
