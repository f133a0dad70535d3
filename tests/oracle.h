// The oracle of the lifecycle tests (docs/engine.md, "Tests that hold it": an
// oracle outside the engine).
//
// Parity with reference mode cannot see a bug in the chain both modes share
// (stage, gather bookkeeping, unpack, load, sync). The oracle can: whenever a
// model reads its weights, its compute weights must equal, bit for bit,
// quantize-then-dequantize of the full fp32 masters computed here by the
// format reference (quant.h) — from DataParallel::full_master(), never through
// the engine's staged payloads, gathers, versions or unpack. It shares no code
// with the chain: which format a param travels in is the rule of docs/engine.md
// ("Buffers and layout") written out below, not asked of Layout; each param is
// quantized as the whole row-major matrix it is (rowwise blocks, NVFP4 with the
// amax of the whole tensor), not as the engine's shards and pieces.
//
// Compute dtype: F32 models must hold the dequantized fp32 values; BF16 models
// (the GPU GPT) must hold their bf16 round-to-nearest-even.
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "util/check.h"
#include "compare_util.h"
#include "formats/codec.h"
#include "models/model.h"
#include "engine/options.h"
#include "formats/fp8_block.h"
#include "formats/quant.h"

namespace mxdp::testing {

// ---- bits ---------------------------------------------------------------------

// same_bits (bitwise equality): compare_util.h.

inline size_t compute_dtype_bytes(ComputeDType t) { return t == ComputeDType::F32 ? 4 : 2; }

// The value of element i of a compute-dtype byte array, for messages.
inline std::string describe_element(const std::vector<uint8_t>& bytes, size_t i, ComputeDType t) {
  char s[96];
  if (t == ComputeDType::F32) {
    uint32_t u;
    std::memcpy(&u, bytes.data() + 4 * i, 4);
    std::snprintf(s, sizeof s, "%.9g (0x%08x)", double(std::bit_cast<float>(u)), u);
  } else {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    std::snprintf(s, sizeof s, "%.5g (bf16 0x%04x)", double(codec::bf16_to_f32(h)), h);
  }
  return s;
}

// "" when got and want (arrays of compute-dtype elements) are bitwise equal;
// else sizes, or the first differing element with both values and bits and
// how many elements differ.
inline std::string bit_mismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, ComputeDType t) {
  const size_t es = compute_dtype_bytes(t);
  if (got.size() != want.size())
    return "holds " + std::to_string(got.size() / es) + " elements, expected " + std::to_string(want.size() / es);
  if (got.empty() || std::memcmp(got.data(), want.data(), got.size()) == 0) return "";
  size_t first = 0, n = 0;
  for (size_t i = 0; i < got.size() / es; ++i)
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0) {
      if (n++ == 0) first = i;
    }
  return std::to_string(n) + " of " + std::to_string(got.size() / es) + " elements differ; first at [" +
         std::to_string(first) + "]: holds " + describe_element(got, first, t) + ", expected " +
         describe_element(want, first, t);
}

// ---- the oracle's values ---------------------------------------------------------

// The gather format of a param (docs/engine.md, "Buffers and layout"): a 2-D weight
// whose rows hold whole 32-element blocks travels in the chosen format (for
// fp8b128's 128x128 tiles: any rows, cols a multiple of 16, the FP8 GEMMs'
// alignment; edge tiles partial), everything else in BF16; under fp8b128 the
// embedding tables (wte, wpe, Llama's embed) travel in BF16 too.
inline WeightFormat oracle_format(const ParamSpec& s, WeightFormat chosen) {
  if (s.shape.size() != 2) return WeightFormat::Bf16;
  if (chosen == WeightFormat::Fp8b128 && s.embedding) return WeightFormat::Bf16;
  const bool blocks = chosen == WeightFormat::Fp8b128 ? s.shape[1] % 16 == 0 : s.shape[1] % 32 == 0;
  return blocks ? chosen : WeightFormat::Bf16;
}

