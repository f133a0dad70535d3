#include "formats/format.h"

#include "formats/quant.h"
#include "util/check.h"

namespace mxdp {

namespace {
// The table. Its order is the enum's (checked below).
constexpr FormatTraits kFormats[] = {
    {WeightFormat::Bf16, "bf16", "bfloat16, 2 bytes an element, no scales", 1, 16, ScaleKind::None, 0,
     false, false, false},
    // fits_grad_buffer: the payload (1 + 1/32 bytes an element) lands in the
    // grad buffer's idle fp32 storage between the reduce and the next backward.
    {WeightFormat::Mxfp8, "mxfp8", "OCP MXFP8: E4M3 codes, one E8M0 scale per 32 elements", kMxfp8Block, 8,
     ScaleKind::E8M0, 1, false, true, true},
    {WeightFormat::Nvfp4, "nvfp4",
     "NVFP4: E2M1 codes, one E4M3 scale per 16 elements, one fp32 scale per tensor", kNvfp4Block, 4,
     ScaleKind::E4M3, 1, true, false, false},
};
constexpr bool table_in_enum_order() {
  for (int i = 0; i < int(std::size(kFormats)); ++i)
    if (int(kFormats[i].id) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kFormats must list the formats in WeightFormat's order");
}  // namespace

const FormatTraits& format_traits(WeightFormat f) {
  const int i = int(f);
  MXDP_CHECK(i >= 0 && i < int(std::size(kFormats)), "internal: unknown weight format ", i);
  return kFormats[i];
}

std::span<const FormatTraits> all_formats() { return kFormats; }

const char* to_string(WeightFormat f) { return format_traits(f).name; }

std::string format_names() {
  std::string s;
  for (const FormatTraits& t : kFormats) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

WeightFormat parse_weight_format(const std::string& s) {
  for (const FormatTraits& t : kFormats)
    if (s == t.name) return t.id;
  MXDP_FAIL("weight_format must be one of ", format_names(), "; got '", s, "'");
}

}  // namespace mxdp
