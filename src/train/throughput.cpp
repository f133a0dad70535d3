#include "train/throughput.h"

#include <chrono>
#include <string>
#include <utility>

#include "util/check.h"

namespace mxdp {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

class HostStepTimer final : public StepTimer {
 public:
  explicit HostStepTimer(HostClock clock) : clock_(clock ? std::move(clock) : HostClock(steady_seconds)) {}
  void begin(int64_t step, bool after_pause) override {
    if (after_pause || !has_end_) from_[step] = clock_();
    else from_[step] = last_end_;
  }
  void end(int64_t step) override {
    last_end_ = clock_();
    has_end_ = true;
    end_[step] = last_end_;
  }
  double seconds(int64_t step) override {
    auto f = from_.find(step), e = end_.find(step);
    MXDP_CHECK(f != from_.end() && e != end_.end(), "step timer: step ", step, " was not marked");
    const double s = e->second - f->second;
    from_.erase(f);
    end_.erase(e);
    return s;
  }

 private:
  HostClock clock_;
  double last_end_ = 0;
  bool has_end_ = false;
  std::map<int64_t, double> from_, end_;
};

}  // namespace

std::unique_ptr<StepTimer> make_host_step_timer(HostClock clock) {
  return std::make_unique<HostStepTimer>(std::move(clock));
}

#ifndef MXDP_HAVE_CUDA
std::unique_ptr<StepTimer> make_cuda_step_timer(void*) {
  MXDP_FAIL("this mxdp was built without CUDA: no device step timer");
}
#endif

void ThroughputMeter::add_step(double seconds) {
  // The first step seeds the average and the second replaces it (set-up is in the first).
  step_s_ = steps_ <= 1 ? seconds : 0.9 * step_s_ + 0.1 * seconds;
  ++steps_;
}

double ThroughputMeter::eta(int64_t steps_left, int64_t evals_left, int64_t saves_left) const {
  double s = double(steps_left) * step_s_;
  if (evals_ > 0) s += double(evals_left) * eval_s_ / double(evals_);
  if (saves_ > 0) s += double(saves_left) * save_s_ / double(saves_);
  return s;
}

double dense_bf16_peak_tflops(const std::string& device_name) {
  // First match wins: the NVL and PCIe forms before the SXM name they contain.
  static const std::pair<const char*, double> kPeaks[] = {
      {"H100 NVL", 835.5}, {"H200 NVL", 835.5}, {"H100 PCIe", 756.5}, {"H100", 989.5}, {"H200", 989.5}, {"A100", 312.0},
  };
  for (const auto& [name, tflops] : kPeaks)
    if (device_name.find(name) != std::string::npos) return tflops;
  return 0;
}

int64_t events_left(int64_t after, int64_t last, int64_t every, bool at_last) {
  if (last <= after) return 0;
  int64_t n = every > 0 ? last / every - after / every : 0;
  const bool last_counted = every > 0 && last % every == 0;
  if (at_last && !last_counted) ++n;
  return n;
}

}  // namespace mxdp
