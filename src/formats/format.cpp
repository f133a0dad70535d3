#include "formats/format.h"

#include "formats/fp8_block.h"
#include "formats/quant.h"
#include "util/check.h"

namespace mxdp {

namespace {
// The table. Its order is the enum's (checked below).
constexpr FormatTraits kFormats[] = {
    {WeightFormat::Bf16, "bf16", "bfloat16, 2 bytes an element, no scales", 1, 1, 16, ScaleKind::None, 0,
     false, false, false, true, true},
    // fits_grad_buffer: the payload (1 + 1/32 bytes an element) lands in the
    // grad buffer's idle fp32 storage between the reduce and the next backward.
    {WeightFormat::Mxfp8, "mxfp8", "OCP MXFP8: E4M3 codes, one E8M0 scale per 32 elements", kMxfp8Block, 1, 8,
     ScaleKind::E8M0, 1, false, true, true, true, true},
    {WeightFormat::Nvfp4, "nvfp4",
     "NVFP4: E2M1 codes, one E4M3 scale per 16 elements, one fp32 scale per tensor", kNvfp4Block, 1, 4,
     ScaleKind::E4M3, 1, true, false, false, true, true},
    // FP8 compute on Hopper (docs/fp8.md): the tiles cuBLASLt's BLK128x128_32F
    // GEMMs read. 1 + 4/16384 bytes an element. The engine lays its params out
    // in 128-row slabs (docs/fp8.md, "Layout"). Not in the grad buffer: FP8
    // compute reads the gathered payload as the weight during every forward,
    // and with micro-batches > 1 the grad region holds grads by then. Embedding
    // tables travel in bf16 beside it, as in Megatron-LM's FP8 param gather
    // (docs/fp8.md, "Embeddings in bf16").
    {WeightFormat::Fp8b128, "fp8b128",
     "FP8 E4M3 codes in 128x128 tiles of a 2-D weight, one fp32 scale (amax/448) per tile", kFp8TileElems,
     kFp8Tile, 8, ScaleKind::F32, 4, false, false, false, true, false},
};
constexpr bool table_in_enum_order() {
  for (int i = 0; i < int(std::size(kFormats)); ++i)
    if (int(kFormats[i].id) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kFormats must list the formats in WeightFormat's order");
// all_formats() is the prefix of gathered rows.
constexpr int gathered_rows() {
  int n = 0;
  while (n < int(std::size(kFormats)) && kFormats[n].gathered) ++n;
  for (int i = n; i < int(std::size(kFormats)); ++i)
    if (kFormats[i].gathered) return -1;
  return n;
}
static_assert(gathered_rows() > 0, "the gathered formats must come first in kFormats");
}  // namespace

const FormatTraits& format_traits(WeightFormat f) {
  const int i = int(f);
  MXDP_CHECK(i >= 0 && i < int(std::size(kFormats)), "internal: unknown weight format ", i);
  return kFormats[i];
}

std::span<const FormatTraits> all_formats() { return {kFormats, size_t(gathered_rows())}; }
std::span<const FormatTraits> all_format_rows() { return kFormats; }

const char* to_string(WeightFormat f) { return format_traits(f).name; }

std::string format_names() {
  std::string s;
  for (const FormatTraits& t : all_formats()) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

WeightFormat parse_weight_format(const std::string& s) {
  for (const FormatTraits& t : kFormats)
    if (s == t.name) {
      MXDP_CHECK(t.gathered, "weight_format ", t.name, " is an FP8 compute format the engine does not gather yet; use ",
                 format_names());
      return t.id;
    }
  MXDP_FAIL("weight_format must be one of ", format_names(), "; got '", s, "'");
}

}  // namespace mxdp
