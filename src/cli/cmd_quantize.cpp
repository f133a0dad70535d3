// `mxdp quantize` / `mxdp dequantize`: block formats on raw files.
//
//   input of quantize   : raw little-endian fp32, rows x cols, row-major
//   output of quantize  : codes, then scales, then (NVFP4 only) the fp32 S_dec;
//                         layouts as in quant.h (columnwise: codes row-major,
//                         scales ceil(rows/32) x cols)
//   dequantize          : the reverse, with the same options
// Outputs are written to a temporary file in the same directory and renamed
// into place, so a failed run never leaves a partial or stale-looking file.
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "util/check.h"
#include "cli/commands.h"
#include "io/fileio.h"
#include "formats/quant.h"

#if defined(MXDP_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "formats/cuda/quant_cuda.h"
#include "util/cuda_check.h"
#endif

namespace mxdp::cli {
namespace {

static_assert(std::endian::native == std::endian::little, "file formats are little-endian");

struct QuantOptions {
  std::string format = "mxfp8";
  std::string rounding = "rceil";
  bool columnwise = false;
  std::string device = "cpu";
  int64_t rows = 0, cols = 0;
  std::string input, output;
  bool rounding_given = false;
};

// Sizes of the quantized file's parts for the options.
struct Layout {
  bool nvfp4;
  Mxfp8Config cfg;
  int64_t code_bytes, scale_bytes, sdec_bytes;
  int64_t total() const { return code_bytes + scale_bytes + sdec_bytes; }
  std::string describe(const QuantOptions& o) const {
    if (nvfp4) return "nvfp4 (E2M1, 1x16 blocks, E4M3 scales)";
    std::string s = cfg.elem == Fp8Kind::E4M3 ? "mxfp8 (E4M3" : "mxfp8 (E5M2";
    s += o.columnwise ? ", 32x1 blocks" : ", 1x32 blocks";
    s += cfg.rounding == ScaleRounding::RCeil ? ", rceil scales)" : ", floor scales)";
    return s;
  }
};

Layout make_layout(const QuantOptions& o) {
  MXDP_CHECK(o.rows > 0 && o.cols > 0, "--rows and --cols must be > 0, got ", o.rows, " x ", o.cols);
  MXDP_CHECK(o.rows <= (int64_t(1) << 40) / o.cols, "matrix too large: ", o.rows, " x ", o.cols);
  Layout l{};
  l.nvfp4 = o.format == "nvfp4";
  if (o.format == "mxfp8") l.cfg.elem = Fp8Kind::E4M3;
  else if (o.format == "mxfp8-e5m2") l.cfg.elem = Fp8Kind::E5M2;
  else if (!l.nvfp4) MXDP_FAIL("unknown --format '", o.format, "' (expected mxfp8, mxfp8-e5m2 or nvfp4)");
  if (o.rounding == "rceil") l.cfg.rounding = ScaleRounding::RCeil;
  else if (o.rounding == "floor") l.cfg.rounding = ScaleRounding::Floor;
  else MXDP_FAIL("unknown --scale-rounding '", o.rounding, "' (expected rceil or floor)");
  if (l.nvfp4) {
    MXDP_CHECK(!o.columnwise, "--columnwise is only supported for mxfp8 formats (NVFP4 blocks are 1x16, row-wise)");
    MXDP_CHECK(!o.rounding_given, "--scale-rounding applies to mxfp8 formats only (NVFP4 scales are E4M3, RNE)");
    l.code_bytes = nvfp4_code_bytes(o.rows, o.cols);
    l.scale_bytes = nvfp4_scale_bytes(o.rows, o.cols);
    l.sdec_bytes = 4;
  } else {
    l.code_bytes = mxfp8_code_bytes(o.rows, o.cols);
    l.scale_bytes = o.columnwise ? mxfp8_scale_bytes_colwise(o.rows, o.cols)
                                 : mxfp8_scale_bytes_rowwise(o.rows, o.cols);
    l.sdec_bytes = 0;
  }
  MXDP_CHECK(o.device == "cpu" || o.device == "cuda", "unknown --device '", o.device, "' (expected cpu or cuda)");
  return l;
}

std::vector<uint8_t> read_exact(const std::string& path, int64_t expected, const char* what) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  MXDP_CHECK(!ec, "cannot read input file '", path, "': ", ec.message());
  MXDP_CHECK(int64_t(size) == expected, "input file '", path, "' has ", size, " bytes, expected ", expected,
             " bytes (", what, ")");
  std::vector<uint8_t> buf(static_cast<size_t>(expected));
  std::ifstream f(path, std::ios::binary);
  MXDP_CHECK(f.good(), "cannot open input file '", path, "': ", std::strerror(errno));
  f.read(reinterpret_cast<char*>(buf.data()), std::streamsize(expected));
  MXDP_CHECK(f.gcount() == std::streamsize(expected), "short read from '", path, "': got ", f.gcount(),
             " of ", expected, " bytes");
  return buf;
}

// Writes to "<path>.tmp.<pid>" and renames into place, every write checked;
// removes the temp on failure (fileio.h).
void write_atomic(const std::string& path, const std::vector<uint8_t>& data) {
  try {
    write_file_atomic(path, data);
  } catch (const Error& e) {
    MXDP_FAIL("cannot write output file '", path, "' (", e.what(), ")");
  }
}

#if defined(MXDP_HAVE_CUDA)
// Owns one device allocation.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { MXDP_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  template <class T> T* as() const { return static_cast<T*>(p); }
};
void require_gpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  MXDP_CHECK(e == cudaSuccess && n > 0, "--device cuda: no usable CUDA device (",
             e == cudaSuccess ? "0 devices" : cudaGetErrorString(e), ")");
}
#endif


