// `mxdp quantize` / `mxdp dequantize` run as a process on temp files: the bytes
// they write must equal the library's output laid out as documented (codes,
// scales, S_dec), and every bad input must exit non-zero with a message and
// leave no output file behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "formats/quant.h"

namespace {

namespace fs = std::filesystem;
using namespace mxdp;

struct Result {
  int status;
  std::string output;  // stdout + stderr
};
Result run(const std::string& args) {
  const std::string cmd = std::string(MXDP_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

class CliQuantize : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() / ("mxdp_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  template <class T> void write(const std::string& name, const std::vector<T>& v) const {
    std::ofstream(path(name), std::ios::binary).write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::vector<uint8_t> read(const std::string& name) const {
    std::ifstream f(path(name), std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
  }
  static std::vector<float> input(int64_t rows, int64_t cols) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    std::vector<float> x(rows * cols);
    for (auto& v : x) v = std::ldexp(nd(rng), int(rng() % 20) - 10);
    x[3] = NAN;
    x[7] = -INFINITY;
    return x;
  }
  std::string io(int64_t r, int64_t c, const std::string& in, const std::string& out) const {
    return " --rows " + std::to_string(r) + " --cols " + std::to_string(c) + " --input " + path(in) +
           " --output " + path(out);
  }
};

std::vector<uint8_t> bytes_of(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST_F(CliQuantize, Mxfp8RoundTripMatchesLibrary) {
  const int64_t R = 37, C = 70;
  const auto x = input(R, C);
  write("x.bin", x);
  struct Case {
    std::string opts;
    Mxfp8Config cfg;
    bool colwise;
  } cases[] = {{"--format mxfp8", {Fp8Kind::E4M3, ScaleRounding::RCeil}, false},
               {"--format mxfp8-e5m2 --scale-rounding floor", {Fp8Kind::E5M2, ScaleRounding::Floor}, false},
               {"--format mxfp8 --columnwise", {Fp8Kind::E4M3, ScaleRounding::RCeil}, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.opts);
    const auto q = run("quantize " + c.opts + io(R, C, "x.bin", "q.bin"));
    ASSERT_EQ(q.status, 0) << q.output;
    EXPECT_NE(q.output.find("37 x 70"), std::string::npos) << q.output;
    const int64_t ns = c.colwise ? mxfp8_scale_bytes_colwise(R, C) : mxfp8_scale_bytes_rowwise(R, C);
    std::vector<uint8_t> want(R * C + ns);
    if (c.colwise) mxfp8_quantize_colwise(x.data(), R, C, c.cfg, want.data(), want.data() + R * C);
    else mxfp8_quantize_rowwise(x.data(), R, C, c.cfg, want.data(), want.data() + R * C);
    EXPECT_EQ(read("q.bin"), want);
    const auto d = run("dequantize " + c.opts + io(R, C, "q.bin", "y.bin"));
    ASSERT_EQ(d.status, 0) << d.output;
    std::vector<float> y(R * C);
    if (c.colwise) mxfp8_dequantize_colwise(want.data(), want.data() + R * C, R, C, c.cfg.elem, y.data());
    else mxfp8_dequantize_rowwise(want.data(), want.data() + R * C, R, C, c.cfg.elem, y.data());
    EXPECT_EQ(read("y.bin"), bytes_of(y));
  }
}

TEST_F(CliQuantize, Nvfp4RoundTripMatchesLibrary) {
  const int64_t R = 5, C = 33;  // odd cols: each row padded to a whole byte
  const auto x = input(R, C);
  write("x.bin", x);
  const auto q = run("quantize --format nvfp4" + io(R, C, "x.bin", "q.bin"));
  ASSERT_EQ(q.status, 0) << q.output;
  const int64_t nc = nvfp4_code_bytes(R, C), ns = nvfp4_scale_bytes(R, C);
  const float am = amax(x.data(), R * C);
  std::vector<uint8_t> want(nc + ns + 4);
  nvfp4_quantize_rowwise(x.data(), R, C, am, want.data(), want.data() + nc);
  const float s_dec = nvfp4_tensor_scale(am).s_dec;
  std::memcpy(want.data() + nc + ns, &s_dec, 4);
  EXPECT_EQ(read("q.bin"), want);
  const auto d = run("dequantize --format nvfp4" + io(R, C, "q.bin", "y.bin"));
  ASSERT_EQ(d.status, 0) << d.output;
  std::vector<float> y(R * C);
  nvfp4_dequantize_rowwise(want.data(), want.data() + nc, s_dec, R, C, y.data());
  EXPECT_EQ(read("y.bin"), bytes_of(y));
}

TEST_F(CliQuantize, BadInputsFailCleanly) {
  write("x.bin", input(4, 32));
  write("q_old.bin", std::vector<uint8_t>{1, 2, 3});
  struct Bad {
    std::string args, message;
  } bad[] = {
      {"quantize" + io(5, 32, "x.bin", "out.bin"), "expected 640 bytes"},
      {"quantize --format mxfp9" + io(4, 32, "x.bin", "out.bin"), "mxfp9"},
      {"quantize --format nvfp4 --columnwise" + io(4, 32, "x.bin", "out.bin"), "columnwise"},
      {"quantize" + io(0, 32, "x.bin", "out.bin"), "must be > 0"},
      {"quantize" + io(4, -32, "x.bin", "out.bin"), "must be > 0"},
      {"quantize" + io(4, 32, "missing.bin", "out.bin"), "cannot read input file"},
      {"quantize --rows 4 --cols 32 --input " + path("x.bin") + " --output " + path("no/such/dir/out.bin"),
       "cannot write output file"},
      {"dequantize" + io(4, 32, "q_old.bin", "out.bin"), "expected 132 bytes"},
      {"quantize --scale-rounding up" + io(4, 32, "x.bin", "out.bin"), "up"},
      {"quantize --format nvfp4 --scale-rounding floor" + io(4, 32, "x.bin", "out.bin"), "scale-rounding"},
  };
  for (const Bad& b : bad) {
    const auto r = run(b.args);
    EXPECT_NE(r.status, 0) << b.args;
    EXPECT_NE(r.output.find(b.message), std::string::npos) << b.args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(path("out.bin"))) << b.args;
  }
  // --device cuda either works (a GPU is present) or fails with a clear message.
  const auto r = run("quantize --device cuda" + io(4, 32, "x.bin", "out.bin"));
  if (r.status != 0) {
    EXPECT_NE(r.output.find("--device cuda"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(path("out.bin")));
  }
  for (const auto& e : fs::directory_iterator(dir))  // no temp files left behind
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

}  // namespace
