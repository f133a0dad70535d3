// mxdp's own block-scaled FP8 GEMM for Hopper (fp8_gemm_sm90.h says what and
// why). Compiled for sm_90a only (src/CMakeLists.txt): wgmma and the TMA
// tensor loads exist only in Hopper's arch-specific instruction set.
#include "models/cuda/fp8_gemm_sm90.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "formats/codec.h"
#include "formats/cuda/bf16_pack.cuh"
#include "formats/cuda/fp8_encode.cuh"
#include "formats/fp8_block.h"
#include "models/cuda/fp8_tile_ops.cuh"
#include "models/cuda/gelu_fast.cuh"
#include "util/check.h"
#include "util/cuda_check.h"

namespace mxdp::cuda {

namespace {

constexpr int kTile = 128;                  // BM = BN = BK: one 1x128 block, one 128x128 scale tile
constexpr int kStageBytes = kTile * kTile;  // one operand's stage: 128 rows of 128 E4M3 codes
constexpr int kThreads = 384;               // warpgroup 0 loads, 1 and 2 multiply 64 rows each
constexpr int kConsumerWarps = 8;
constexpr int kOutHalfBytes = kTile * 128;  // the bf16 tile leaves in two 128 x 64 halves, rows of 128 bytes
constexpr int kOutBytes = 2 * kOutHalfBytes;

// What the consumers do with a finished tile (the kernel's epilogue).
enum class Epi {
  Bf16,        // d = bf16(sum + bias): fprop, dgrad
  Accumulate,  // d += sum (fp32): the weight gradient
  GeluQuant,   // fc's forward: d = pre-activation, plus both FP8 operands of its GELU (fp8_gemm_sm90.h)
};

// The shared memory of a CTA, by epilogue: the stage ring (a's stages, then
// b's), the bf16 tile on its way out, and what the epilogue needs besides:
// GeluQuant the two code tiles on their way out (rows: 128 rows x 128 codes;
// cols: 128 columns x 128 codes, the transpose) and the column amaxes of the
// eight consumer warps and the columns' reciprocal scales; Accumulate the b
// scales of each stage. GeluQuant keeps four stages instead of five: five and
// its 36.5 KB would pass the 227 KB a CTA may have.
template <Epi kEpi>
struct Smem {
  static constexpr bool kGq = kEpi == Epi::GeluQuant, kAcc = kEpi == Epi::Accumulate;
  static constexpr int kStages = kGq ? 4 : 5;
  static constexpr int kB = kStages * kStageBytes;
  static constexpr int kOut = 2 * kStages * kStageBytes;
  static constexpr int kRowCodes = kOut + kOutBytes;
  static constexpr int kColCodes = kRowCodes + (kGq ? kTile * kTile : 0);
  static constexpr int kColAmax = kColCodes + (kGq ? kTile * kTile : 0);  // [8 warps][128] floats
  static constexpr int kColRcp = kColAmax + (kGq ? kConsumerWarps * kTile * 4 : 0);  // [128] floats
  static constexpr int kColScales = kColRcp + (kGq ? kTile * 4 : 0);  // Accumulate: [stages][128] floats
  static constexpr int kBarriers = kColScales + (kAcc ? kStages * kTile * 4 : 0);
  static constexpr int kBytes = kBarriers + 2 * kStages * 8 + 1024;  // + the full and empty barriers, alignment
};
static_assert(Smem<Epi::GeluQuant>::kBytes <= 227 * 1024 && Smem<Epi::Bf16>::kBytes <= 227 * 1024 &&
                  Smem<Epi::Accumulate>::kBytes <= 227 * 1024,
              "a CTA's shared memory");

// A cluster's group of tiles of d: kM down the rows (two from a cluster of 2 up), kN across
// (fp8_gemm_nt_kernel says how its CTAs share the loads).
template <int kCluster>
struct ClusterShape {
  static constexpr int kM = kCluster >= 2 ? 2 : 1, kN = kCluster / kM;
};
// The groups of an M x N d in clusters of kCluster: across N (a row of groups), and in all. What
// the kernel walks and the launch sizes its grid by.
struct TileGroups {
  int across, total;
};
template <int kCluster>
__host__ __device__ __forceinline__ TileGroups tile_groups(int M, int N) {
  using C = ClusterShape<kCluster>;
  const int across = (N + kTile * C::kN - 1) / (kTile * C::kN);
  return {across, across * ((M + kTile * C::kM - 1) / (kTile * C::kM))};
}

// The epilogue's inputs and outputs besides d and its tensor map.
struct EpiArgs {
  const __nv_bfloat16* bias = nullptr;  // [N]; Bf16 and GeluQuant: added to the fp32 sum
  float* rows_scales = nullptr;         // GeluQuant: the rows operand's 1x128 scales, [N / 128][M]
  float* cols_scales = nullptr;         // GeluQuant: the cols operand's, [M / 128][N]
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MXDP_SM90A_KERNEL 1
#endif

#ifdef MXDP_SM90A_KERNEL
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
// Until the phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
}
// The same, acquiring at cluster scope: for arrivals released by other CTAs of the cluster.
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
}
// A box of {128 bytes of K, 128 rows} at (x = k, y = row) into shared memory, 128-byte swizzled.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_u32(dst)),
      "l"(map), "r"(smem_u32(bar)), "r"(x), "r"(y)
      : "memory");
}

