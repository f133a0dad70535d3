// What a training job says about its speed: each step's time, measured over
// work that is done, and the rate and ETA that follow from it (issue 21).
//
// A step's time runs from the end of the step before it to its own end, so
// that the host's work between steps (reading results, writing metrics) is in
// it; a step that follows an eval, a save or the start of the run is timed from
// its own beginning instead, so that neither evals nor saves are counted as
// training. The marks are where the work is: on the CPU the host clock (the
// work is done when the host gets past it); on a GPU, CUDA events recorded on
// the compute stream, read once the step's result has been taken (the device
// finished it), never the time at which the host got round to reading it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace mxdp {

class StepTimer {
 public:
  virtual ~StepTimer() = default;
  // Step `step`'s first work comes next. after_pause: an eval, a save or the
  // start of the run came since the previous step; its time starts here.
  virtual void begin(int64_t step, bool after_pause) = 0;
  // Step `step`'s last work was just submitted.
  virtual void end(int64_t step) = 0;
  // Seconds step `step` took. Call once per step, in order, after its result
  // was taken (its work is finished).
  virtual double seconds(int64_t step) = 0;
};

// Seconds on a host clock; empty: std::chrono::steady_clock.
using HostClock = std::function<double()>;
double steady_seconds();

// Marks on `clock` (the CPU, where submitted work is done work).
std::unique_ptr<StepTimer> make_host_step_timer(HostClock clock);
// CUDA events on `stream` (a cudaStream_t); only in a CUDA build.
std::unique_ptr<StepTimer> make_cuda_step_timer(void* stream);

// The rate and the time still to go, from measured costs: steps (smoothed),
// evals and saves (the mean of those measured so far). A run's first step
// also pays its one-time set-up (on a GPU cuBLASLt's and cuDNN's plans, the
// first allocations: tens of steady steps' time), so it counts only until a
// second step is measured; until then there is no steady estimate (`steady`).
class ThroughputMeter {
 public:
  explicit ThroughputMeter(double tokens_per_step) : tokens_per_step_(tokens_per_step) {}
  void add_step(double seconds);
  void add_eval(double seconds) { eval_s_ += seconds, ++evals_; }
  void add_save(double seconds) { save_s_ += seconds, ++saves_; }
  // Tokens per second of a step of `seconds`, and of the smoothed step time.
  double rate(double seconds) const { return tokens_per_step_ / seconds; }
  double smoothed_rate() const { return tokens_per_step_ / step_s_; }
  // A step after the first has been measured: the ETA rests on steady steps.
  bool steady() const { return steps_ >= 2; }
  // Seconds the remaining work will take at the costs measured so far (an
  // eval or save not yet measured counts as 0).
  double eta(int64_t steps_left, int64_t evals_left, int64_t saves_left) const;

 private:
  double tokens_per_step_;
  double step_s_ = 0;  // smoothed (exponential moving average)
  int64_t steps_ = 0;
  double eval_s_ = 0, save_s_ = 0;
  int64_t evals_ = 0, saves_ = 0;
};

// The dense bf16 tensor-core peak, TFLOP/s, of an NVIDIA data-center GPU
// named `device_name` (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"):
// half the datasheets' "with sparsity" figure. H100 SXM and H200 989.5, H100
// NVL and H200 NVL 835.5, H100 PCIe 756.5, A100 312; 0 for any other name
// (MFU is then shown only with --peak-tflops).
double dense_bf16_peak_tflops(const std::string& device_name);

// How many of the steps in (after, last] are multiples of `every` or `last`
// itself (every 0: none, unless at_last): the evals or saves still to come.
int64_t events_left(int64_t after, int64_t last, int64_t every, bool at_last);

}  // namespace mxdp
