// The weight formats, one row each: everything the layers above the codecs
// (layout, engine, engine ops, trained weights, CLI) need to know about how a
// parameter travels in the all-gather. A layer asks this table; it does not
// switch on WeightFormat. Adding a format is its codec (codec.h, quant.h), its
// kernels (cuda/), and one row in format.cpp (docs/architecture.md, "How to
// add").
//
// A shard of n elements travels as a payload: n element codes (code_bits each,
// packed little end first), then n / block scales of scale_bytes each, padded
// to 256 bytes (engine/layout.h). A format whose blocks span block_rows > 1 rows
// (fp8b128: 128x128 tiles) needs every piece of a param in a shard to be whole
// block_rows-row slabs of that param (its last slab may be shorter); its scales
// are then, piece after piece, each piece's ceil(rows/128) x ceil(cols/128) tile
// scales row-major (docs/fp8.md, "Layout"). A format whose `tensor_amax` is set also
// needs the amax of the whole parameter: the engine stages it in two passes
// (amax of every piece of the param, all-reduced, then the quantize), and the
// unpack reads that amax beside the codes and scales.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace mxdp {

// How parameters travel in the all-gather (and what the model computes with:
// the dequantized values of that format).
// Formats the engine does not gather (none now) sit after those it does
// (all_formats() is the prefix of gathered ones).
enum class WeightFormat : uint8_t { Bf16, Mxfp8, Nvfp4, Fp8b128 };

// What a block's scale is.
enum class ScaleKind : uint8_t {
  None,  // no scales: each code is the value (bf16)
  E8M0,  // a power of two, one byte (OCP MX)
  E4M3,  // an FP8 E4M3 value times the tensor scale (NVFP4)
  F32,   // an fp32 multiplier (fp8b128: block amax / 448)
};

struct FormatTraits {
  WeightFormat id;
  const char* name;            // as the CLI, the run header and checkpoints spell it
  const char* description;     // one line for --help and docs
  int block;                   // elements per scale (1 where there are no scales)
  int block_rows;              // rows one block spans: 1 (row blocks) or 128 (fp8b128's 128x128 tiles)
  int code_bits;               // bits per element code: 16, 8 or 4
  ScaleKind scale_kind;
  int scale_bytes;             // bytes per block scale (0: none)
  bool tensor_amax;            // needs the whole param's amax (two-pass stage, amax at unpack)
  bool rounding_applies;       // the scale rounding option (rceil / floor) changes its bits
  bool fits_grad_buffer;       // its gather payload may live in the idle fp32 grad buffer
  bool gathered;               // the engine gathers it (false: codec and kernels only, not yet a --weight-format)
  bool takes_embeddings;       // embedding tables (ParamSpec::embedding) travel in it (false: in bf16)

  // Bytes of one shard's codes and scales, n a multiple of `block` (and even
  // for 4-bit codes).
  int64_t code_bytes(int64_t n) const { return n * code_bits / 8; }
  int64_t scales_bytes(int64_t n) const { return scale_bytes == 0 ? 0 : n / block * scale_bytes; }
  bool low_precision() const { return id != WeightFormat::Bf16; }
  // Block scales of a rows x cols matrix (tiles at its right and bottom edges
  // may be partial and have a scale each).
  int64_t matrix_scales(int64_t rows, int64_t cols) const {
    if (scale_bytes == 0) return 0;
    const int64_t tile_cols = block / block_rows;
    return (rows + block_rows - 1) / block_rows * ((cols + tile_cols - 1) / tile_cols);
  }
  // Whether a rows x cols weight can travel in this format (the engine's one
  // rule, engine/layout.h's gather_format). Row-block formats take any 2-D
  // weight whose rows hold whole 32-element blocks; 128x128 tiles take any rows
  // and cols a multiple of 16, what the FP8 GEMMs need of N and K (edge tiles
  // are partial; others travel in bf16).
  bool eligible(int64_t rows, int64_t cols) const {
    if (block_rows == 1) return cols % 32 == 0;
    return rows > 0 && cols > 0 && cols % 16 == 0;
  }
  // Elements of one block_rows-row slab of a param with `cols` columns: shards
  // and buckets may cut a param only at multiples of this (1 for row blocks,
  // whose cuts are already at multiples of 256 elements).
  int64_t slab_elems(int64_t cols) const { return block_rows == 1 ? 1 : block_rows * cols; }
};

const FormatTraits& format_traits(WeightFormat f);
// Every format the engine gathers, in enum order.
std::span<const FormatTraits> all_formats();
// Every row of the table, the not-yet-gathered ones included.
std::span<const FormatTraits> all_format_rows();
const char* to_string(WeightFormat f);
// The gathered format named `s`; an unknown name is an error listing the known
// ones, a format the engine does not gather yet an error saying so.
WeightFormat parse_weight_format(const std::string& s);
// "bf16, mxfp8, nvfp4, fp8b128": the names, for help texts and errors.
std::string format_names();

}  // namespace mxdp