// bytes (a multiple of 16, both addresses 16-aligned) from global memory into shared memory,
// credited to the barrier like a tensor copy.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// The same box multicast to the shared memory of every CTA in `mask` of the
// cluster (same offset, each CTA's barrier at the same offset credited).
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y,
                                                   uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_u32(dst)),
      "l"(map), "r"(smem_u32(bar)), "r"(x), "r"(y), "h"(mask)
      : "memory");
}
// A 128-byte-swizzled box from shared memory to (x, y) of the tensor, asynchronously (one
// bulk group a call); the tensor map clips what falls outside the matrix.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, const void* src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map),
               "r"(smem_u32(src)), "r"(x), "r"(y)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Until every store issued by this thread has read its shared memory.
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// Until every store issued by this thread is done.
__device__ __forceinline__ void tma_store_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// An arrival on the barrier at the same offset in the shared memory of CTA `rank` of the cluster,
// at the default (release, CTA) semantics: what orders the arrival after this warp's wgmma reads
// of the stage is their wgmma.wait_group, not a cluster-wide fence (as CUTLASS's ClusterBarrier).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// wgmma's shared-memory matrix descriptor for a K-major operand in the
// 128-byte swizzle that TMA wrote: rows of 128 bytes, 8-row groups 1024 bytes
// apart (the stride byte offset), base 1024-aligned. The k-th 32-deep slice of
// the 128-deep tile starts 32 k bytes further (start address in 16-byte units).
__device__ __forceinline__ uint64_t sw128_desc(const void* p) {
  return uint64_t((smem_u32(p) & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// Keeps the compiler from moving reads or writes of the accumulators across
// the asynchronous wgmma (they are written until wgmma.wait_group returns).
__device__ __forceinline__ void fence_regs(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (64 x 128 fp32, the warpgroup's accumulator fragments) = a . b^T (+ d when accumulate).
__device__ __forceinline__ void wgmma_m64n128k32(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// A consumer thread's place in its tile: rows r and r + 8, columns 8 i + 2 q + {0, 1} (i < 16) of
// wgmma's accumulator layout; the consumers are threads 128-383, thread 128 issues the stores.
struct Frag {
  int r, q;
};
constexpr int kStorer = 128;

// Byte offset of byte `col` of row `row` in a 128-byte-swizzled box of 128-byte rows: the 16-byte
// chunk j of row r sits at chunk j ^ (r % 8) (what TMA's 128-byte swizzle reads and writes).
__device__ __forceinline__ int sw128_at(int row, int col) { return row * 128 + (((col >> 4) ^ (row & 7)) << 4) + (col & 15); }

// Until the tile before's stores have read shared memory (the storer waits, then every consumer).
__device__ __forceinline__ void wait_out_free() {
  if (threadIdx.x == kStorer) tma_store_wait_read();
  asm volatile("bar.sync 1, 256;" ::: "memory");
}
// The consumers' shared-memory writes made visible to the async proxy, then all of them arrived.
__device__ __forceinline__ void out_written() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("bar.sync 1, 256;" ::: "memory");
}
// Pair i of row r + 8 h of the thread's fragment into the bf16 tile (two 128 x 64 halves).
__device__ __forceinline__ void put_pair(uint8_t* out, Frag f, int i, int h, uint32_t bf16x2) {
  *reinterpret_cast<uint32_t*>(out + (i / 8) * kOutHalfBytes + sw128_at(f.r + 8 * h, 2 * (8 * (i % 8) + 2 * f.q))) =
      bf16x2;
}
__device__ __forceinline__ void store_out(const CUtensorMap* map_d, const uint8_t* out, int m0, int n0, int N) {
  tma_store(map_d, out, n0, m0);
  if (n0 + 64 < N) tma_store(map_d, out + kOutHalfBytes, n0 + 64, m0);
}

// Epi::Bf16: d = bf16(sum + bias), the bias added in fp32 before the one rounding (as cuBLASLt's
// BIAS epilogue), through shared memory and a TMA store.
__device__ __forceinline__ void epilogue_bf16(float (&acc)[64], Frag f, uint8_t* out, const CUtensorMap* map_d,
                                              const __nv_bfloat16* bias, int m0, int n0, int M, int N) {
  if (bias != nullptr) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int col = n0 + 8 * i + 2 * f.q;
      if (col >= N) continue;
      const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + col));
      acc[4 * i + 0] += b.x;
      acc[4 * i + 1] += b.y;
      acc[4 * i + 2] += b.x;
      acc[4 * i + 3] += b.y;
    }
  }
  wait_out_free();
#pragma unroll
  for (int i = 0; i < 16; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]);
      put_pair(out, f, i, h, *reinterpret_cast<const uint32_t*>(&v));
    }
  out_written();
  if (threadIdx.x == kStorer && m0 < M && n0 < N) store_out(map_d, out, m0, n0, N);
}

