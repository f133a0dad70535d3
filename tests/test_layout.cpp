// Layout invariants (docs/engine.md, "Buffers and layout") over many random model
// shapes, bucket sizes and dp from 1 to 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "util/check.h"
#include "engine/layout.h"
#include "models/gpt2/gpt.h"
#include "models/llama/llama_config.h"

using namespace mxdp;

namespace {

std::vector<ParamSpec> random_model(std::mt19937& rng) {
  std::vector<ParamSpec> ps;
  int n = 1 + rng() % 14, layer = 0;
  for (int i = 0; i < n; ++i) {
    ParamSpec p;
    p.name = std::to_string(i);
    p.name.insert(0, 1, 'p');  // not "p" + ...: GCC 12 warns falsely (-Wrestrict) on that
    layer += rng() % 2;
    p.layer = layer;
    p.embedding = rng() % 4 == 0;
    switch (rng() % 6) {
      case 0: p.shape = {int64_t(1 + rng() % 300)}; p.decay = false; break;           // 1-D
      case 1: p.shape = {int64_t(1 + rng() % 40), int64_t(32 * (1 + rng() % 6))}; break;  // eligible
      case 2: p.shape = {int64_t(1 + rng() % 40), int64_t(1 + rng() % 100)}; break;   // any row length
      case 3: p.shape = {int64_t(1 + rng() % 3), int64_t(1 + rng() % 5), 32}; break;  // 3-D: bf16
      case 4: p.shape = {int64_t(1 + rng() % 400), int64_t(16 * (1 + rng() % 30))}; break;  // partial tiles
      default: p.shape = {int64_t(128 * (1 + rng() % 3)), int64_t(128 * std::vector<int>{1, 2, 3, 6}[rng() % 4])};
        break;  // whole 128x128 tiles (fp8b128-eligible)
    }
    ps.push_back(p);
  }
  return ps;
}

void check_layout(const std::vector<ParamSpec>& ps, const Layout& L, WeightFormat lowp,
                  int64_t bucket_size, int dp, bool backward_order) {
  ASSERT_EQ(L.place.size(), ps.size());
  std::vector<int> seen(ps.size(), 0);
  for (int f = 0; f < int(L.buffers.size()); ++f) {
    const GatherBuffer& gb = L.buffers[f];
    int64_t expect_off = 0;
    for (int b = 0; b < int(gb.buckets.size()); ++b) {
      const Bucket& bk = gb.buckets[b];
      EXPECT_EQ(bk.offset, expect_off) << "buckets are contiguous";
      EXPECT_EQ(bk.numel, bk.shard_numel * dp);
      EXPECT_EQ(bk.shard_numel % 256, 0) << "shards are whole 256-element multiples";
      EXPECT_GT(bk.shard_numel, 0);
      expect_off += bk.numel;
      int64_t content_end = bk.offset, min_layer = 1 << 30;
      int64_t prev_end = bk.offset;
      for (int p : bk.params) {
        ++seen[p];
        const ParamPlace& pl = L.place[p];
        EXPECT_EQ(pl.buffer, f);
        EXPECT_EQ(pl.bucket, b);
        EXPECT_EQ(pl.offset % 64, 0) << "params start at multiples of 64";
        EXPECT_GE(pl.offset, prev_end) << "params do not overlap";
        prev_end = pl.offset + ps[p].numel();
        EXPECT_LE(prev_end, bk.offset + bk.numel);
        content_end = std::max(content_end, prev_end);
        min_layer = std::min<int64_t>(min_layer, ps[p].layer);
        // docs/engine.md's rule, written out: rows of whole 32-element blocks;
        // fp8b128's 128x128 tiles: any rows, cols a multiple of 16, and no
        // embedding table.
        const bool two_d = ps[p].shape.size() == 2;
        const bool takes = two_d && ps[p].shape[1] % (lowp == WeightFormat::Fp8b128 ? 16 : 32) == 0 &&
                           !(lowp == WeightFormat::Fp8b128 && ps[p].embedding);
        const WeightFormat want = takes ? lowp : WeightFormat::Bf16;
        EXPECT_EQ(gb.format, want) << ps[p].name;
      }
      EXPECT_EQ(bk.first_layer, min_layer);
      if (b + 1 < int(gb.buckets.size())) {
        EXPECT_GE(content_end - bk.offset, bucket_size) << "only the last bucket may be short";
      }
      // Pieces cover every param exactly once and sit where the param does.
      std::map<int, int64_t> covered;
      ASSERT_EQ(int(bk.shards.size()), dp);
      for (int s = 0; s < dp; ++s) {
        int64_t last = -1;
        for (const Piece& pc : bk.shards[s]) {
          EXPECT_GT(pc.shard_pos, last);
          last = pc.shard_pos;
          EXPECT_LE(pc.shard_pos + pc.len, bk.shard_numel);
          EXPECT_EQ(bk.offset + s * bk.shard_numel + pc.shard_pos, L.place[pc.param].offset + pc.param_begin);
          EXPECT_EQ(pc.shard_pos % 16, 0) << "pieces start on NVFP4 block boundaries";
          covered[pc.param] += pc.len;
        }
      }
      for (int p : bk.params) EXPECT_EQ(covered[p], ps[p].numel()) << ps[p].name;
      // Payload: 256-byte aligned slices; MXFP8 payload fits in the fp32 grad region.
      const PayloadShape sh = payload_shape(gb.format, bk);
      const FormatTraits& ft = format_traits(gb.format);
      if (ft.block_rows == 1) {
        // Row blocks: scale i of a shard is the block of its elements i * block.
        EXPECT_EQ(sh.scale_bytes, ft.scale_bytes == 0 ? 0 : bk.shard_numel / ft.block * ft.scale_bytes);
        if (ft.scale_bytes > 0) {
          for (const auto& shard : bk.shards)
            for (const Piece& pc : shard) EXPECT_EQ(pc.scale_pos * ft.block, pc.shard_pos);
        }
      }
      EXPECT_EQ(sh.shard_bytes % 256, 0);
      EXPECT_GE(sh.shard_bytes, sh.code_bytes + sh.scale_bytes);
      EXPECT_EQ(sh.code_bytes % 128, 0) << "scales start 128-byte aligned";
      EXPECT_LE(dp * sh.shard_bytes, bk.numel * int64_t(sizeof(float)));
    }
    EXPECT_EQ(gb.numel, expect_off);
    if (backward_order) {
      // within a buffer, later params (in forward order) come first
      std::vector<std::pair<int64_t, int>> offs;
      for (auto& bk : gb.buckets)
        for (int p : bk.params) offs.push_back({L.place[p].offset, p});
      for (size_t i = 1; i < offs.size(); ++i) EXPECT_LT(offs[i].second, offs[i - 1].second);
    }
  }
  for (size_t p = 0; p < ps.size(); ++p) EXPECT_EQ(seen[p], 1) << "param in exactly one bucket";
  auto fo = L.forward_order();
  for (size_t i = 1; i < fo.size(); ++i)
    EXPECT_LE(L.buffers[fo[i - 1].first].buckets[fo[i - 1].second].first_layer,
              L.buffers[fo[i].first].buckets[fo[i].second].first_layer);
}

}  // namespace

