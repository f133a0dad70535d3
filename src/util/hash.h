// FNV-1a 64: the checksum of token shards and checkpoints. Not cryptographic;
// it catches corruption and truncation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxdp {

inline constexpr uint64_t kFnv1a64Basis = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ull;

// Pass the previous result as `h` to continue a checksum over several pieces.
inline uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = kFnv1a64Basis) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= kFnv1a64Prime;
  }
  return h;
}

}  // namespace mxdp