// Epi::Accumulate: d += the tile, each thread's pairs (a quad's four pairs one 32-byte sector).
__device__ __forceinline__ void epilogue_accumulate(const float (&acc)[64], Frag f, float* d, int m0, int n0, int M,
                                                    int N) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int col = n0 + 8 * i + 2 * f.q;
    if (col >= N) continue;  // N is a multiple of 16: a pair is wholly in or out
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + f.r + 8 * h;
      if (row >= M) continue;
      float2* p = reinterpret_cast<float2*>(d + int64_t(row) * N + col);
      float2 v = *p;
      v.x += acc[4 * i + 2 * h];
      v.y += acc[4 * i + 2 * h + 1];
      *p = v;
    }
  }
}

// Epi::GeluQuant, fc's forward: the plain epilogue with the bias, then act_quantize's GELU + rows +
// cols on the tile (fp8_linear.h), their bits. The bias added to the fp32 sum before the one
// rounding to bf16 (epilogue_bf16's d): that pre-activation is d. Its GELU rounded to bf16 is quantized both ways: rows
// (a row's 128 columns one block: amax over the thread's 32 values, then its quad) and cols (a
// column's 128 rows one block: over the thread's two rows, the warp's 8 lanes of the same q, then
// the 8 warps through shared memory). Columns past N hold GELU 0, as act_quantize's absent chunks.
// M is a multiple of 128 (no rows past it). The code tiles leave by TMA stores beside d's.
__device__ __forceinline__ void epilogue_gelu_quant(float (&acc)[64], Frag f, int warp8, uint8_t* out, uint8_t* rq,
                                                    uint8_t* cq, float* cam, float* crcp, const CUtensorMap* map_d,
                                                    const CUtensorMap* map_rq, const CUtensorMap* map_cq,
                                                    const EpiArgs& e, int m0, int n0, int M, int N) {
  wait_out_free();
  const bool tile_in = m0 < M && n0 < N;  // else a cluster's tile past the edge: nothing is written
  float am[2] = {0.f, 0.f};               // rows r and r + 8
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int col = n0 + 8 * i + 2 * f.q;
    const bool present = col < N;
    float2 b = make_float2(0.f, 0.f);
    if (present) b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(e.bias + col));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* v = acc + 4 * i + 2 * h;
      const __nv_bfloat162 y = __floats2bfloat162_rn(v[0] + b.x, v[1] + b.y);  // epilogue_bf16's output
      const uint32_t pre = *reinterpret_cast<const uint32_t*>(&y);
      put_pair(out, f, i, h, pre);
      const uint32_t g =
          device::bf16x2_rn(device::gelu_tanh(device::bf16_lo(pre)), device::gelu_tanh(device::bf16_hi(pre)));
      v[0] = present ? device::bf16_lo(g) : 0.f;
      v[1] = present ? device::bf16_hi(g) : 0.f;
      am[h] = device::amax_fold(device::amax_fold(am[h], v[0]), v[1]);
    }
  }
  // The rows operand: each row's amax over its quad, its scale, its codes.
  float rc[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    am[h] = fmaxf(am[h], __shfl_xor_sync(0xFFFFFFFFu, am[h], 1));
    am[h] = fmaxf(am[h], __shfl_xor_sync(0xFFFFFFFFu, am[h], 2));
    const float sc = codec::fp8_pow2_scale(am[h], Fp8Kind::E4M3);
    rc[h] = codec::fp8_pow2_reciprocal(sc);
    if (f.q == 0 && tile_in) e.rows_scales[int64_t(n0 / kTile) * M + m0 + f.r + 8 * h] = sc;
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float q[4] = {acc[4 * i] * rc[0], acc[4 * i + 1] * rc[0], acc[4 * i + 2] * rc[1], acc[4 * i + 3] * rc[1]};
    const uint32_t w = device::encode4(q);
    const int c = 8 * i + 2 * f.q;
    *reinterpret_cast<uint16_t*>(rq + sw128_at(f.r, c)) = uint16_t(w);
    *reinterpret_cast<uint16_t*>(rq + sw128_at(f.r + 8, c)) = uint16_t(w >> 16);
  }
  // The cols operand: the column amaxes of the warp's 16 rows (lanes q, q + 4, ... hold a column's),
  // then the 8 warps' in shared memory, a column's scale and reciprocal.
#pragma unroll
  for (int i = 0; i < 16; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float m = device::amax_fold(device::amax_fold(0.f, acc[4 * i + j]), acc[4 * i + 2 + j]);
      m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 4));
      m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 8));
      m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16));
      if (f.r % 8 == 0) cam[warp8 * kTile + 8 * i + 2 * f.q + j] = m;
    }
  asm volatile("bar.sync 1, 256;" ::: "memory");
  if (const int u = threadIdx.x - kStorer; u < kTile) {
    float m = 0.f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) m = fmaxf(m, cam[w * kTile + u]);
    const float sc = codec::fp8_pow2_scale(m, Fp8Kind::E4M3);
    crcp[u] = codec::fp8_pow2_reciprocal(sc);
    if (tile_in && n0 + u < N) e.cols_scales[int64_t(m0 / kTile) * N + n0 + u] = sc;
  }
  asm volatile("bar.sync 1, 256;" ::: "memory");
  // Column c's codes are row c of the cols tile: bytes r and r + 8 of columns c and c + 1.
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int c = 8 * i + 2 * f.q;
    const float r0 = crcp[c], r1 = crcp[c + 1];
    const float q[4] = {acc[4 * i] * r0, acc[4 * i + 2] * r0, acc[4 * i + 1] * r1, acc[4 * i + 3] * r1};
    const uint32_t w = device::encode4(q);
    cq[sw128_at(c, f.r)] = uint8_t(w);
    cq[sw128_at(c, f.r + 8)] = uint8_t(w >> 8);
    cq[sw128_at(c + 1, f.r)] = uint8_t(w >> 16);
    cq[sw128_at(c + 1, f.r + 8)] = uint8_t(w >> 24);
  }
  out_written();
  if (threadIdx.x == kStorer && tile_in) {
    store_out(map_d, out, m0, n0, N);
    tma_store(map_rq, rq, n0, m0);  // rows codes [M, N]: columns n0.., rows m0..
    tma_store(map_cq, cq, m0, n0);  // cols codes [N, M]: columns m0.., rows n0..
  }
}

