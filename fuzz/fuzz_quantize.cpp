// libFuzzer harness: what `mxdp dequantize` does with an untrusted quantized
// file (cli/cmd_quantize.cpp: the file's size must match the layout of its
// --rows/--cols/--format, then codes and scales are decoded), and what
// `mxdp quantize` does with arbitrary fp32 bit patterns (NaN, Inf, subnormals).
// The first 4 bytes pick the format and shape; the rest is repeated to exactly
// the layout's size, so every input gets past the size check. UBSan catches
// float-to-int conversions and shifts out of range, ASan any access out of bounds.
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/quant.h"

using namespace mxdp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const int format = data[0] % 5;  // mxfp8 e4m3 rowwise, e5m2 rowwise, e4m3 colwise, e5m2 colwise, nvfp4
  const int64_t rows = 1 + data[1] % 70, cols = 1 + (data[2] | (data[3] << 8)) % 300;
  const uint8_t* in = data + 4;
  const size_t n_in = size - 4;
  auto fill = [&](size_t n) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = in[i % n_in];
    return v;
  };
  const int64_t n = rows * cols;
  std::vector<float> y(static_cast<size_t>(n)), x(static_cast<size_t>(n));
  {
    const std::vector<uint8_t> raw = fill(size_t(n) * 4);
    std::memcpy(x.data(), raw.data(), raw.size());
  }
  if (format == 4) {
    const int64_t cb = nvfp4_code_bytes(rows, cols), sb = nvfp4_scale_bytes(rows, cols);
    const std::vector<uint8_t> file = fill(size_t(cb + sb + 4));
    float s_dec;
    std::memcpy(&s_dec, file.data() + cb + sb, 4);
    nvfp4_dequantize_rowwise(file.data(), file.data() + cb, s_dec, rows, cols, y.data());
    std::vector<uint8_t> codes(static_cast<size_t>(cb)), scales(static_cast<size_t>(sb));
    nvfp4_quantize_rowwise(x.data(), rows, cols, amax(x.data(), n), codes.data(), scales.data());
    return 0;
  }
  const Fp8Kind elem = format % 2 == 0 ? Fp8Kind::E4M3 : Fp8Kind::E5M2;
  const bool colwise = format >= 2;
  const int64_t cb = mxfp8_code_bytes(rows, cols);
  const int64_t sb = colwise ? mxfp8_scale_bytes_colwise(rows, cols) : mxfp8_scale_bytes_rowwise(rows, cols);
  const std::vector<uint8_t> file = fill(size_t(cb + sb));
  if (colwise) mxfp8_dequantize_colwise(file.data(), file.data() + cb, rows, cols, elem, y.data());
  else mxfp8_dequantize_rowwise(file.data(), file.data() + cb, rows, cols, elem, y.data());
  std::vector<uint8_t> codes(static_cast<size_t>(cb)), scales(static_cast<size_t>(sb));
  for (ScaleRounding r : {ScaleRounding::RCeil, ScaleRounding::Floor}) {
    if (colwise) mxfp8_quantize_colwise(x.data(), rows, cols, {elem, r}, codes.data(), scales.data());
    else mxfp8_quantize_rowwise(x.data(), rows, cols, {elem, r}, codes.data(), scales.data());
  }
  return 0;
}