TEST(Layout, InvariantsOverRandomModels) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    auto ps = random_model(rng);
    const int dp = 1 + trial % 8;
    const int64_t bucket = std::vector<int64_t>{1, 100, 1000, 5000, 1 << 20}[rng() % 5];
    const WeightFormat lowp = WeightFormat(rng() % 4);
    bool shuffled = rng() % 4 == 0;
    std::vector<int> order;
    if (shuffled) {
      order.resize(ps.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
    }
    Layout L = Layout::build(ps, lowp, bucket, dp, order);
    SCOPED_TRACE("trial " + std::to_string(trial) + " dp " + std::to_string(dp));
    check_layout(ps, L, lowp, bucket, dp, !shuffled);
    if (::testing::Test::HasFailure()) return;
  }
}

// What a bucket of the old rule (docs/fp8.md, "Layout") took: params at
// multiples of their slab from the bucket's start, shards a multiple of 128 *
// lcm(cols) elements. The layout never takes more.
int64_t lcm_rule_numel(const std::vector<ParamSpec>& ps, const Bucket& bk, int dp) {
  int64_t end = 0, unit = 256;
  for (int p : bk.params) {
    const int64_t slab = 128 * ps[p].shape[1];
    end = align_up(end, std::lcm(int64_t(64), slab)) + ps[p].numel();
    unit = std::lcm(unit, slab);
  }
  return dp * std::max(unit, align_up(ceil_div(end, dp), unit));
}