// What the loader and the consumers of a CTA share (fp8_gemm_nt_kernel sets it up once): the stage
// ring and its barriers in shared memory, and the CTA's place in its cluster and in the grid.
template <int kCluster>
struct Cta {
  uint8_t* smem;          // 1024-aligned: Smem's offsets are from here
  uint8_t* stage_a;       // the ring: a's stages,
  uint8_t* stage_b;       // then b's
  float* col_scales;      // kStages x 128, the wgrad's
  uint64_t* full;         // [kStages]: a stage loaded
  uint64_t* empty;        // [kStages]: a stage free again
  int rm, rn;             // the CTA's tile in its cluster's group: down, across
  int cluster, clusters;  // the CTA's cluster, the grid's clusters
  int nk;                 // k-blocks of 128 a tile
  TileGroups groups;      // the groups of tiles of d
  // The group's tile of this CTA.
  __device__ __forceinline__ int tile_n0(int g) const {
    return ((g % groups.across) * ClusterShape<kCluster>::kN + rn) * kTile;
  }
  __device__ __forceinline__ int tile_m0(int g) const {
    return ((g / groups.across) * ClusterShape<kCluster>::kM + rm) * kTile;
  }
};

// Warpgroup 0, the loader: one thread issues every TMA copy, the k-blocks of the CTA's tiles into
// the stage ring, each stage once the consumers of every CTA it goes to have released it.
template <int kCluster, Epi kEpi>
__device__ __forceinline__ void producer(const Cta<kCluster>& cta, int t, const CUtensorMap& map_a,
                                         const CUtensorMap& map_b, const float* sb, int ldb_s, int N) {
  constexpr bool kWgrad = kEpi == Epi::Accumulate;
  constexpr int kStages = Smem<kEpi>::kStages;
  constexpr int kCm = ClusterShape<kCluster>::kM, kCn = ClusterShape<kCluster>::kN;
  // The loader's warpgroup gives registers to the consumers': 128 x 40 + 256 x 232 fit the
  // SM's 64 K, and a consumer holds two 64-register partial products beside its sum.
  asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
  if (t != 0) return;
  int it = 0;  // k-blocks loaded so far, across tiles: the ring position and phase
  for (int g = cta.cluster; g < cta.groups.total; g += cta.clusters) {
    const int n0 = cta.tile_n0(g), m0 = cta.tile_m0(g);
    for (int kb = 0; kb < cta.nk; ++kb, ++it) {
      const int s = it % kStages;
      if (it >= kStages) {
        if constexpr (kCluster == 1) mbar_wait(&cta.empty[s], ((it / kStages) + 1) & 1);
        else mbar_wait_cluster(&cta.empty[s], ((it / kStages) + 1) & 1);
      }
      if constexpr (kWgrad) {
        // ldb_s is a multiple of 4 and n0 of 128: 16-byte aligned, a multiple of 16 bytes. A
        // cluster's tile past the last column (an odd number of them) loads no scales.
        const uint32_t bytes = n0 < N ? uint32_t(min(kTile, ldb_s - n0)) * 4 : 0;
        mbar_expect_tx(&cta.full[s], 2 * kStageBytes + bytes);
        if (bytes > 0) bulk_load(cta.col_scales + s * kTile, sb + int64_t(kb) * ldb_s + n0, bytes, &cta.full[s]);
      } else {
        mbar_expect_tx(&cta.full[s], 2 * kStageBytes);
      }
      if constexpr (kCn == 1) {
        tma_load(cta.stage_a + s * kStageBytes, &map_a, &cta.full[s], kb * kTile, m0);
      } else {  // share rn of a's box, to the CTAs of this row of tiles: ranks rm, rm + kCm, ...
        constexpr int kPart = kTile / kCn;
        uint16_t mask = 0;
        for (int j = 0; j < kCn; ++j) mask |= uint16_t(1u << (cta.rm + kCm * j));
        tma_load_multicast(cta.stage_a + s * kStageBytes + cta.rn * kPart * kTile, &map_a, &cta.full[s], kb * kTile,
                           m0 + cta.rn * kPart, mask);
      }
      if constexpr (kCm == 1) {
        tma_load(cta.stage_b + s * kStageBytes, &map_b, &cta.full[s], kb * kTile, n0);
      } else {  // share rm of b's box, to the CTAs of this column of tiles: ranks kCm rn + 0, 1, ...
        constexpr int kPart = kTile / kCm;
        const uint16_t mask = uint16_t(((1u << kCm) - 1) << (kCm * cta.rn));
        tma_load_multicast(cta.stage_b + s * kStageBytes + cta.rm * kPart * kTile, &map_b, &cta.full[s], kb * kTile,
                           n0 + cta.rm * kPart, mask);
      }
    }
  }
}

