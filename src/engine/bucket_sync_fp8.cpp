// BucketSync's FP8 compute link of the chain (docs/fp8.md, "Integration
// design"): master -> staged -> gathered -> weights -> transposed, for the
// params of the fp8b128 buffer the model reads as FP8 (ParamSpec::fp8_linear)
// when compute_dtype is fp8. "weights" of those is then W as the GEMMs
// read it (each param's codes, contiguous, and its GEMM-layout tile scales:
// engine/buffers.h's Fp8Store), not dequantized compute weights; "transposed"
// is W^T, made from W once per version before the first dgrad reads it.
#include "engine/bucket_sync.h"
#include "engine/fault_macros.h"
#include "formats/fp8_block.h"
#include "util/check.h"

namespace mxdp {

bool BucketSync::reads_fp8(int p) const {
  return opt_.fp8_compute(layout_.buffers[layout_.place[p].buffer].format, params_[p].fp8_linear);
}

// W of every param of the bucket the model reads as FP8, from its gathered payload. A piece is whole
// 128-row slabs of its param (layout.h; a param's last slab may be short), so
// its codes are rows of the param's codes and its compact scales whole tile
// rows of the param's scales, which go straight into the GEMM layout. Codes
// are copied only for a param split by a shard cut; a param in one piece is
// read in place (buffers.h's Fp8Store), so its unpack writes the scales alone.
void BucketSync::fp8_unpack(int f, int b) {
  const GatherBuffer& gb = layout_.buffers[f];
  const Bucket& bk = gb.buckets[b];
  const PayloadShape ps = payload_shape(gb.format, bk);
  const FormatTraits& ft = format_traits(gb.format);
  bool any = false;
  for (int p : bk.params) any = any || reads_fp8(p);
  if (!any) return;
  if (MXDP_FAULT(transpose_from_previous)) {
    // The bug: W^T refreshed from W before the unpack, labelled with the
    // version being unpacked (stale codes where W is a copy, stale tile
    // scales where W is read in place: the gather already put its codes).
    MXDP_FAULT_FIRED();
    fp8_transpose(f, b);
    st_[f][b].transposed_v = st_[f][b].gathered_v;
  }
  // Each piece's codes (copied where its param keeps its own), then every
  // piece's tile scales into its param's GEMM layout in one op.
  const uint8_t* base = bufs_.payload_ptr(f, b);
  std::vector<Fp8b128Job> jobs;
  for (int s = 0; s < dp_; ++s) {
    const uint8_t* slot = base + s * ps.shard_bytes;
    for (const Piece& pc : bk.shards[s]) {
      if (pc.len <= 0 || !reads_fp8(pc.param)) continue;
      Fp8Store& w = bufs_.fp8(pc.param);
      const int64_t cols = params_[pc.param].shape[1];
      // The piece's first row starts a tile row (whole slabs before it).
      const int64_t first_tile_row = pc.param_begin / cols / kFp8Tile;
      const uint8_t* codes = slot + ft.code_bytes(pc.shard_pos);
      if (w.in_place())  // the GEMMs read them where the gather put them
        MXDP_CHECK(w.codes == codes, "internal: '", params_[pc.param].name,
                   "' is read in place but not from its piece");
      else
        ops_.copy(w.own_codes.data() + pc.param_begin, codes, size_t(pc.len));
      Fp8b128Job j;
      j.scales = reinterpret_cast<const float*>(slot + ps.scales_at(pc));
      j.out_scales = w.gemm.data() + first_tile_row * fp8b128_gemm_scale_ld(cols);
      j.rows = pc.len / cols;
      j.cols = cols;
      jobs.push_back(j);
    }
  }
  DeviceTable<Fp8b128Job>& t = fp8_tables_[f][b].scales;
  t.hold(ops_, std::move(jobs));
  ops_.fp8b128_scales_for_gemm_many(t.host, t.dev.data());
}

// W^T of every param of the bucket from its W, in one op (the transpose is
// exact: codes move, the scale grid transposes).
void BucketSync::fp8_transpose(int f, int b) {
  std::vector<Fp8b128Job> jobs;
  for (int p : layout_.buffers[f].buckets[b].params) {
    if (!reads_fp8(p)) continue;
    Fp8Store& w = bufs_.fp8(p);
    jobs.push_back(
        {w.codes, w.gemm.data(), w.codes_t.data(), w.gemm_t.data(), params_[p].shape[0], params_[p].shape[1]});
  }
  DeviceTable<Fp8b128Job>& t = fp8_tables_[f][b].transposes;
  t.hold(ops_, std::move(jobs));
  ops_.fp8b128_transpose_gemm_many(t.host, t.dev.data());
}

Fp8Weight BucketSync::fp8_weight(int p) {
  MXDP_CHECK(p >= 0 && p < int(params_.size()), "fp8_weight(", p, "): no such param");
  check_fresh(p);
  Fp8Store& w = bufs_.fp8(p);
  return {w.codes, w.gemm.data(), params_[p].shape[0], params_[p].shape[1]};
}

Fp8Weight BucketSync::fp8_weight_transposed(int p) {
  MXDP_CHECK(p >= 0 && p < int(params_.size()), "fp8_weight_transposed(", p, "): no such param");
  const ParamPlace& pl = layout_.place[p];
  BucketState& st = st_[pl.buffer][pl.bucket];
  Fp8Store& w = bufs_.fp8(p);
  if (st.transposed_v < st.weights_v) {
    if (MXDP_FAULT(skip_transpose_refresh)) {
      MXDP_FAULT_FIRED();
    } else {
      fp8_transpose(pl.buffer, pl.bucket);
      st.transposed_v = st.weights_v;
    }
  }
  MXDP_CHECK(st.transposed_v == st.weights_v && st.weights_v == version_, "stale transpose: dgrad is about to read '",
             params_[p].name, "'^T made from version ", st.transposed_v, " of its weights (version ", st.weights_v,
             "), but the latest optimizer step made version ", version_);
  return {w.codes_t.data(), w.gemm_t.data(), params_[p].shape[1], params_[p].shape[0]};
}

}  // namespace mxdp