// fp8b128 (docs/fp8.md, "Layout"): no 128x128 tile may straddle two shards:
// every shard cut inside a param is on one of its 128-row slab boundaries, so
// every piece is whole slabs of its param (the param's last slab may be
// short), and its scales are its ceil(rows/128) x ceil(cols/128) tiles',
// piece after piece in its shard; every shard's payload has room for the most
// any shard needs.
void check_slabs(const std::vector<ParamSpec>& ps, const Layout& L) {
  for (const GatherBuffer& gb : L.buffers) {
    if (gb.format != WeightFormat::Fp8b128) continue;
    for (const Bucket& bk : gb.buckets) {
      for (int p : bk.params) {
        const int64_t at = L.place[p].offset, slab = 128 * ps[p].shape[1];
        for (int s = 1; s < L.dp; ++s) {
          const int64_t cut = bk.offset + s * bk.shard_numel;
          if (at < cut && cut < at + ps[p].numel()) {
            EXPECT_EQ((cut - at) % slab, 0) << ps[p].name << " cut " << s;
          }
        }
      }
      EXPECT_LE(bk.numel, lcm_rule_numel(ps, bk, L.dp)) << "no more than the lcm rule's";
      std::map<int, int64_t> tile_rows;  // per param, over its pieces
      int64_t most = 0;
      for (const auto& shard : bk.shards) {
        int64_t next = 0;
        for (const Piece& pc : shard) {
          const int64_t cols = ps[pc.param].shape[1], slab = 128 * cols;
          const bool last = pc.param_begin + pc.len == ps[pc.param].numel();
          EXPECT_EQ(pc.param_begin % slab, 0) << ps[pc.param].name;
          EXPECT_TRUE(pc.len % slab == 0 || (last && pc.len % cols == 0)) << ps[pc.param].name;
          EXPECT_EQ(pc.scale_pos, next) << ps[pc.param].name << ": scales piece after piece";
          const int64_t rows = pc.len / cols;
          next += (rows + 127) / 128 * ((cols + 127) / 128);
          tile_rows[pc.param] += (rows + 127) / 128;
        }
        most = std::max(most, next);
      }
      EXPECT_EQ(bk.shard_scales, most);
      EXPECT_EQ(payload_shape(gb.format, bk).scale_bytes, 4 * most);
      for (int p : bk.params) EXPECT_EQ(tile_rows[p], (ps[p].shape[0] + 127) / 128) << ps[p].name;
    }
  }
}

TEST(Layout, Fp8b128PiecesAreWholeSlabs) {
  std::mt19937 rng(11);
  int moved = 0, below_lcm = 0;  // what the trials exercised
  for (int trial = 0; trial < 1000; ++trial) {
    auto ps = random_model(rng);
    const int dp = 1 + trial % 8;
    const int64_t bucket = std::vector<int64_t>{1, 20000, 100000, 1 << 20}[rng() % 4];
    Layout L = Layout::build(ps, WeightFormat::Fp8b128, bucket, dp);
    SCOPED_TRACE("trial " + std::to_string(trial) + " dp " + std::to_string(dp));
    check_layout(ps, L, WeightFormat::Fp8b128, bucket, dp, true);
    check_slabs(ps, L);
    if (::testing::Test::HasFailure()) return;
    if (L.buffers[0].format != WeightFormat::Fp8b128) continue;
    for (const Bucket& bk : L.buffers[0].buckets) {
      below_lcm += bk.numel < lcm_rule_numel(ps, bk, dp);
      int64_t end = bk.offset;
      for (int p : bk.params) {
        moved += L.place[p].offset > align_up(end, 64);
        end = L.place[p].offset + ps[p].numel();
      }
    }
  }
  EXPECT_GT(moved, 300) << "params moved up to put a cut on a slab boundary";
  EXPECT_GT(below_lcm, 500) << "buckets smaller than the lcm rule's";
}