// quantized file bytes <- fp32 input
std::vector<uint8_t> quantize_bytes(const QuantOptions& o, const Layout& l, const float* x) {
  std::vector<uint8_t> out(size_t(l.total()));
  uint8_t* codes = out.data();
  uint8_t* scales = out.data() + l.code_bytes;
  const int64_t n = o.rows * o.cols;
  if (o.device == "cpu") {
    if (l.nvfp4) {
      const float am = amax(x, n);
      nvfp4_quantize_rowwise(x, o.rows, o.cols, am, codes, scales);
      const float s_dec = nvfp4_tensor_scale(am).s_dec;
      std::memcpy(scales + l.scale_bytes, &s_dec, 4);
    } else if (o.columnwise) {
      mxfp8_quantize_colwise(x, o.rows, o.cols, l.cfg, codes, scales);
    } else {
      mxfp8_quantize_rowwise(x, o.rows, o.cols, l.cfg, codes, scales);
    }
    return out;
  }
#if defined(MXDP_HAVE_CUDA)
  require_gpu();
  DeviceBuffer dx(size_t(n) * 4), dout(out.size()), dts(sizeof(Nvfp4TensorScale)), dam(4);
  MXDP_CUDA_CHECK(cudaMemcpy(dx.p, x, size_t(n) * 4, cudaMemcpyHostToDevice));
  uint8_t* dcodes = dout.as<uint8_t>();
  uint8_t* dscales = dcodes + l.code_bytes;
  if (l.nvfp4) {
    cuda::amax(dx.as<float>(), n, dam.as<float>(), nullptr);
    cuda::nvfp4_quantize_rowwise_device_amax(dx.as<float>(), o.rows, o.cols, dam.as<float>(), dcodes, dscales, nullptr);
    cuda::nvfp4_tensor_scale(dam.as<float>(), dts.as<Nvfp4TensorScale>(), nullptr);
    MXDP_CUDA_CHECK(cudaMemcpy(dscales + l.scale_bytes, &dts.as<Nvfp4TensorScale>()->s_dec, 4,
                               cudaMemcpyDeviceToDevice));
  } else if (o.columnwise) {
    cuda::mxfp8_quantize_colwise(dx.as<float>(), o.rows, o.cols, l.cfg, dcodes, dscales, nullptr);
  } else {
    cuda::mxfp8_quantize_rowwise(dx.as<float>(), o.rows, o.cols, l.cfg, dcodes, dscales, nullptr);
  }
  MXDP_CUDA_CHECK(cudaMemcpy(out.data(), dout.p, out.size(), cudaMemcpyDeviceToHost));
  return out;
#else
  MXDP_FAIL("--device cuda: this mxdp was built without CUDA");
#endif
}

