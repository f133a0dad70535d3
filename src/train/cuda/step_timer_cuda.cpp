// The step timer of a GPU job (train/throughput.h): CUDA events recorded on
// the compute stream at each step's end (and at its beginning after a pause),
// read once the step's result was taken, so a step's time is the device's:
// from the end of the previous step's work (or the step's own first work) to
// the end of its own.
#include <cuda_runtime_api.h>

#include <map>
#include <memory>

#include "train/throughput.h"
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp {

namespace {

using Event = std::shared_ptr<CUevent_st>;  // a step's end may also be the next step's beginning

class CudaStepTimer final : public StepTimer {
 public:
  explicit CudaStepTimer(void* stream) : stream_(static_cast<cudaStream_t>(stream)) {}
  void begin(int64_t step, bool after_pause) override {
    from_[step] = !after_pause && last_end_ ? last_end_ : record();
  }
  void end(int64_t step) override {
    last_end_ = record();
    end_[step] = last_end_;
  }
  double seconds(int64_t step) override {
    auto f = from_.find(step), e = end_.find(step);
    MXDP_CHECK(f != from_.end() && e != end_.end(), "step timer: step ", step, " was not marked");
    MXDP_CUDA_CHECK(cudaEventSynchronize(e->second.get()));  // done already: its result was taken
    float ms = 0;
    MXDP_CUDA_CHECK(cudaEventElapsedTime(&ms, f->second.get(), e->second.get()));
    from_.erase(f);
    end_.erase(e);
    return double(ms) / 1e3;
  }

 private:
  Event record() {
    cudaEvent_t e = nullptr;
    MXDP_CUDA_CHECK(cudaEventCreate(&e));
    Event ev(e, [](cudaEvent_t x) { cudaEventDestroy(x); });
    MXDP_CUDA_CHECK(cudaEventRecord(e, stream_));
    return ev;
  }

  cudaStream_t stream_;
  Event last_end_;
  std::map<int64_t, Event> from_, end_;
};

}  // namespace

std::unique_ptr<StepTimer> make_cuda_step_timer(void* stream) { return std::make_unique<CudaStepTimer>(stream); }

}  // namespace mxdp