TEST(Layout, Fp8b128Gpt2BlockWeightsUnpadded) {
  // GPT-2 124M's fc (3072 x 768, slabs of 98304) then mlp.proj (768 x 3072,
  // slabs of 393216), one bucket: at dp 1 to 4 the shards are a quarter to
  // all of the two, each cut on a slab boundary of the weight it cuts, with
  // no padding (as under the lcm rule: 2 * 2359296 / dp is a multiple of
  // 128 * lcm(768, 3072) = 393216).
  const std::vector<ParamSpec> ps = {{"fc", {3072, 768}, 0, true}, {"proj", {768, 3072}, 0, true}};
  for (int dp : {1, 2, 3, 4}) {
    const Layout L = Layout::build(ps, WeightFormat::Fp8b128, 1 << 30, dp, {0, 1});
    ASSERT_EQ(L.buffers.size(), 1u);
    ASSERT_EQ(L.buffers[0].buckets.size(), 1u);
    EXPECT_EQ(L.buffers[0].buckets[0].shard_numel, 2 * 2359296 / dp) << dp;
    EXPECT_EQ(L.place[0].offset, 0);
    EXPECT_EQ(L.place[1].offset, 2359296);
  }
  // A 768-column weight of 128 rows then a 3072-column one at dp 1: nothing
  // is cut, so the second starts right after the first (the lcm rule moved it
  // from 98304 up to 393216).
  const std::vector<ParamSpec> qs = {{"a", {128, 768}, 0, true}, {"b", {128, 3072}, 0, true}};
  const Layout L = Layout::build(qs, WeightFormat::Fp8b128, 1 << 30, 1, {0, 1});
  EXPECT_EQ(L.place[1].offset, 98304);
  EXPECT_EQ(L.buffers[0].numel, 98304 + 393216);
}

TEST(Layout, Fp8b128MovesAParamOnlyWhereACutFalls) {
  // a (100 x 16, 1600 elements) then b (300 x 16, 4800; slabs of 2048) at dp
  // 2. Shards of 3328 and 3584 cut b off its slabs wherever it starts, unless
  // it starts at the cut, and then it does not fit; at 3840 b moves from 1600
  // to 1792, and the cut falls one slab into it. The lcm rule took 2 x 4096.
  const std::vector<ParamSpec> ps = {{"a", {100, 16}, 0, true}, {"b", {300, 16}, 0, true}};
  const Layout L = Layout::build(ps, WeightFormat::Fp8b128, 1 << 30, 2, {0, 1});
  const Bucket& bk = L.buffers[0].buckets[0];
  EXPECT_EQ(bk.shard_numel, 3840);
  EXPECT_EQ(L.place[0].offset, 0);
  EXPECT_EQ(L.place[1].offset, 1792);
  ASSERT_EQ(bk.shards[0].size(), 2u);
  EXPECT_EQ(bk.shards[0][1].len, 2048) << "b's first slab in shard 0";
  ASSERT_EQ(bk.shards[1].size(), 1u);
  EXPECT_EQ(bk.shards[1][0].param_begin, 2048);
}

