// Test-only fault switches of the data-parallel engine (docs/engine.md, "Tests that hold
// it").
//
// Each switch re-creates a stale-weight bug that real systems have shipped, so
// that the lifecycle tests can prove they would notice it. They exist only in
// the test library `mxdp_core_testing` (bucket_sync.cpp compiled with MXDP_FAULTS);
// the product library `mxdp_core`, which the `mxdp` binary links, is compiled
// without MXDP_FAULTS and contains no fault code: there every MXDP_FAULT(...)
// in bucket_sync.cpp is the constant false.
//
// The switches are process-wide (one test process runs one engine at a time):
// set them with ScopedFaults around the run that should misbehave.
#pragma once

#include <cstdint>

namespace mxdp::faults {

struct Switches {
  bool skip_stage_before_forced_gather = false;  // gather a shard that was never re-staged
  bool skip_unpack = false;                       // record the unpack without doing it
  bool skip_deferred_reset_after_eval = false;    // keep an eval's consumed gather as pending
  // FP8 compute (docs/fp8.md): TransformerEngine's stale-transpose bugs.
  bool skip_transpose_refresh = false;            // backward's dgrad without a new W^T this step
  bool transpose_from_previous = false;           // W^T made from W before the unpack, labelled new
};

#ifdef MXDP_FAULTS
// The switches every engine of this process obeys.
inline Switches& active() {
  static Switches s;
  return s;
}
// How many times a switch changed what an engine did (never reset by the engine).
inline int64_t& fired() {
  static int64_t n = 0;
  return n;
}
// Sets the switches for its lifetime, then clears them.
struct ScopedFaults {
  explicit ScopedFaults(const Switches& s) { active() = s; }
  ~ScopedFaults() { active() = {}; }
  ScopedFaults(const ScopedFaults&) = delete;
  ScopedFaults& operator=(const ScopedFaults&) = delete;
};
#endif

}  // namespace mxdp::faults