// Warpgroups 1 and 2, the consumers: a consumer computes rows cw * 64 .. + 63 of each of the CTA's
// tiles by wgmma, promoting every 128 of K, releases each stage to the loader(s) once read, and
// ends the tile with the epilogue kEpi. Thread t holds rows r_lo and r_lo + 8, columns
// 8 i + 2 (lane % 4) + {0, 1} (wgmma's accumulator layout).
template <int kCluster, Epi kEpi>
__device__ __forceinline__ void consumer(const Cta<kCluster>& cta, int wg, int t, const CUtensorMap& map_d,
                                         const CUtensorMap& map_rq, const CUtensorMap& map_cq, const float* sa,
                                         int lda_s, const float* sb, int ldb_s, const EpiArgs& e, void* d_out, int M,
                                         int N) {
  using L = Smem<kEpi>;
  constexpr bool kWgrad = kEpi == Epi::Accumulate;
  constexpr int kStages = L::kStages;
  uint8_t* out = cta.smem + L::kOut;  // the tile on its way out
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int cw = wg - 1, warp = t / 32, lane = t % 32;
  int it = 0;  // k-blocks consumed before this tile's first
  for (int g = cta.cluster; g < cta.groups.total; g += cta.clusters) {
    const int n0 = cta.tile_n0(g), m0 = cta.tile_m0(g);
    const int r_lo = m0 + cw * 64 + warp * 16 + lane / 4, r_hi = r_lo + 8;
    // A tile past the matrix (a cluster's group at the edge) still loads its share of the
    // stages for its peers, but reads no scales and stores nothing.
    const float* sb_row = kWgrad || n0 >= N ? nullptr : sb + int64_t(n0 / kTile) * ldb_s;
    float acc[64], p0[64], p1[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    // The scales of k-block kb, read before its stage is waited for.
    auto scales_of = [&](int kb, float& lo, float& hi) {
      const float b_scale = kWgrad ? 1.f : sb_row != nullptr ? sb_row[kb] : 0.f;
      lo = (r_lo < M ? sa[int64_t(kb) * lda_s + r_lo] : 0.f) * b_scale;
      hi = (r_hi < M ? sa[int64_t(kb) * lda_s + r_hi] : 0.f) * b_scale;
    };
    // k-block kb's 128-deep partial product into part, asynchronously (one commit group).
    auto issue = [&](int kb, float(&part)[64]) {
      const int s = (it + kb) % kStages;
      mbar_wait(&cta.full[s], ((it + kb) / kStages) & 1);
      const uint64_t da = sw128_desc(cta.stage_a + s * kStageBytes + cw * 64 * kTile);
      const uint64_t db = sw128_desc(cta.stage_b + s * kStageBytes);
      fence_regs(part);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int k = 0; k < kTile / 32; ++k) wgmma_m64n128k32(part, da + 2 * k, db + 2 * k, k > 0);
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    };
    // k-block kb's finished partial product, scaled, into the fp32 sum (the promotion), its
    // stage released to the loader(s).
    auto retire = [&](int kb, float(&part)[64], float s_lo, float s_hi) {
      fence_regs(part);
      const int s = (it + kb) % kStages;
      auto release = [&] {
        if (lane != 0) return;
        if constexpr (kCluster == 1) {
          mbar_arrive(&cta.empty[s]);
        } else {
#pragma unroll
          for (int c = 0; c < kCluster; ++c) mbar_arrive_cluster(&cta.empty[s], c);
        }
      };
      if constexpr (kWgrad) {
        // The column scales live in the stage: it is released only after they are read
        // (every lane of the warp: __syncwarp before lane 0 arrives).
        const float2* col = reinterpret_cast<const float2*>(cta.col_scales + s * kTile) + lane % 4;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const float2 cs = col[4 * i];
          acc[4 * i + 0] = fmaf(part[4 * i + 0], s_lo * cs.x, acc[4 * i + 0]);
          acc[4 * i + 1] = fmaf(part[4 * i + 1], s_lo * cs.y, acc[4 * i + 1]);
          acc[4 * i + 2] = fmaf(part[4 * i + 2], s_hi * cs.x, acc[4 * i + 2]);
          acc[4 * i + 3] = fmaf(part[4 * i + 3], s_hi * cs.y, acc[4 * i + 3]);
        }
        __syncwarp();
        release();
      } else {
        release();
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          acc[4 * i + 0] = fmaf(part[4 * i + 0], s_lo, acc[4 * i + 0]);
          acc[4 * i + 1] = fmaf(part[4 * i + 1], s_lo, acc[4 * i + 1]);
          acc[4 * i + 2] = fmaf(part[4 * i + 2], s_hi, acc[4 * i + 2]);
          acc[4 * i + 3] = fmaf(part[4 * i + 3], s_hi, acc[4 * i + 3]);
        }
      }
    };
    // Two k-blocks in flight: k-block kb + 1's wgmmas run while kb's product is promoted
    // (the promotions still add in k order: the same bits as one at a time).
    float lo0, hi0, lo1, hi1;
    scales_of(0, lo0, hi0);
    issue(0, p0);
    int kb = 0;
    for (; kb + 2 < cta.nk; kb += 2) {  // p0: k-block kb, in flight
      scales_of(kb + 1, lo1, hi1);
      issue(kb + 1, p1);
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      retire(kb, p0, lo0, hi0);
      scales_of(kb + 2, lo0, hi0);
      issue(kb + 2, p0);
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      retire(kb + 1, p1, lo1, hi1);
    }
    if (kb + 1 < cta.nk) {  // the last two
      scales_of(kb + 1, lo1, hi1);
      issue(kb + 1, p1);
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      retire(kb, p0, lo0, hi0);
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      retire(kb + 1, p1, lo1, hi1);
    } else {  // the last one
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      retire(kb, p0, lo0, hi0);
    }
    it += cta.nk;
    const Frag f{cw * 64 + warp * 16 + lane / 4, lane % 4};
    if constexpr (kEpi == Epi::Accumulate) {
      epilogue_accumulate(acc, f, static_cast<float*>(d_out), m0, n0, M, N);
    } else if constexpr (kEpi == Epi::Bf16) {
      epilogue_bf16(acc, f, out, &map_d, e.bias, m0, n0, M, N);
    } else {
      epilogue_gelu_quant(acc, f, cw * 4 + warp, out, cta.smem + L::kRowCodes, cta.smem + L::kColCodes,
                          reinterpret_cast<float*>(cta.smem + L::kColAmax),
                          reinterpret_cast<float*>(cta.smem + L::kColRcp), &map_d, &map_rq, &map_cq, e, m0, n0, M, N);
    }
  }
  if (!kWgrad && threadIdx.x == kStorer) tma_store_wait();  // the last tile's stores, before the CTA leaves
}
#endif  // MXDP_SM90A_KERNEL

