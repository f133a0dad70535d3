// Replays fixed runs of stream work as CUDA graphs.
//
// A segment is a piece of host code that only enqueues work onto one stream
// (kernels, cuBLASLt, cuDNN: no host waits, no allocation, no host reads of
// device results), identified by an id and a key: everything its launches
// depend on (sizes, device pointers). The first run with a key is eager (so
// libraries make their plans and workspaces outside any capture); the second
// is captured into a graph and launched; later runs launch that graph. A
// replay gives bitwise the eager run's results: the same kernels with the
// same arguments, in the same order on the same stream.
//
// Why: on an H200 the GPU leaves a few microseconds between dependent kernels
// launched one by one, even when the host is far ahead; inside a graph the
// gap is smaller. A GPT-2 step is ~480 kernels.
//
// If a capture fails (a library that cannot be captured), the segment runs
// eagerly from then on and a warning says so once; nothing is lost.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace mxdp::cuda {

class StreamGraphs {
 public:
  using Key = std::vector<int64_t>;

  StreamGraphs(cudaStream_t stream, bool enabled);
  ~StreamGraphs();
  StreamGraphs(const StreamGraphs&) = delete;
  StreamGraphs& operator=(const StreamGraphs&) = delete;

  void run(int id, const Key& key, const std::function<void()>& work);

  bool enabled() const { return enabled_; }
  int64_t launches() const { return launches_; }  // graphs launched (captures included)
  int64_t eager_runs() const { return eager_; }    // segments run eagerly
  int64_t graphs() const;                          // instantiated graphs held

  // Keys kept per segment id: a segment that alternates between shapes (train
  // and eval batches) keeps a graph for each; the least recently used goes.
  static constexpr int kKeysPerSegment = 4;

 private:
  struct Entry {
    int runs = 0;
    bool eager_only = false;  // its capture failed
    cudaGraphExec_t exec = nullptr;
    uint64_t used = 0;
  };
  bool capture(Entry& e, int id, const std::function<void()>& work);

  cudaStream_t stream_;
  bool enabled_;
  std::map<int, std::map<Key, Entry>> segments_;
  uint64_t clock_ = 0;
  int64_t launches_ = 0, eager_ = 0;
  bool warned_ = false;
};

// MXDP_CUDA_GRAPHS=0 turns the graphs off (every segment eager); default on.
bool cuda_graphs_from_env();

}  // namespace mxdp::cuda
