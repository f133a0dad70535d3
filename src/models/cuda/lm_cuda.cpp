#include "models/cuda/lm_cuda.h"

#include <algorithm>
#include <vector>

#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda {

BatchUpload::BatchUpload() {
  for (Slot& sl : slots_) MXDP_CUDA_CHECK(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming));
}

BatchUpload::~BatchUpload() {
  for (Slot& sl : slots_) {
    cudaEventDestroy(sl.done);
    if (sl.host) cudaFreeHost(sl.host);
  }
}

int BatchUpload::upload(const int32_t* tokens, const int32_t* targets, int64_t BT, int V, const LmSlices& dst,
                        cudaStream_t s) {
  const int64_t need = 5 * BT + 1;
  Slot& sg = slots_[size_t(next_)];
  next_ = (next_ + 1) % kSlots;
  if (sg.pending) MXDP_CUDA_CHECK(cudaEventSynchronize(sg.done));  // its upload has left the buffer
  if (need > sg.n) {
    if (sg.host) MXDP_CUDA_CHECK(cudaFreeHost(sg.host));
    sg.host = nullptr;
    MXDP_CUDA_CHECK(cudaMallocHost(&sg.host, size_t(need) * sizeof(int32_t)));
    sg.n = need;
  }
  int32_t* tok = sg.host;
  int32_t* tgt = tok + BT;
  int32_t* order = tgt + BT;
  int32_t* seg_start = order + BT;
  int32_t* seg_token = seg_start + BT + 1;
  std::copy(tokens, tokens + BT, tok);
  if (targets) std::copy(targets, targets + BT, tgt);
  else std::fill(tgt, tgt + BT, 0);
  std::vector<int32_t> count(size_t(V) + 1, 0);
  for (int64_t i = 0; i < BT; ++i) ++count[size_t(tok[i]) + 1];
  for (int v = 0; v < V; ++v) count[size_t(v) + 1] += count[size_t(v)];
  int n_seg = 0;
  for (int v = 0; v < V; ++v)
    if (count[size_t(v) + 1] > count[size_t(v)]) {
      seg_start[n_seg] = count[size_t(v)];
      seg_token[n_seg] = v;
      ++n_seg;
    }
  seg_start[n_seg] = int32_t(BT);
  for (int64_t i = 0; i < BT; ++i) order[count[size_t(tok[i])]++] = int32_t(i);
  MXDP_CUDA_CHECK(cudaMemcpyAsync(dst.tokens, tok, size_t(BT) * 4, cudaMemcpyHostToDevice, s));
  MXDP_CUDA_CHECK(cudaMemcpyAsync(dst.targets, tgt, size_t(BT) * 4, cudaMemcpyHostToDevice, s));
  MXDP_CUDA_CHECK(cudaMemcpyAsync(dst.order, order, size_t(BT) * 4, cudaMemcpyHostToDevice, s));
  MXDP_CUDA_CHECK(cudaMemcpyAsync(dst.seg_start, seg_start, size_t(n_seg + 1) * 4, cudaMemcpyHostToDevice, s));
  MXDP_CUDA_CHECK(cudaMemcpyAsync(dst.seg_token, seg_token, size_t(n_seg) * 4, cudaMemcpyHostToDevice, s));
  MXDP_CUDA_CHECK(cudaEventRecord(sg.done, s));
  sg.pending = true;
  return n_seg;
}

}  // namespace mxdp::cuda
