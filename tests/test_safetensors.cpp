// safetensors.h: files written by mxdp read back by the `safetensors` package,
// files written by the package read by mxdp, and every kind of malformed
// header refused with a message naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/check.h"
#include "formats/codec.h"
#include "python_util.h"
#include "io/safetensors.h"

using namespace mxdp;
using namespace mxdp::testing;

namespace {


std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A file from a header text and a buffer of `buf` zero bytes.
std::vector<uint8_t> file_of(const std::string& header, size_t buf, uint64_t len_override = 0) {
  const uint64_t n = len_override ? len_override : header.size();
  std::vector<uint8_t> f(8 + header.size() + buf, 0);
  for (int i = 0; i < 8; ++i) f[size_t(i)] = uint8_t(n >> (8 * i));
  std::copy(header.begin(), header.end(), f.begin() + 8);
  return f;
}

// 'path', for a shell command line.

std::string open_error(const std::vector<uint8_t>& bytes) {
  return error_of([&] { SafetensorsFile f(bytes, "test.safetensors"); });
}

}  // namespace

TEST(Safetensors, WrittenByMxdpReadByThePackage) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy, safetensors");
  std::vector<float> w(6 * 5), b(7);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::ldexp(float(i) - 11.25f, int(i % 7) - 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = -1.0f / float(i + 1);
  std::vector<uint8_t> bf(2 * b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    const uint16_t u = codec::bf16_from_f32(b[i]);
    bf[2 * i] = uint8_t(u), bf[2 * i + 1] = uint8_t(u >> 8);
  }
  write_safetensors(d / "m.safetensors",
                    {{"layer.weight", "F32", {6, 5}, f32_bytes(w)}, {"layer.bias", "BF16", {7}, bf},
                     {"nothing", "F32", {0}, {}}},
                    {{"format", "pt"}});
  const RunResult r = run_python(quote(source_path("tests/py/st_tool.py")).append(" dump ").append(quote(d / "m.safetensors"))
                                     .append(" ").append(quote(d / "dump.json")),
                                 d / "py.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(read_file(d / "dump.json"));
  EXPECT_EQ(j["metadata"]["format"], "pt");
  const auto& t = j["tensors"];
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t["layer.weight"]["dtype"], "F32");
  EXPECT_EQ(t["layer.weight"]["shape"], nlohmann::json({6, 5}));
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(t["layer.weight"]["values"][i].get<double>(), double(w[i])) << i;
  EXPECT_EQ(t["layer.bias"]["dtype"], "BF16");
  for (size_t i = 0; i < b.size(); ++i)
    EXPECT_EQ(t["layer.bias"]["values"][i].get<double>(), double(codec::bf16_to_f32(codec::bf16_from_f32(b[i]))));
  EXPECT_EQ(t["nothing"]["shape"], nlohmann::json({0}));
  // And mxdp reads its own file back.
  SafetensorsFile f(d / "m.safetensors");
  EXPECT_EQ(f.read_f32(*f.find("layer.weight")), w);
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(Safetensors, WrittenByThePackageReadByMxdp) {
  TempDir d;
  MXDP_REQUIRE_PYTHON(d, "numpy, safetensors");
  const RunResult r =
      run_python(quote(source_path("tests/py/st_tool.py")).append(" write ").append(quote(d / "p.safetensors")), d / "py.log");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsFile f(d / "p.safetensors");
  EXPECT_EQ(f.metadata().at("who"), "st_tool");
  ASSERT_EQ(f.tensors().size(), 4u);
  const SafeTensorInfo* w = f.find("weight");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{3, 4}));
  const std::vector<float> wv = f.read_f32(*w);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(wv[size_t(i)], (float(i) - 5.5f) / 3.0f) << i;
  EXPECT_EQ(f.read_f32(*f.find("half")), (std::vector<float>{1.0f, -2.5f, 65504.0f, 1023.0f * 0x1p-24f, 0.0f}))
      << "6.1e-5 is an F16 subnormal: 1023 * 2^-24";
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_TRUE(contains(error_of([&] { f.read_f32(*f.find("ids")); }), "tensor 'ids' has dtype I64"));
  EXPECT_EQ(f.find("absent"), nullptr);
}

TEST(Safetensors, MalformedHeadersAreRefused) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(open_error(file_of(ok, 8)), "");
  EXPECT_TRUE(contains(open_error({1, 2, 3}), "too short")) << open_error({1, 2, 3});
  EXPECT_TRUE(contains(open_error(file_of(ok, 8, 1000)), "header length is 1000"));
  EXPECT_TRUE(contains(open_error(file_of(ok, 8, uint64_t(1) << 62)), "header length"));
  EXPECT_TRUE(contains(open_error(file_of("{\"a\": ", 8)), "not valid JSON"));
  EXPECT_TRUE(contains(open_error(file_of("[1, 2]", 0)), "does not start with '{'"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8)),
                       "unknown dtype 'F33'"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
                       "dimensions must be integers >= 0"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8)),
                       "outside the 8-byte buffer"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
                       "needs 12 bytes but data_offsets give 8"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", 8)),
                       "too many elements"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                              "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
                       "overlap"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)),
                       "(a hole)"));
  EXPECT_TRUE(contains(open_error(file_of(ok, 12)), "the tensors end at byte 8 of the buffer but it has 12"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                              "a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16)),
                       "names a tensor twice"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"a":{"dtype":"F32","shape":[2]}})", 8)), "needs dtype, shape and data_offsets"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"__metadata__":{"k":1}})", 0)), "is not a string"));
  EXPECT_TRUE(contains(open_error(file_of(R"({"__metadata__":[1]})", 0)), "__metadata__ is not an object"));
  EXPECT_TRUE(contains(error_of([] { SafetensorsFile f("/nonexistent/x.safetensors"); }), "cannot open"));
  EXPECT_TRUE(contains(error_of([] { write_safetensors("/nonexistent/dir/x.safetensors", {}); }), "cannot create"));
  EXPECT_TRUE(contains(error_of([] { write_safetensors("/tmp/x.safetensors", {{"a", "F32", {3}, {0, 0, 0, 0}}}); }),
                       "has 4 bytes for 3 elements"));
}
