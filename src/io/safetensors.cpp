#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "util/check.h"
#include "formats/codec.h"

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace mxdp {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  uint32_t bits;
  if (e == 0x1F) {
    bits = sign | 0x7F800000u | (m << 13);  // Inf / NaN
  } else if (e != 0) {
    bits = sign | ((e + 112) << 23) | (m << 13);
  } else if (m == 0) {
    bits = sign;
  } else {  // subnormal: m * 2^-24, exact in fp32
    const float v = float(m) * 0x1p-24f;
    bits = sign | std::bit_cast<uint32_t>(v);
  }
  return std::bit_cast<float>(bits);
}

}  // namespace

int64_t SafeTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int safetensors_dtype_size(const std::string& d) {
  if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E5M2" || d == "F8_E4M3") return 1;
  if (d == "I16" || d == "U16" || d == "F16" || d == "BF16") return 2;
  if (d == "I32" || d == "U32" || d == "F32") return 4;
  if (d == "I64" || d == "U64" || d == "F64") return 8;
  return 0;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : what_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MXDP_CHECK(fd >= 0, "cannot open safetensors file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    MXDP_FAIL("safetensors file '", path, "' is not a regular file");
  }
  const size_t size = size_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    MXDP_FAIL("safetensors file '", path, "' is ", size, " bytes, too short for its 8-byte header length");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  MXDP_CHECK(map != MAP_FAILED, "cannot mmap safetensors file '", path, "': ", std::strerror(err));
  map_ = map;
  map_bytes_ = size;
  try {
    parse(static_cast<const uint8_t*>(map_), size);
  } catch (...) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::SafetensorsFile(std::vector<uint8_t> bytes, const std::string& what)
    : what_(what), owned_(std::move(bytes)) {
  parse(owned_.data(), owned_.size());
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

namespace {

// The header's JSON object (bytes 8 .. 8 + n, n the little-endian length in bytes 0-7), checked: n
// within the file and the reference implementation's limit, an object, no tensor named twice.
// n is returned through header_bytes.
nlohmann::json parse_header(const uint8_t* bytes, size_t size, const std::string& w, uint64_t& header_bytes) {
  MXDP_CHECK(size >= 8, "safetensors '", w, "' is ", size, " bytes, too short for its 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(bytes[i]) << (8 * i);
  MXDP_CHECK(n <= size - 8, "safetensors '", w, "': the header length is ", n, " bytes but only ", size - 8,
             " follow it (truncated, or not a safetensors file)");
  MXDP_CHECK(n <= kMaxHeaderBytes, "safetensors '", w, "': the header length ", n, " exceeds ", kMaxHeaderBytes,
             " bytes");
  MXDP_CHECK(n >= 2 && bytes[8] == '{', "safetensors '", w, "': the header does not start with '{'");
  const char* hb = reinterpret_cast<const char*>(bytes + 8);
  // Count the top-level keys while parsing: nlohmann keeps only the last of duplicates.
  size_t keys = 0;
  auto count_keys = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json&) {
    if (ev == nlohmann::json::parse_event_t::key && depth == 1) ++keys;
    return true;
  };
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(hb, hb + n, count_keys);
  } catch (const std::exception& e) {
    MXDP_FAIL("safetensors '", w, "': the header is not valid JSON: ", e.what());
  }
  MXDP_CHECK(h.is_object(), "safetensors '", w, "': the header is not a JSON object");
  MXDP_CHECK(keys == h.size(), "safetensors '", w, "': the header names a tensor twice");
  header_bytes = n;
  return h;
}

// One tensor's entry of the header, checked: a known dtype, a shape of integers >= 0 with not too
// many elements, data_offsets inside the buf-byte buffer spanning exactly the elements' bytes.
SafeTensorInfo tensor_entry(const std::string& name, const nlohmann::json& v, uint64_t buf, const std::string& w) {
  MXDP_CHECK(v.is_object() && v.contains("dtype") && v["dtype"].is_string() && v.contains("shape") &&
                 v["shape"].is_array() && v.contains("data_offsets") && v["data_offsets"].is_array() &&
                 v["data_offsets"].size() == 2,
             "safetensors '", w, "': tensor '", name, "' needs dtype, shape and data_offsets [begin, end]");
  SafeTensorInfo t;
  t.name = name;
  t.dtype = v["dtype"].get<std::string>();
  const int es = safetensors_dtype_size(t.dtype);
  MXDP_CHECK(es > 0, "safetensors '", w, "': tensor '", name, "' has unknown dtype '", t.dtype, "'");
  uint64_t numel = 1;
  for (const auto& d : v["shape"]) {
    MXDP_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "safetensors '", w, "': tensor '", name,
               "' has shape ", v["shape"].dump(), " (dimensions must be integers >= 0)");
    const uint64_t x = d.get<uint64_t>();
    MXDP_CHECK(!__builtin_mul_overflow(numel, x, &numel) && numel <= (uint64_t(1) << 62), "safetensors '", w,
               "': tensor '", name, "' has shape ", v["shape"].dump(), ", too many elements");
    t.shape.push_back(int64_t(x));
  }
  for (const auto& o : v["data_offsets"])
    MXDP_CHECK(o.is_number_integer() && o.get<int64_t>() >= 0, "safetensors '", w, "': tensor '", name,
               "' has data_offsets ", v["data_offsets"].dump());
  t.begin = v["data_offsets"][0].get<uint64_t>();
  t.end = v["data_offsets"][1].get<uint64_t>();
  MXDP_CHECK(t.begin <= t.end && t.end <= buf, "safetensors '", w, "': tensor '", name, "' has data_offsets [",
             t.begin, ", ", t.end, "] outside the ", buf, "-byte buffer");
  uint64_t need = 0;
  MXDP_CHECK(!__builtin_mul_overflow(numel, uint64_t(es), &need) && t.end - t.begin == need, "safetensors '", w,
             "': tensor '", name, "' (", t.dtype, " ", v["shape"].dump(), ") needs ", need,
             " bytes but data_offsets give ", t.end - t.begin);
  return t;
}

}  // namespace

