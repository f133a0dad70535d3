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
#include <type_traits>
#include <utility>

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
};

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
  CublasLtPlans(cudaStream_t stream, bool wgrad_split_k) : stream_(stream), wgrad_split_k_(wgrad_split_k) {
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

 private:
  // The descriptors a plan holds (those created: a plan whose make threw may hold some).
  static void release(CublasLtPlan& p) {
    for (cublasLtMatrixLayout_t* l : {&p.a, &p.b, &p.cd})
      if (*l) cublasLtMatrixLayoutDestroy(std::exchange(*l, nullptr));
    if (p.desc) cublasLtMatmulDescDestroy(std::exchange(p.desc, nullptr));
  }

  cudaStream_t stream_;
  bool wgrad_split_k_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace mxdp::cuda
