// splitmix64 (Steele, Lea and Flood, 2014): the step of a counter-based
// 64-bit generator and its finalizer, which mixes one word into another with
// every output bit depending on every input bit. constexpr, so CUDA sources
// compiled with --expt-relaxed-constexpr (mxdp_objs) call it on the device too.
#pragma once

#include <cstdint>

namespace mxdp {

// The generator's increment: the state advances by it, one output a step.
inline constexpr uint64_t kSplitmix64Gamma = 0x9e3779b97f4a7c15ull;

// The finalizer of one state.
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace mxdp