void SafetensorsFile::parse(const uint8_t* bytes, size_t size) {
  const std::string& w = what_;
  uint64_t n = 0;
  const nlohmann::json h = parse_header(bytes, size, w, n);
  buffer_ = bytes + 8 + n;
  const uint64_t buf = size - 8 - n;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const nlohmann::json& v = it.value();
    if (it.key() != "__metadata__") {
      tensors_.push_back(tensor_entry(it.key(), v, buf, w));
      continue;
    }
    MXDP_CHECK(v.is_object(), "safetensors '", w, "': __metadata__ is not an object");
    for (auto m = v.begin(); m != v.end(); ++m) {
      MXDP_CHECK(m.value().is_string(), "safetensors '", w, "': __metadata__ value '", m.key(), "' is not a string");
      metadata_[m.key()] = m.value().get<std::string>();
    }
  }
  // The tensors, in buffer order, must tile the buffer: no overlap, no hole, nothing after them.
  std::stable_sort(tensors_.begin(), tensors_.end(), [](const SafeTensorInfo& a, const SafeTensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  for (const auto& t : tensors_) {
    MXDP_CHECK(t.begin == pos, "safetensors '", w, "': tensor '", t.name, "' starts at byte ", t.begin,
               " of the buffer, but the previous tensor ends at ", pos, t.begin < pos ? " (overlap)" : " (a hole)");
    pos = t.end;
  }
  MXDP_CHECK(pos == buf, "safetensors '", w, "': the tensors end at byte ", pos, " of the buffer but it has ", buf,
             " bytes");
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

const SafeTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<float> SafetensorsFile::read_f32(const SafeTensorInfo& t) const {
  const size_t n = size_t(t.numel());
  std::vector<float> out(n);
  const uint8_t* p = data(t);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), p, n * 4);
  } else if (t.dtype == "BF16" || t.dtype == "F16") {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t u = uint16_t(p[2 * i] | (p[2 * i + 1] << 8));
      out[i] = t.dtype == "BF16" ? codec::bf16_to_f32(u) : f16_to_f32(u);
    }
  } else {
    MXDP_FAIL("safetensors '", what_, "': tensor '", t.name, "' has dtype ", t.dtype, "; F32, BF16 or F16 expected");
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (const auto& t : tensors) {
    const int es = safetensors_dtype_size(t.dtype);
    MXDP_CHECK(es > 0, "write_safetensors: tensor '", t.name, "' has unknown dtype '", t.dtype, "'");
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    MXDP_CHECK(uint64_t(numel) * uint64_t(es) == t.bytes.size(), "write_safetensors: tensor '", t.name, "' has ",
               t.bytes.size(), " bytes for ", numel, " elements of ", t.dtype);
    MXDP_CHECK(!h.contains(t.name), "write_safetensors: tensor '", t.name, "' is given twice");
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {pos, pos + t.bytes.size()}}};
    pos += t.bytes.size();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // the buffer starts 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));

  namespace fs = std::filesystem;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  MXDP_CHECK(f, "cannot create '", tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (size_t i = 0; ok && i < tensors.size(); ++i)
    ok = tensors[i].bytes.empty() ||
         std::fwrite(tensors[i].bytes.data(), 1, tensors[i].bytes.size(), f) == tensors[i].bytes.size();
  ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  const int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    MXDP_FAIL("writing '", tmp, "' failed: ", std::strerror(err ? err : errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    MXDP_FAIL("cannot rename '", tmp, "' to '", path, "': ", std::strerror(e));
  }
}

}  // namespace mxdp