// d = a . b^T (fp8_gemm_sm90.h) in 128x128 tiles of d. Tiles go to clusters
// of kCluster CTAs in groups of kCm x kCn tiles (kCluster 1: 1 x 1; 2: 2 x 1,
// two tiles down the rows; 4: 2 x 2). CTA `rank` of the cluster takes the tile
// (rank % kCm, rank / kCm) of its group. CTAs of the cluster on the same 128
// rows of a each load a 1 / kCn share of a's box and multicast it to all of
// them; those on the same 128 rows of b, a 1 / kCm share of b's. So a CTA pulls
// 32 KB a stage from L2 alone, 24 KB in a 2 x 1 cluster, 16 KB in a 2 x 2 one
// (a 128x128 tile does 128 FLOP a byte, which may leave one CTA bound by the
// L2's bandwidth; the 2 x 1 cluster measured 2.3x slower while its remote
// arrivals were at cluster scope, and is fprop's and dgrad's default since
// they are at CTA scope: docs/fp8_history.md, "Our own FP8 GEMM, session by
// session").
// A cluster takes the groups cluster_id, + clusters, ... (one each when the
// grid has a cluster per group; a persistent grid keeps loading the next
// group's stages while its consumers finish the last). sa: a's 1x128 scales at
// kb * lda_s + row. Epilogues Bf16 and GeluQuant (fprop, dgrad): sb holds b's
// tile scales at (n / 128) * ldb_s + kb; the tile leaves through shared memory
// by TMA stores (epilogue_bf16, epilogue_gelu_quant). Accumulate: b has 1x128
// scales too, sb at kb * ldb_s + n (the loader copies a stage's 128 of them
// into shared memory beside its codes), each product is scaled by its row's
// and its column's scale, and the fp32 tile is added into d (d += a . b^T).
// kCm x kCn is ClusterShape's; the loader's work is producer's, the
// multipliers' consumer's, and what they share a Cta.
template <int kCluster, Epi kEpi>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_nt_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                       const __grid_constant__ CUtensorMap map_d, const __grid_constant__ CUtensorMap map_rq,
                       const __grid_constant__ CUtensorMap map_cq, const float* __restrict__ sa, int lda_s,
                       const float* __restrict__ sb, int ldb_s, const EpiArgs e, void* __restrict__ d_out, int M,
                       int N, int K) {
#ifdef MXDP_SM90A_KERNEL
  using L = Smem<kEpi>;
  constexpr int kStages = L::kStages;
  constexpr int kCm = ClusterShape<kCluster>::kM;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const uint32_t rank = kCluster > 1 ? cluster_rank() : 0;
  const Cta<kCluster> cta{.smem = smem,
                          .stage_a = smem,
                          .stage_b = smem + L::kB,
                          .col_scales = reinterpret_cast<float*>(smem + L::kColScales),
                          .full = full,
                          .empty = full + kStages,
                          .rm = int(rank) % kCm,
                          .rn = int(rank) / kCm,
                          .cluster = int(blockIdx.x / kCluster),
                          .clusters = int(gridDim.x / kCluster),
                          .nk = (K + kTile - 1) / kTile,
                          .groups = tile_groups<kCluster>(M, N)};
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&cta.full[s], 1);
      mbar_init(&cta.empty[s], kConsumerWarps * kCluster);  // a stage is free when every CTA's consumers are done
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if constexpr (kCluster > 1) cluster_sync();  // no multicast before the peer's barriers exist
  else __syncthreads();

  if (wg == 0)
    producer<kCluster, kEpi>(cta, t, map_a, map_b, sb, ldb_s, N);
  else
    consumer<kCluster, kEpi>(cta, wg, t, map_d, map_rq, map_cq, sa, lda_s, sb, ldb_s, e, d_out, M, N);
  // No CTA leaves while its peer may still multicast into it or arrive on its barriers.
  if constexpr (kCluster > 1) {
    __syncwarp();
    cluster_sync();
  }