// Quantize-then-dequantize of a param's full fp32 master by the format reference.
inline std::vector<float> oracle_dequantized(const ParamSpec& s, const std::vector<float>& master,
                                             WeightFormat chosen, ScaleRounding rounding) {
  MXDP_CHECK(int64_t(master.size()) == s.numel(), "oracle: param '", s.name, "' has ", s.numel(),
             " elements, its master ", master.size());
  std::vector<float> out(master.size());
  const WeightFormat f = oracle_format(s, chosen);
  if (f == WeightFormat::Bf16) {
    for (size_t i = 0; i < master.size(); ++i) out[i] = codec::bf16_to_f32(codec::bf16_from_f32(master[i]));
    return out;
  }
  const int64_t rows = s.shape[0], cols = s.shape[1];
  if (f == WeightFormat::Fp8b128) {
    std::vector<uint8_t> codes(size_t(rows * cols));
    std::vector<float> scales(size_t(fp8b128_scale_count(rows, cols)));
    fp8b128_quantize(master.data(), rows, cols, codes.data(), scales.data());
    fp8b128_dequantize(codes.data(), scales.data(), rows, cols, out.data());
    return out;
  }
  if (f == WeightFormat::Mxfp8) {
    std::vector<uint8_t> codes(mxfp8_code_bytes(rows, cols)), scales(mxfp8_scale_bytes_rowwise(rows, cols));
    mxfp8_quantize_rowwise(master.data(), rows, cols, {Fp8Kind::E4M3, rounding}, codes.data(), scales.data());
    mxfp8_dequantize_rowwise(codes.data(), scales.data(), rows, cols, Fp8Kind::E4M3, out.data());
    return out;
  }
  const float tensor_amax = amax(master.data(), int64_t(master.size()));
  std::vector<uint8_t> codes(nvfp4_code_bytes(rows, cols)), scales(nvfp4_scale_bytes(rows, cols));
  nvfp4_quantize_rowwise(master.data(), rows, cols, tensor_amax, codes.data(), scales.data());
  nvfp4_dequantize_rowwise(codes.data(), scales.data(), nvfp4_tensor_scale(tensor_amax).s_dec, rows, cols, out.data());
  return out;
}

