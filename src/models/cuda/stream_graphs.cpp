#include "models/cuda/stream_graphs.h"

#include <cstdio>
#include <exception>
#include <string>

#include "util/check.h"
#include "util/cuda_check.h"
#include "util/env.h"

namespace mxdp::cuda {

StreamGraphs::StreamGraphs(cudaStream_t stream, bool enabled) : stream_(stream), enabled_(enabled) {}

StreamGraphs::~StreamGraphs() {
  for (auto& [id, keys] : segments_)
    for (auto& [k, e] : keys)
      if (e.exec) cudaGraphExecDestroy(e.exec);
}

int64_t StreamGraphs::graphs() const {
  int64_t n = 0;
  for (const auto& [id, keys] : segments_)
    for (const auto& [k, e] : keys) n += e.exec != nullptr;
  return n;
}

void StreamGraphs::run(int id, const Key& key, const std::function<void()>& work) {
  if (!enabled_) {
    ++eager_;
    work();
    return;
  }
  auto& keys = segments_[id];
  auto it = keys.find(key);
  if (it == keys.end()) {
    if (int(keys.size()) >= kKeysPerSegment) {  // the least recently used key goes
      auto lru = keys.begin();
      for (auto j = keys.begin(); j != keys.end(); ++j)
        if (j->second.used < lru->second.used) lru = j;
      if (lru->second.exec) MXDP_CUDA_CHECK(cudaGraphExecDestroy(lru->second.exec));
      keys.erase(lru);
    }
    it = keys.emplace(key, Entry{}).first;
  }
  Entry& e = it->second;
  e.used = ++clock_;
  ++e.runs;
  if (!e.exec && (e.runs == 1 || e.eager_only || !capture(e, id, work))) {
    ++eager_;
    work();
    return;
  }
  MXDP_CUDA_CHECK(cudaGraphLaunch(e.exec, stream_));
  ++launches_;
}

// Captures `work` into e.exec; false (and the segment eager from then on) if
// the stream could not be captured.
bool StreamGraphs::capture(Entry& e, int id, const std::function<void()>& work) {
  std::string why;
  MXDP_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    work();
  } catch (const std::exception& ex) {
    why = ex.what();
  }
  cudaGraph_t g = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &g);
  if (why.empty() && end != cudaSuccess) why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  if (why.empty()) {
    const cudaError_t inst = cudaGraphInstantiate(&e.exec, g, 0);
    if (inst != cudaSuccess) {
      why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
      e.exec = nullptr;
    }
  }
  if (g) cudaGraphDestroy(g);
  if (why.empty()) return true;
  (void)cudaGetLastError();  // the failed capture's error is handled here
  e.eager_only = true;
  if (!warned_) {
    std::fprintf(stderr, "mxdp: warning: CUDA graph capture of segment %d failed (%s); it runs eagerly\n", id,
                 why.c_str());
    warned_ = true;
  }
  return false;
}

bool cuda_graphs_from_env() { return env_flag("MXDP_CUDA_GRAPHS", true); }

}  // namespace mxdp::cuda
