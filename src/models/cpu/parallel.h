// When the CPU models' loops (models/cpu/, models/<arch>/*_cpu.cpp) go parallel.
//
// The determinism contract of every CPU model: each output element is written
// by one sequential loop in a fixed order, and OpenMP only splits the outputs
// between threads. Without FMA (x86-64-v2) and without fast-math, a vectorised
// lane computes exactly what the scalar loop would, so tiling and thread count
// never change a bit.
#pragma once

#include <cstdint>

namespace mxdp::cpu {

// Loops with less work than this run on one thread: on a busy machine every
// OpenMP barrier can cost a scheduler slice, which dwarfs a small loop. Which
// thread computes an output never changes its value, so this only affects speed.
constexpr int64_t kParallelMinWork = int64_t(1) << 13;  // elements (elementwise, per-row loops)
constexpr int64_t kParallelMinMacs = int64_t(1) << 17;  // multiply-adds (GEMM, attention)

}  // namespace mxdp::cpu