// fp32 output <- quantized file bytes
std::vector<float> dequantize_bytes(const QuantOptions& o, const Layout& l, const uint8_t* in) {
  const int64_t n = o.rows * o.cols;
  std::vector<float> y(static_cast<size_t>(n));
  const uint8_t* codes = in;
  const uint8_t* scales = in + l.code_bytes;
  float s_dec = 0;
  if (l.nvfp4) std::memcpy(&s_dec, scales + l.scale_bytes, 4);
  if (o.device == "cpu") {
    if (l.nvfp4) nvfp4_dequantize_rowwise(codes, scales, s_dec, o.rows, o.cols, y.data());
    else if (o.columnwise) mxfp8_dequantize_colwise(codes, scales, o.rows, o.cols, l.cfg.elem, y.data());
    else mxfp8_dequantize_rowwise(codes, scales, o.rows, o.cols, l.cfg.elem, y.data());
    return y;
  }
#if defined(MXDP_HAVE_CUDA)
  require_gpu();
  DeviceBuffer din(size_t(l.total())), dy(size_t(n) * 4);
  MXDP_CUDA_CHECK(cudaMemcpy(din.p, in, size_t(l.total()), cudaMemcpyHostToDevice));
  const uint8_t* dcodes = din.as<uint8_t>();
  const uint8_t* dscales = dcodes + l.code_bytes;
  if (l.nvfp4) cuda::nvfp4_dequantize_rowwise(dcodes, dscales, s_dec, o.rows, o.cols, dy.as<float>(), nullptr);
  else if (o.columnwise) cuda::mxfp8_dequantize_colwise(dcodes, dscales, o.rows, o.cols, l.cfg.elem, dy.as<float>(), nullptr);
  else cuda::mxfp8_dequantize_rowwise(dcodes, dscales, o.rows, o.cols, l.cfg.elem, dy.as<float>(), nullptr);
  MXDP_CUDA_CHECK(cudaMemcpy(y.data(), dy.p, size_t(n) * 4, cudaMemcpyDeviceToHost));
  return y;
#else
  MXDP_FAIL("--device cuda: this mxdp was built without CUDA");
#endif
}

int run_quantize(const QuantOptions& o) {
  const Layout l = make_layout(o);
  const int64_t in_bytes = o.rows * o.cols * 4;
  const auto raw = read_exact(o.input, in_bytes, (std::to_string(o.rows) + " x " + std::to_string(o.cols) + " fp32").c_str());
  std::vector<float> x(size_t(o.rows * o.cols));
  std::memcpy(x.data(), raw.data(), size_t(in_bytes));
  const auto out = quantize_bytes(o, l, x.data());
  write_atomic(o.output, out);
  std::printf("quantized %lld x %lld fp32 to %s on %s: %lld bytes in, %lld bytes out (%lld codes + %lld scales%s) -> %s\n",
              (long long)o.rows, (long long)o.cols, l.describe(o).c_str(), o.device.c_str(), (long long)in_bytes,
              (long long)l.total(), (long long)l.code_bytes, (long long)l.scale_bytes,
              l.nvfp4 ? " + 4 S_dec" : "", o.output.c_str());
  return 0;
}

int run_dequantize(const QuantOptions& o) {
  const Layout l = make_layout(o);
  const auto in = read_exact(o.input, l.total(), ("codes + scales of " + l.describe(o)).c_str());
  const auto y = dequantize_bytes(o, l, in.data());
  std::vector<uint8_t> out(y.size() * 4);
  std::memcpy(out.data(), y.data(), out.size());
  write_atomic(o.output, out);
  std::printf("dequantized %lld x %lld %s on %s: %lld bytes in, %lld bytes out (fp32) -> %s\n", (long long)o.rows,
              (long long)o.cols, l.describe(o).c_str(), o.device.c_str(), (long long)l.total(),
              (long long)out.size(), o.output.c_str());
  return 0;
}

void add_options(CLI::App* sub, QuantOptions& o) {
  sub->add_option("--format", o.format, "mxfp8 (E4M3), mxfp8-e5m2 or nvfp4")
      ->check(CLI::IsMember({"mxfp8", "mxfp8-e5m2", "nvfp4"}))
      ->capture_default_str();
  sub->add_option_function<std::string>(
         "--scale-rounding",
         [&o](const std::string& v) {
           o.rounding = v;
           o.rounding_given = true;
         },
         "MXFP8 scale rounding: rceil (default) or floor")
      ->check(CLI::IsMember({"rceil", "floor"}));
  sub->add_flag("--columnwise", o.columnwise, "MXFP8 32x1 blocks down the columns");
  sub->add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  sub->add_option("--rows", o.rows, "rows R")->required();
  sub->add_option("--cols", o.cols, "columns C")->required();
  sub->add_option("--input", o.input, "input file")->required();
  sub->add_option("--output", o.output, "output file")->required();
}

}  // namespace

void add_quantize_commands(CLI::App& app, Runner& run) {
  auto q = std::make_shared<QuantOptions>();
  auto d = std::make_shared<QuantOptions>();
  CLI::App* qs = app.add_subcommand(
      "quantize", "fp32 file -> MXFP8/NVFP4 file (codes, then scales, then S_dec for nvfp4); see docs/formats.md");
  CLI::App* ds = app.add_subcommand("dequantize", "MXFP8/NVFP4 file (as written by quantize) -> fp32 file");
  add_options(qs, *q);
  add_options(ds, *d);
  qs->callback([q, &run] { run = [q] { return run_quantize(*q); }; });
  ds->callback([d, &run] { run = [d] { return run_dequantize(*d); }; });
}

}  // namespace mxdp::cli
