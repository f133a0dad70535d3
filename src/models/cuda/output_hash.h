// A 64-bit hash of a device buffer's bytes, to tell whether two runs of a
// kernel wrote the same bits without copying their outputs to the host:
// cublaslt_plans.h's choose_cluster refuses a cluster shape whose GEMM output
// hashes otherwise than the heuristic's. Include only from CUDA-aware sources.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mxdp::cuda {

// The hash of the `bytes` bytes at device address p, once the work queued on
// s before it is done. The bytes are read as little-endian 64-bit words w_i,
// i = 0 .. ceil(bytes / 8) - 1, the last one zero-padded; with mix the
// splitmix64 finalizer (util/splitmix.h's splitmix64_mix: x ^= x >> 30;
// x *= 0xbf58476d1ce4e5b9; x ^= x >> 27; x *= 0x94d049bb133111eb;
// x ^= x >> 31), the hash is
//   sum_i mix(w_i ^ (i * 0x9e3779b97f4a7c15)) + mix(bytes)   (mod 2^64).
// A sum does not depend on the order the threads add their words in, so the
// hash is one value for given bytes whatever the grid; the index in each term
// makes moved words count, and the length tells a buffer from one with more
// zero bytes. Any alignment of p. Synchronizes s (for the value), so not for
// hot paths or a stream being captured; the 8-byte device sum is taken from
// and given back to s's memory pool (cudaMallocAsync) at each call.
uint64_t output_hash(const void* p, size_t bytes, cudaStream_t s);

}  // namespace mxdp::cuda