#else
  __trap();  // compiled for an architecture without wgmma: fp8_gemm_sm90_supported() said no
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    MXDP_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    MXDP_CHECK(q == cudaDriverEntryPointSuccess && p != nullptr,
               "the CUDA driver has no cuTensorMapEncodeTiled (the FP8 GEMM needs a CUDA 12 driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A rows x cols row-major matrix as TMA sees it: boxes of box_rows rows x 128
// bytes, 128-byte swizzle; loads fill zeros outside the matrix, stores clip.
CUtensorMap tensor_map(const void* base, CUtensorMapDataType type, int elem_bytes, int rows, int cols, int box_rows,
                       const char* what) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * elem_bytes};
  const cuuint32_t box[2] = {cuuint32_t(128 / elem_bytes), cuuint32_t(box_rows)}, elem_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&m, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MXDP_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (CUresult ", int(r), ") for a ", rows, " x ", cols,
             " ", what);
  return m;
}
// E4M3 codes: 128 of K a box row.
CUtensorMap codes_map(const uint8_t* codes, int rows, int K, int box_rows) {
  return tensor_map(codes, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, rows, K, box_rows, "FP8 operand");
}

// The kernel's launch configuration (grid left to the caller).
template <int kCluster, Epi kEpi>
cudaLaunchConfig_t launch_config(cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = kCluster;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = Smem<kEpi>::kBytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Clusters of kCluster CTAs that fit on the device at once: the persistent grid's size.
template <int kCluster, Epi kEpi>
int resident_clusters() {
  static const int n = [] {
    auto* kernel = fp8_gemm_nt_kernel<kCluster, kEpi>;
    MXDP_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem<kEpi>::kBytes));
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t probe = launch_config<kCluster, kEpi>(0, &attr);
    probe.gridDim = dim3(kCluster);
    int count = 0;
    MXDP_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&count, kernel, &probe));
    MXDP_CHECK(count > 0, "fp8_gemm_nt_sm90: no cluster of ", kCluster, " CTAs fits on this device");
    return count;
  }();
  return n;
}

// What a launch writes: d (bf16, or fp32 added into for Accumulate) and, for GeluQuant, the two
// code matrices (their scales are in EpiArgs).
struct Outputs {
  void* d = nullptr;
  uint8_t* rows_codes = nullptr;
  uint8_t* cols_codes = nullptr;
};

// d = a . b^T and the epilogue's outputs; b's scale layout is its kind's (tiles, or 1x128 for Accumulate).
template <int kCluster, Epi kEpi>
void launch(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, const EpiArgs& e, const Outputs& o,
            cudaStream_t stream, bool persistent) {
  constexpr bool kWgrad = kEpi == Epi::Accumulate;
  auto* kernel = fp8_gemm_nt_kernel<kCluster, kEpi>;
  cudaLaunchAttribute attr;
  cudaLaunchConfig_t cfg = launch_config<kCluster, kEpi>(stream, &attr);
  const int resident = resident_clusters<kCluster, kEpi>();
  using C = ClusterShape<kCluster>;
  const int groups = tile_groups<kCluster>(M, N).total;
  cfg.gridDim = dim3((persistent ? std::min(groups, resident) : groups) * kCluster);
  const CUtensorMap ma = codes_map(a.codes, M, K, kTile / C::kN), mb = codes_map(b.codes, N, K, kTile / C::kM);
  // The bf16 output in 128 x 64 halves of a tile (the wgrad adds into d itself and has no map), the
  // code tiles of GeluQuant (the other epilogues pass a's map, unused).
  const CUtensorMap md =
      kWgrad ? ma : tensor_map(o.d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, M, N, kTile, "bf16 output");
  const bool gq = kEpi == Epi::GeluQuant;
  const CUtensorMap mrq = gq ? codes_map(o.rows_codes, M, N, kTile) : ma;
  const CUtensorMap mcq = gq ? codes_map(o.cols_codes, N, M, kTile) : ma;
  const int ldb_s = int(kWgrad ? fp8_1x128_scale_ld(N) : fp8b128_gemm_scale_ld(K));
  MXDP_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, ma, mb, md, mrq, mcq, a.scales, int(fp8_1x128_scale_ld(M)),
                                     b.scales, ldb_s, e, o.d, M, N, K));
}

// The launch of the cluster size asked for.
template <Epi kEpi>
void launch_cluster(int cluster, const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, const EpiArgs& e,
                    const Outputs& o, cudaStream_t stream, bool persistent) {
  auto* run = cluster == 4 ? launch<4, kEpi> : cluster == 2 ? launch<2, kEpi> : launch<1, kEpi>;
  run(a, b, M, N, K, e, o, stream, persistent);
}