TEST(Layout, Fp8b128PartialTilesGpt2Xl) {
  // GPT-2 1558M's attention weights by hand: qkv 4800 x 1600 (37.5 slabs of
  // 204800 elements) then attn.proj 1600 x 1600 (12.5 slabs), one bucket, dp
  // 2: 50 slabs, 25 a shard. The cut at 25 slabs is on qkv's slab boundary;
  // proj starts right after qkv's short last slab and no cut falls in it.
  const std::vector<ParamSpec> ps = {{"qkv", {4800, 1600}, 0, true}, {"proj", {1600, 1600}, 0, true}};
  const Layout L = Layout::build(ps, WeightFormat::Fp8b128, 1 << 30, 2, {0, 1});
  ASSERT_EQ(L.buffers.size(), 1u);
  const Bucket& bk = L.buffers[0].buckets[0];
  EXPECT_EQ(L.place[1].offset, 4800 * 1600);
  EXPECT_EQ(bk.shard_numel, 25 * 204800);
  // Shard 0: qkv slabs 0-24 (25 tile rows of 13 scales). Shard 1: qkv slabs
  // 25-37 (12 whole, 1 of 64 rows: 13 tile rows), then proj (13 tile rows).
  ASSERT_EQ(bk.shards[0].size(), 1u);
  ASSERT_EQ(bk.shards[1].size(), 2u);
  EXPECT_EQ(bk.shards[1][0].len, 4800 * 1600 - 25 * 204800);
  EXPECT_EQ(bk.shards[1][1].shard_pos, 4800 * 1600 - 25 * 204800);
  EXPECT_EQ(bk.shards[1][1].scale_pos, 13 * 13);
  EXPECT_EQ(bk.shard_scales, 26 * 13) << "shard 1's 13 + 13 tile rows, more than shard 0's 25";
  EXPECT_EQ(payload_shape(WeightFormat::Fp8b128, bk).scale_bytes, 26 * 13 * 4);
}

// GPT-2's embedding tables, by name (not by the flag the models set).
bool gpt2_table(const ParamSpec& p) { return p.name == "wte" || p.name == "wpe"; }

// The fp8b128 buffer of a GPT-2 config: its elements beyond its weights', over
// the weights', counted from the param shapes (every GPT-2 2-D weight has cols
// a multiple of 16 and travels in fp8b128, but the embedding tables).
double fp8b128_padding(const std::vector<ParamSpec>& ps, int dp, int64_t bucket) {
  int64_t weights = 0;
  for (const ParamSpec& p : ps)
    if (p.shape.size() == 2 && !gpt2_table(p)) weights += p.numel();
  const Layout L = Layout::build(ps, WeightFormat::Fp8b128, bucket, dp);
  EXPECT_EQ(L.buffers[0].format, WeightFormat::Fp8b128);
  return double(L.buffers[0].numel - weights) / weights;
}

TEST(Layout, Fp8b128PaddingGpt2) {
  const auto small = gpt_param_specs(gpt_config("gpt2-124m"));
  const auto xl = gpt_param_specs(gpt_config("gpt2-1558m"));
  const int64_t mb = 1 << 20;  // small buckets: every large weight is a bucket of its own
  struct Case {
    const std::vector<ParamSpec>& ps;
    int dp;
    int64_t bucket;
    double most;  // just above this layout's padding (in the comment: the lcm rule's, where known)
  };
  // The padding of the block weights alone: the embedding tables travel in
  // bf16 (wte's rows were the only padding at 124M dp 2 and 1558M dp 1).
  for (const Case& c : std::vector<Case>{
           {small, 1, mb, 1e-9},        // 0: nothing is cut
           {small, 2, mb, 1e-9},        // 0
           {small, 8, mb, 0.112},       // 0.111: mlp.proj, 6 slabs a bucket, fills 6 of 8 shards either way
           {small, 8, 1 << 24, 0.019},  // 0.0185 (lcm rule: 0.037 with the tables)
           {xl, 1, mb, 1e-9},           // 0: nothing is cut, so no slab alignment
           {xl, 2, mb, 0.0201},         // 0.020 (lcm rule: 0.051 with the tables)
           {xl, 8, mb, 0.174},          // 0.173: the least possible (below)
           {xl, 2, 40'000'000, 1e-9},   // 0 (lcm rule: 0.038 with the tables)
       }) {
    EXPECT_LT(fp8b128_padding(c.ps, c.dp, c.bucket), c.most) << c.ps.size() << " params, dp " << c.dp;
  }
}

