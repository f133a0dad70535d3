#include "engine/layout.h"

#include <algorithm>
#include <numeric>

#include "util/check.h"

namespace mxdp {

PayloadShape payload_shape(WeightFormat f, int64_t n, int64_t scales) {
  const FormatTraits& t = format_traits(f);
  PayloadShape p;
  p.code_bytes = t.code_bytes(n);
  p.one_scale = t.scale_bytes;
  p.scale_bytes = scales * t.scale_bytes;
  p.shard_bytes = align_up(p.code_bytes + p.scale_bytes, kPayloadAlign);
  return p;
}

PayloadShape payload_shape(WeightFormat f, int64_t n) {
  const FormatTraits& t = format_traits(f);
  return payload_shape(f, n, t.scale_bytes == 0 ? 0 : n / t.block);
}

// unit: what every shard size must be a multiple of (kShardAlign, or for a
// slab format the lcm of it and each param's slab: docs/fp8.md, "Layout").
static void close_bucket(Bucket& b, int64_t end, int dp, int64_t unit) {
  int64_t used = end - b.offset;
  b.shard_numel = std::max<int64_t>(unit, align_up(ceil_div(used, dp), unit));
  b.numel = b.shard_numel * dp;
}

// Each piece's scales in its shard's payload, and the bucket's scale count (the
// same for every shard, so the gather's slices are equal). Row-block formats:
// scale i of a shard is block i of its elements (padding included). Slab
// formats: piece after piece, each piece's tile scales, which are not at its
// element offset / block when its param's cols are not a multiple of 128.
static void place_scales(Bucket& b, const FormatTraits& ft, const std::vector<ParamSpec>& params) {
  if (ft.scale_bytes == 0) return;
  if (ft.block_rows == 1) {
    for (auto& shard : b.shards)
      for (Piece& pc : shard) pc.scale_pos = pc.shard_pos / ft.block;
    b.shard_scales = b.shard_numel / ft.block;
    return;
  }
  for (auto& shard : b.shards) {
    int64_t next = 0;
    for (Piece& pc : shard) {
      const int64_t cols = params[pc.param].shape[1];
      pc.scale_pos = next;
      next += ft.matrix_scales(pc.len / cols, cols);
    }
    b.shard_scales = std::max(b.shard_scales, next);
  }
}

static void cut_shards(Bucket& b, const std::vector<ParamPlace>& place,
                       const std::vector<ParamSpec>& params, int dp, const FormatTraits& ft) {
  b.shards.assign(dp, {});
  for (int s = 0; s < dp; ++s) {
    int64_t lo = b.offset + s * b.shard_numel, hi = lo + b.shard_numel;
    for (int p : b.params) {
      int64_t po = place[p].offset, pe = po + params[p].numel();
      int64_t a = std::max(lo, po), e = std::min(hi, pe);
      if (a < e) b.shards[s].push_back({p, a - po, e - a, a - lo});
    }
  }
  place_scales(b, ft, params);
}

WeightFormat gather_format(const ParamSpec& p, WeightFormat lowp) {
  const bool two_d = p.shape.size() == 2;
  return two_d && format_traits(lowp).eligible(p.shape[0], p.shape[1]) ? lowp : WeightFormat::Bf16;
}

Layout Layout::build(const std::vector<ParamSpec>& params, WeightFormat lowp, int64_t bucket_size,
                     int dp, const std::vector<int>& order_in) {
  MXDP_CHECK(dp >= 1, "dp must be >= 1, got ", dp);
  MXDP_CHECK(bucket_size >= 1, "bucket_size must be >= 1, got ", bucket_size);
  const int n = int(params.size());
  std::vector<int> order = order_in;
  if (order.empty()) {
    order.resize(n);
    std::iota(order.rbegin(), order.rend(), 0);  // backward order
  }
  {
    std::vector<int> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> iota(n);
    std::iota(iota.begin(), iota.end(), 0);
    MXDP_CHECK(sorted == iota, "layout order must be a permutation of the ", n, " params");
  }
  for (const auto& p : params) {
    MXDP_CHECK(p.numel() > 0, "param '", p.name, "' has no elements");
  }

  Layout L;
  L.dp = dp;
  L.place.assign(n, {});
  // Buffer 0: the low-precision format (when it differs from bf16); last: bf16.
  std::vector<WeightFormat> formats;
  if (lowp != WeightFormat::Bf16) formats.push_back(lowp);
  formats.push_back(WeightFormat::Bf16);
  for (WeightFormat f : formats) {
    GatherBuffer buf;
    buf.format = f;
    int64_t cur = 0;
    Bucket bucket;
    bool open = false;
    const FormatTraits& ft = format_traits(f);
    int64_t unit = kShardAlign;  // of the open bucket
    for (int p : order) {
      WeightFormat pf = gather_format(params[p], lowp);
      if (pf != f) continue;
      if (!open) {
        bucket = Bucket{};
        bucket.offset = cur;
        bucket.first_layer = params[p].layer;
        unit = kShardAlign;
        open = true;
      }
      // Slab formats: the offset inside the bucket is a multiple of the
      // param's slab, and every shard cut falls on a slab boundary.
      const int64_t slab = ft.block_rows > 1 ? ft.slab_elems(params[p].shape[1]) : 1;
      cur = bucket.offset + align_up(cur - bucket.offset, std::lcm(kParamAlign, slab));
      unit = std::lcm(unit, slab);
      L.place[p] = {int(L.buffers.size()), int(buf.buckets.size()), cur};
      bucket.params.push_back(p);
      bucket.first_layer = std::min(bucket.first_layer, params[p].layer);
      cur += params[p].numel();
      if (cur - bucket.offset >= bucket_size) {
        close_bucket(bucket, cur, dp, unit);
        cur = bucket.offset + bucket.numel;
        buf.buckets.push_back(std::move(bucket));
        open = false;
      }
    }
    if (open) {
      close_bucket(bucket, cur, dp, unit);
      cur = bucket.offset + bucket.numel;
      buf.buckets.push_back(std::move(bucket));
    }
    buf.numel = cur;
    if (!buf.buckets.empty()) L.buffers.push_back(std::move(buf));
  }
  // Buffer indices were assigned assuming every format gets a buffer; fix them
  // up if a format ended empty (e.g. a model with no 2-D weights).
  for (int p = 0; p < n; ++p) {
    WeightFormat pf = gather_format(params[p], lowp);
    for (int b = 0; b < int(L.buffers.size()); ++b)
      if (L.buffers[b].format == pf) L.place[p].buffer = b;
  }
  for (auto& buf : L.buffers)
    for (auto& b : buf.buckets) cut_shards(b, L.place, params, dp, format_traits(buf.format));
  return L;
}

std::vector<std::pair<int, int>> Layout::forward_order() const {
  std::vector<std::pair<int, int>> out;
  for (int f = 0; f < int(buffers.size()); ++f)
    for (int b = 0; b < int(buffers[f].buckets.size()); ++b) out.push_back({f, b});
  std::stable_sort(out.begin(), out.end(), [&](auto x, auto y) {
    return buffers[x.first].buckets[x.second].first_layer <
           buffers[y.first].buckets[y.second].first_layer;
  });
  return out;
}

}  // namespace mxdp