// fp8_gemm_sm90_supported's two halves. The shape: M, N, K positive multiples of 16.
bool shape_supported(int M, int N, int K) { return !(M <= 0 || N <= 0 || K <= 0 || M % 16 || N % 16 || K % 16); }
// The device: compute capability 9.0. Asked once: a process drives one device (the GEMM is
// called per linear layer, per step).
bool device_supported() {
  static const bool hopper = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
      return false;
    return major == 9 && minor == 0;
  }();
  return hopper;
}

// What every entry point checks: E4M3 operands of the scalings given, the shape, the device, the
// alignment.
void check_operands(const char* what, const Fp8Operand& a, const Fp8Operand& b, Fp8Scaling b_scaling, int M, int N,
                    int K, const void* d, int cluster) {
  MXDP_CHECK(a.kind == Fp8Kind::E4M3 && b.kind == Fp8Kind::E4M3, what, " takes E4M3 operands");
  MXDP_CHECK(a.scaling == Fp8Scaling::Rows1x128 && b.scaling == b_scaling, what, " takes a with 1x128 scales and b with ",
             b_scaling == Fp8Scaling::Rows1x128 ? "1x128 scales" : "128x128 tiles");
  MXDP_CHECK(shape_supported(M, N, K), what, ": shape ", M, " x ", N, " x ", K,
             " (M, N and K must be positive multiples of 16)");
  MXDP_CHECK(device_supported(), what, " runs only on a compute capability 9.0 device");
  MXDP_CHECK((reinterpret_cast<uintptr_t>(a.codes) | reinterpret_cast<uintptr_t>(b.codes) |
              reinterpret_cast<uintptr_t>(d)) % 16 == 0,
             what, ": the operands' codes and d must be 16-byte aligned");
  MXDP_CHECK(cluster == 1 || cluster == 2 || cluster == 4, what, ": cluster ", cluster, " (1, 2 or 4)");
}

}  // namespace

bool fp8_gemm_sm90_supported(int M, int N, int K) { return shape_supported(M, N, K) && device_supported(); }

int fp8_gemm_sm90_resident_clusters(int cluster) {
  MXDP_CHECK(cluster == 1 || cluster == 2 || cluster == 4, "fp8_gemm_sm90_resident_clusters: cluster ", cluster,
             " (1, 2 or 4)");
  return cluster == 4   ? resident_clusters<4, Epi::Bf16>()
         : cluster == 2 ? resident_clusters<2, Epi::Bf16>()
                        : resident_clusters<1, Epi::Bf16>();
}

void fp8_gemm_nt_sm90(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, const uint16_t* bias,
                      uint16_t* d, cudaStream_t stream, int cluster, bool persistent) {
  check_operands("fp8_gemm_nt_sm90", a, b, Fp8Scaling::Tiles128, M, N, K, d, cluster);
  MXDP_CHECK(reinterpret_cast<uintptr_t>(bias) % 4 == 0, "fp8_gemm_nt_sm90: the bias must be 4-byte aligned");
  launch_cluster<Epi::Bf16>(cluster, a, b, M, N, K, {.bias = reinterpret_cast<const __nv_bfloat16*>(bias)},
                            {.d = d}, stream, persistent);
}

void fp8_gemm_nt_accumulate_sm90(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, float* d,
                                 cudaStream_t stream, int cluster, bool persistent) {
  check_operands("fp8_gemm_nt_accumulate_sm90", a, b, Fp8Scaling::Rows1x128, M, N, K, d, cluster);
  launch_cluster<Epi::Accumulate>(cluster, a, b, M, N, K, {}, {.d = d}, stream, persistent);
}

void fp8_gemm_gelu_quant_sm90(const Fp8Operand& a, const Fp8Operand& b, int M, int N, int K, const uint16_t* bias,
                              const Fp8GeluOut& out, cudaStream_t stream, int cluster, bool persistent) {
  const char* what = "fp8_gemm_gelu_quant_sm90";
  check_operands(what, a, b, Fp8Scaling::Tiles128, M, N, K, out.pre, cluster);
  MXDP_CHECK(M % kTile == 0, what, ": M (", M, ") must be a multiple of 128 (the cols operand's blocks)");
  MXDP_CHECK(bias != nullptr && out.rows_codes && out.rows_scales && out.cols_codes && out.cols_scales, what,
             ": null bias or output");
  MXDP_CHECK((reinterpret_cast<uintptr_t>(bias) | reinterpret_cast<uintptr_t>(out.rows_codes) |
              reinterpret_cast<uintptr_t>(out.cols_codes)) % 16 == 0,
             what, ": the bias and the codes must be 16-byte aligned");
  const EpiArgs e{.bias = reinterpret_cast<const __nv_bfloat16*>(bias),
                  .rows_scales = out.rows_scales,
                  .cols_scales = out.cols_scales};
  launch_cluster<Epi::GeluQuant>(cluster, a, b, M, N, K, e,
                                 {.d = out.pre, .rows_codes = out.rows_codes, .cols_codes = out.cols_codes}, stream,
                                 persistent);
}

}  // namespace mxdp::cuda