TEST(Layout, Fp8b128PaddingAtDp8IsTheLeastPossible) {
  // GPT-2 1558M in buckets of 1 << 20: every weight (>= 1600 x 1600) is a
  // bucket of its own and at dp 8 holds at least two cuts, S apart (with fewer
  // it lies in two shards, and 8 of n / 2 are more still); both on its slab
  // boundaries makes the shard S a multiple of its slab, so no layout of equal
  // shards takes fewer than 8 * ceil(n / (8 * slab)) * slab elements.
  const auto xl = gpt_param_specs(gpt_config("gpt2-1558m"));
  int64_t least = 0;
  for (const ParamSpec& p : xl)
    if (p.shape.size() == 2 && !gpt2_table(p)) {
      const int64_t slab = 128 * p.shape[1];
      least += 8 * ceil_div(p.numel(), 8 * slab) * slab;
    }
  const Layout L = Layout::build(xl, WeightFormat::Fp8b128, 1 << 20, 8);
  EXPECT_EQ(L.buffers[0].numel, least);
}

// The models mark their embedding tables: under fp8b128 the tables travel in
// bf16 and every other 2-D weight in fp8b128 (the FP8 GEMMs read those, never
// a table); under mxfp8 and nvfp4 the tables travel in the chosen format too.
// Names and shapes here are the models' published ones, not their flags.
TEST(Layout, EmbeddingTablesTravelInBf16UnderFp8b128) {
  const auto gpt = gpt_param_specs(gpt_config("gpt2-124m"));
  LlamaConfig untied = llama_config("llama-tiny");
  untied.tie_embeddings = false;
  for (const auto& [ps, tables] : std::vector<std::pair<std::vector<ParamSpec>, std::set<std::string>>>{
           {gpt, {"wte", "wpe"}},
           {llama_param_specs(llama_config("llama-tiny")), {"embed"}},
           {llama_param_specs(untied), {"embed"}}}) {  // its lm_head is a linear layer: fp8b128
    for (WeightFormat lowp : {WeightFormat::Fp8b128, WeightFormat::Mxfp8, WeightFormat::Nvfp4}) {
      const Layout L = Layout::build(ps, lowp, DpOptions::default_bucket_size(2), 2);
      int n_tables = 0;
      for (size_t p = 0; p < ps.size(); ++p) {
        const bool table = tables.count(ps[p].name) > 0;
        n_tables += table;
        const WeightFormat want = ps[p].shape.size() != 2                    ? WeightFormat::Bf16
                                  : table && lowp == WeightFormat::Fp8b128 ? WeightFormat::Bf16
                                                                           : lowp;
        EXPECT_EQ(L.buffers[L.place[p].buffer].format, want) << ps[p].name << " under " << to_string(lowp);
      }
      EXPECT_EQ(n_tables, int(tables.size()));
    }
  }
}

TEST(Layout, RejectsBadInput) {
  std::vector<ParamSpec> ps = {{"a", {4, 32}, 0, true}};
  EXPECT_THROW(Layout::build(ps, WeightFormat::Mxfp8, 0, 1), Error);
  EXPECT_THROW(Layout::build(ps, WeightFormat::Mxfp8, 10, 0), Error);
  EXPECT_THROW(Layout::build(ps, WeightFormat::Mxfp8, 10, 1, {1}), Error);
  std::vector<ParamSpec> empty_param = {{"z", {0, 32}, 0, true}};
  EXPECT_THROW(Layout::build(empty_param, WeightFormat::Mxfp8, 10, 1), Error);
}

TEST(Layout, PayloadSizes) {
  // independent arithmetic: bf16 2 B/elem; mxfp8 1 + 1/32; nvfp4 1/2 + 1/16
  EXPECT_EQ(payload_shape(WeightFormat::Bf16, 256).shard_bytes, 512);
  EXPECT_EQ(payload_shape(WeightFormat::Mxfp8, 256).code_bytes, 256);
  EXPECT_EQ(payload_shape(WeightFormat::Mxfp8, 256).scale_bytes, 8);
  EXPECT_EQ(payload_shape(WeightFormat::Mxfp8, 256).shard_bytes, 512);
  EXPECT_EQ(payload_shape(WeightFormat::Mxfp8, 8192).shard_bytes, 8192 + 256);
  EXPECT_EQ(payload_shape(WeightFormat::Nvfp4, 8192).code_bytes, 4096);
  EXPECT_EQ(payload_shape(WeightFormat::Nvfp4, 8192).scale_bytes, 512);
  EXPECT_EQ(payload_shape(WeightFormat::Nvfp4, 8192).shard_bytes, 4608);
}
