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

// Where a param of n elements goes, at or after `at` (offsets from its
// bucket's start), when shards are `shard` elements: the next multiple of
// kParamAlign, moved up, if a shard cut falls inside it, until that cut is on
// one of its slab boundaries (less than a slab further; slab 1 outside slab
// formats, which never move). -1 if a further cut inside it is not on one,
// which only a shard that is not a multiple of the slab allows.
static int64_t place_param(int64_t at, int64_t n, int64_t slab, int64_t shard) {
  int64_t x = align_up(at, kParamAlign);
  const int64_t cut = (x / shard + 1) * shard;  // the first after x
  if (cut < x + n) x += (cut - x) % slab;
  for (int64_t c = (x / shard + 1) * shard; c < x + n; c += shard)
    if ((c - x) % slab != 0) return -1;
  return x;
}

// The offsets of a bucket's params (as place_param puts them) when shards are
// `shard` elements, or empty if they do not fit in dp shards that cut no slab.
static std::vector<int64_t> place_params(const std::vector<int64_t>& numel, const std::vector<int64_t>& slab,
                                         int64_t shard, int dp) {
  std::vector<int64_t> at;
  int64_t end = 0;
  for (size_t i = 0; i < numel.size(); ++i) {
    const int64_t x = place_param(end, numel[i], slab[i], shard);
    if (x < 0 || x + numel[i] > dp * shard) return {};
    at.push_back(x);
    end = x + numel[i];
  }
  return at;
}

// Bucket membership: params of format f in `order`; a bucket closes once its
// params, packed at kParamAlign, hold at least bucket_size elements (a slab
// format's padding comes after, in lay_out, and only adds to that).
static std::vector<std::vector<int>> group_buckets(const std::vector<ParamSpec>& params, const std::vector<int>& order,
                                                   WeightFormat f, WeightFormat lowp, int64_t bucket_size) {
  std::vector<std::vector<int>> out;
  int64_t fill = 0;  // of the open bucket, out.back()
  for (int p : order) {
    if (gather_format(params[p], lowp) != f) continue;
    if (fill == 0) out.emplace_back();
    out.back().push_back(p);
    fill = align_up(fill, kParamAlign) + params[p].numel();
    if (fill >= bucket_size) fill = 0;
  }
  return out;
}

// Lays out a bucket of `members` starting at buffer element `offset`: the
// smallest shard (a multiple of kShardAlign) at which place_params fits them,
// and their places. The search ends: from a shard of the params packed at
// kParamAlign on, no cut falls inside one. It stops no later than the old
// rule's shard (a multiple of 128 * lcm(cols), docs/fp8.md, "Layout"): there
// every cut is a multiple of every slab, so a param moves at most to the next
// multiple of its slab from the bucket's start, where that rule put it, and
// the params fit as that rule's did. Outside slab formats the first one fits.
static Bucket lay_out(const std::vector<ParamSpec>& params, std::vector<int> members, int64_t offset, int dp,
                      const FormatTraits& ft, int buffer, int bucket, std::vector<ParamPlace>& place) {
  std::vector<int64_t> numel, slab;
  int64_t packed = 0;
  for (int p : members) {
    numel.push_back(params[p].numel());
    slab.push_back(ft.block_rows > 1 ? ft.slab_elems(params[p].shape[1]) : 1);
    packed = align_up(packed, kParamAlign) + numel.back();
  }
  Bucket b;
  b.offset = offset;
  b.shard_numel = std::max(kShardAlign, align_up(ceil_div(packed, dp), kShardAlign));
  std::vector<int64_t> at;
  while ((at = place_params(numel, slab, b.shard_numel, dp)).empty()) b.shard_numel += kShardAlign;
  b.numel = b.shard_numel * dp;
  b.first_layer = params[members[0]].layer;
  for (size_t i = 0; i < members.size(); ++i) {
    place[members[i]] = {buffer, bucket, offset + at[i]};
    b.first_layer = std::min(b.first_layer, params[members[i]].layer);
  }
  b.params = std::move(members);
  return b;
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

WeightFormat embedding_format(WeightFormat lowp) {
  return format_traits(lowp).takes_embeddings ? lowp : WeightFormat::Bf16;
}

WeightFormat gather_format(const ParamSpec& p, WeightFormat lowp) {
  const WeightFormat f = p.embedding ? embedding_format(lowp) : lowp;
  return p.shape.size() == 2 && format_traits(f).eligible(p.shape[0], p.shape[1]) ? f : WeightFormat::Bf16;
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
    // A format with no params gets no buffer, so this index is the buffer's.
    const int index = int(L.buffers.size());
    for (std::vector<int>& members : group_buckets(params, order, f, lowp, bucket_size)) {
      const int bucket = int(buf.buckets.size());
      buf.buckets.push_back(
          lay_out(params, std::move(members), buf.numel, dp, format_traits(f), index, bucket, L.place));
      buf.numel += buf.buckets.back().numel;
    }
    if (!buf.buckets.empty()) L.buffers.push_back(std::move(buf));
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