// The same values as the compute-dtype bytes a model must hold.
inline std::vector<uint8_t> oracle_compute_bytes(const ParamSpec& s, const std::vector<float>& master,
                                                 WeightFormat chosen, ScaleRounding rounding, ComputeDType t) {
  const std::vector<float> v = oracle_dequantized(s, master, chosen, rounding);
  std::vector<uint8_t> out(v.size() * compute_dtype_bytes(t));
  if (t == ComputeDType::F32) {
    if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  } else {
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = codec::bf16_from_f32(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// FP8 compute (docs/fp8.md): W and W^T as the GEMMs read them: E4M3 codes and
// the tile scales in cuBLASLt's layout (each row of tiles padded to a multiple
// of 4 scales with 0), from the full fp32 master. W^T is the quantization of
// the transposed master (equal, bit for bit, to the transpose of q(W): the
// identity test_fp8_format proves), so the engine's transpose is compared
// with something it did not compute; the GEMM layout is written out here.
struct OracleFp8 {
  std::vector<uint8_t> codes, codes_t;
  std::vector<float> scales, scales_t;  // GEMM layout
};
inline std::vector<float> oracle_gemm_scales(const std::vector<float>& compact, int64_t rows, int64_t cols) {
  const int64_t tr = (rows + 127) / 128, tc = (cols + 127) / 128, ld = (tc + 3) / 4 * 4;
  std::vector<float> g(size_t(tr * ld), 0.0f);
  for (int64_t i = 0; i < tr; ++i)
    for (int64_t j = 0; j < tc; ++j) g[size_t(i * ld + j)] = compact[size_t(i * tc + j)];
  return g;
}
inline OracleFp8 oracle_fp8(const ParamSpec& s, const std::vector<float>& master) {
  const int64_t rows = s.shape[0], cols = s.shape[1];
  std::vector<float> mt(master.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) mt[size_t(c * rows + r)] = master[size_t(r * cols + c)];
  OracleFp8 o;
  std::vector<float> compact(size_t(fp8b128_scale_count(rows, cols))), compact_t(compact.size());
  o.codes.resize(master.size());
  o.codes_t.resize(master.size());
  fp8b128_quantize(master.data(), rows, cols, o.codes.data(), compact.data());
  fp8b128_quantize(mt.data(), cols, rows, o.codes_t.data(), compact_t.data());
  o.scales = oracle_gemm_scales(compact, rows, cols);
  o.scales_t = oracle_gemm_scales(compact_t, cols, rows);
  return o;
}

// ---- the check ------------------------------------------------------------------

// What every param's compute weights must hold right now, and the comparisons.
// A mismatch is recorded, never thrown: the caller agrees on failures across
// ranks at a point every rank reaches (lifecycle.h), so one rank's finding
// cannot leave the others waiting in a collective.
class Oracle {
 public:
  // Sets the expected bytes of every param from its full fp32 master
  // (masters[p] = DataParallel::full_master(p)).
  // fp8_compute: the fp8b128 params are also read as FP8 W and W^T (check_fp8).
  void expect(const std::vector<ParamSpec>& specs, const std::vector<std::vector<float>>& masters,
              WeightFormat chosen, ScaleRounding rounding, ComputeDType t, bool fp8_compute = false) {
    MXDP_CHECK(specs.size() == masters.size(), "oracle: ", specs.size(), " params, ", masters.size(), " masters");
    dtype_ = t;
    names_.clear();
    want_.clear();
    for (size_t p = 0; p < specs.size(); ++p) {
      names_.push_back(specs[p].name);
      want_.push_back(oracle_compute_bytes(specs[p], masters[p], chosen, rounding, t));
    }
    fp8_.assign(specs.size(), {});
    if (fp8_compute)
      for (size_t p = 0; p < specs.size(); ++p)
        if (oracle_format(specs[p], chosen) == WeightFormat::Fp8b128) fp8_[p] = oracle_fp8(specs[p], masters[p]);
    armed_ = true;
  }

  // FP8 compute: param p's W (or W^T) as the engine hands it to the model
  // (host copies of its codes and GEMM-layout scales), bit for bit.
  void check_fp8(int p, const std::vector<uint8_t>& codes, const std::vector<float>& scales, bool transposed,
                 const std::string& where) {
    if (!armed_) {
      note(where + ": the model read FP8 weights while the oracle expected nothing");
      return;
    }
    ++fp8_checks_;
    const OracleFp8& o = fp8_.at(p);
    const char* what = transposed ? "transposed FP8 weight" : "FP8 weight";
    if (o.codes.empty()) {
      note(where + ": '" + names_[p] + "' handed out as an " + what + " but it is not an fp8b128 param");
      return;
    }
    const std::vector<uint8_t>& wc = transposed ? o.codes_t : o.codes;
    const std::vector<float>& ws = transposed ? o.scales_t : o.scales;
    if (codes != wc) {
      size_t n = 0, first = 0;
      for (size_t i = 0; i < std::min(codes.size(), wc.size()); ++i)
        if (codes[i] != wc[i] && n++ == 0) first = i;
      note(where + ": " + what + " codes of '" + names_[p] + "' are not fp8b128 of its fp32 master: " +
           std::to_string(n) + " of " + std::to_string(wc.size()) + " differ, first at [" + std::to_string(first) + "]");
    } else if (!same_bits(scales, ws)) {
      note(where + ": " + what + " tile scales (GEMM layout) of '" + names_[p] + "' are not those of its fp32 master");
    }
  }
  // Nothing is expected until the next expect() (between ops that read weights).
  void disarm() { armed_ = false; }
  bool armed() const { return armed_; }

  // Compares param p's compute weights (`got`, compute-dtype bytes) with the
  // expectation; records the first mismatch, labelled with `where`.
  void check(int p, const std::vector<uint8_t>& got, const std::string& where) {
    if (!armed_) {
      note(where + ": the model read weights while the oracle expected nothing (an op the harness does not know?)");
      return;
    }
    ++checks_;
    const std::string d = bit_mismatch(got, want_.at(p), dtype_);
    if (!d.empty()) note(where + ": compute weights of '" + names_[p] + "' are not quantize-then-dequantize of its fp32 master: " + d);
  }

  const std::string& failure() const { return failure_; }
  int64_t checks() const { return checks_; }  // param comparisons done
  int64_t fp8_checks() const { return fp8_checks_; }  // FP8 W and W^T comparisons done
  size_t num_params() const { return want_.size(); }

 private:
  void note(const std::string& m) {
    if (failure_.empty()) failure_ = "oracle: " + m;
  }
  ComputeDType dtype_ = ComputeDType::F32;
  std::vector<std::string> names_;
  std::vector<std::vector<uint8_t>> want_;
  std::vector<OracleFp8> fp8_;  // per param (empty unless an FP8 compute weight)
  std::string failure_;
  int64_t checks_ = 0, fp8_checks_ = 0;
  bool armed_ = false;
};

}  // namespace mxdp::testing
