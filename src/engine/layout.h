// Layout: where every parameter, gradient and quantized payload lives.
//
// Params are grouped by gather format into one flat buffer per format (2-D
// weights the format's traits call eligible use the low-precision format,
// everything else BF16), laid out in backward order (reverse of forward order).
// Invariants (checked by tests over many random shapes):
//   - every param starts at an element offset that is a multiple of 64; in a
//     slab format (fp8b128), a shard cut that falls inside a param falls on one
//     of its 128-row slab boundaries (a multiple of 128 * cols from its start;
//     its last slab may be shorter: rows need not be a multiple of 128), so
//     every piece is whole slabs. Slab boundaries matter only where a cut
//     falls: the shard is the smallest multiple of 256 for which each param,
//     at the next multiple of 64 and moved up (less than a slab) where a cut
//     falls inside it, has every cut inside it on a slab boundary and all fit
//     (docs/fp8.md, "Layout");
//   - a param lives in exactly one bucket; a bucket closes once its params,
//     packed at multiples of 64, hold at least bucket_size elements;
//   - every bucket's size is dp * shard, shard a multiple of 256 elements, so
//     shards hold whole MXFP8/NVFP4 blocks and every rank's slice of a gather
//     payload is 256-byte aligned;
//   - rank r owns shard r of every bucket; shards cut through params, and each
//     shard's Pieces say which param sub-range sits where.
// Gather payload of one shard = element codes, then scales, padded to 256 bytes.
// A row-block format's scales follow its codes (block scale i of the shard for
// elements [i * block, (i + 1) * block)); a slab format's are each piece's tile
// scales, piece after piece (a piece of a 1600-column param holds 12.5 tiles'
// elements but 13 scales, so a scale's place is not its elements' offset / 16384).
#pragma once

#include <cstdint>
#include <vector>

#include "models/model.h"
#include "engine/options.h"

namespace mxdp {

inline constexpr int64_t kParamAlign = 64;    // elements
inline constexpr int64_t kShardAlign = 256;   // elements
inline constexpr int64_t kPayloadAlign = 256; // bytes

inline int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// A param's sub-range inside one shard.
struct Piece {
  int param = 0;
  int64_t param_begin = 0;  // first element of the param in this piece
  int64_t len = 0;
  int64_t shard_pos = 0;    // element offset of the piece inside its shard
  int64_t scale_pos = 0;    // index of its first block scale among its shard's scales
};

struct Bucket {
  int64_t offset = 0;        // first element in the buffer
  int64_t numel = 0;         // dp * shard_numel
  int64_t shard_numel = 0;   // multiple of 256
  int64_t shard_scales = 0;  // block scales in each shard's payload: the most any shard's pieces need
  int first_layer = 0;       // smallest `layer` of its params: when forward first needs it
  std::vector<int> params;   // in buffer order
  std::vector<std::vector<Piece>> shards;  // shards[s]: pieces of shard s, by position
};

struct PayloadShape {
  int64_t code_bytes = 0;    // element codes of one shard
  int64_t scale_bytes = 0;   // scales of one shard (right after the codes)
  int64_t shard_bytes = 0;   // code + scale bytes, padded to kPayloadAlign
  int64_t one_scale = 0;     // bytes of one block scale
  // Byte offset of piece pc's first scale inside its shard's slot.
  int64_t scales_at(const Piece& pc) const { return code_bytes + pc.scale_pos * one_scale; }
};
// One shard of n elements and `scales` block scales.
PayloadShape payload_shape(WeightFormat f, int64_t n, int64_t scales);
// A flat range of n elements, n / block scales (whole blocks: a row-block
// format's shard; a slab format's places its scales by piece, so ask its bucket).
PayloadShape payload_shape(WeightFormat f, int64_t n);
// One shard of bucket b (every shard's is the same size).
inline PayloadShape payload_shape(WeightFormat f, const Bucket& b) {
  return payload_shape(f, b.shard_numel, b.shard_scales);
}

struct GatherBuffer {
  WeightFormat format = WeightFormat::Bf16;
  int64_t numel = 0;
  std::vector<Bucket> buckets;
};

struct ParamPlace {
  int buffer = -1;
  int bucket = -1;
  int64_t offset = 0;  // element offset in the buffer
};

// The format param p travels in when the low-precision format is `lowp`:
// lowp for a 2-D weight format_traits(lowp).eligible() takes, else BF16; an
// embedding table (ParamSpec::embedding) travels in BF16 under a format that
// does not take embeddings (FormatTraits::takes_embeddings: fp8b128, whose
// FP8 GEMMs never read one; docs/fp8.md, "Embeddings in bf16").
WeightFormat gather_format(const ParamSpec& p, WeightFormat lowp);
// The format embedding tables travel in under `lowp` (where their shape is
// eligible): lowp, or BF16 for a format that does not take embeddings.
// Checkpoints record it as "embedding_format" (train/trained_weights.h).
WeightFormat embedding_format(WeightFormat lowp);

struct Layout {
  int dp = 1;
  std::vector<GatherBuffer> buffers;
  std::vector<ParamPlace> place;  // per param

  // order: the params in buffer order (empty = backward order). Must be a
  // permutation of 0..params.size()-1.
  static Layout build(const std::vector<ParamSpec>& params, WeightFormat lowp_format,
                      int64_t bucket_size, int dp, const std::vector<int>& order = {});
  // Every bucket of every buffer, as (buffer, bucket) pairs, in the order the
  // forward pass first needs them (by first_layer, then buffer, then bucket).
  std::vector<std::pair<int, int>> forward_order() const;
};

}  // namespace mxdp
