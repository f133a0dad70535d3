#include "checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "check.h"

namespace mxdp {

namespace {
constexpr char kMagic[8] = {'M', 'X', 'D', 'P', 'C', 'K', 'P', 'T'};

template <class T>
void put(std::vector<uint8_t>& out, const T& x) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&x);
  out.insert(out.end(), p, p + sizeof(T));
}

struct Reader {
  const std::vector<uint8_t>& b;
  size_t pos = 0;
  const std::string& what;
  void need(size_t n, const char* field) {
    MXDP_CHECK(pos + n <= b.size(), what, ": truncated checkpoint: reading ", field, " needs ", n,
               " bytes at offset ", pos, " but the file has ", b.size());
  }
  template <class T>
  T get(const char* field) {
    need(sizeof(T), field);
    T x;
    std::memcpy(&x, b.data() + pos, sizeof(T));
    pos += sizeof(T);
    return x;
  }
};
}  // namespace

std::vector<uint8_t> serialize_checkpoint(const CheckpointData& c) {
  nlohmann::json meta;
  meta["version"] = c.version;
  meta["iteration"] = c.iteration;
  meta["extra"] = c.extra;
  meta["params"] = nlohmann::json::array();
  size_t tensor_bytes = 0;
  for (const auto& p : c.params) {
    int64_t n = 1;
    for (auto d : p.shape) n *= d;
    MXDP_CHECK(int64_t(p.master.size()) == n && int64_t(p.m.size()) == n && int64_t(p.v.size()) == n,
               "param '", p.name, "': state sizes do not match its shape");
    meta["params"].push_back({{"name", p.name}, {"shape", p.shape}});
    tensor_bytes += 3 * n * sizeof(float);
  }
  std::string js = meta.dump();
  std::vector<uint8_t> out;
  out.reserve(32 + js.size() + tensor_bytes + 8);
  out.insert(out.end(), kMagic, kMagic + 8);
  put<uint32_t>(out, kCheckpointVersion);
  put<uint32_t>(out, 0);
  put<uint64_t>(out, js.size());
  out.insert(out.end(), js.begin(), js.end());
  for (const auto& p : c.params)
    for (const auto* t : {&p.master, &p.m, &p.v}) {
      const uint8_t* d = reinterpret_cast<const uint8_t*>(t->data());
      out.insert(out.end(), d, d + t->size() * sizeof(float));
    }
  put<uint64_t>(out, fnv1a64(out.data(), out.size()));
  return out;
}

CheckpointData deserialize_checkpoint(const std::vector<uint8_t>& b, const std::string& what) {
  MXDP_CHECK(b.size() >= 32, what, ": not an mxdp checkpoint (", b.size(), " bytes, expected at least 32)");
  MXDP_CHECK(std::memcmp(b.data(), kMagic, 8) == 0, what,
             ": not an mxdp checkpoint (magic bytes differ from MXDPCKPT)");
  uint64_t stored;
  std::memcpy(&stored, b.data() + b.size() - 8, 8);
  uint64_t actual = fnv1a64(b.data(), b.size() - 8);
  Reader r{b, 8, what};
  uint32_t ver = r.get<uint32_t>("format version");
  MXDP_CHECK(ver == kCheckpointVersion, what, ": checkpoint format version ", ver,
             ", this mxdp reads version ", kCheckpointVersion);
  r.get<uint32_t>("reserved");
  uint64_t meta_len = r.get<uint64_t>("metadata length");
  r.need(meta_len, "metadata");
  MXDP_CHECK(stored == actual, what, ": checksum mismatch (stored ", stored, ", computed ", actual,
             "): the file is corrupt or truncated");
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(b.begin() + r.pos, b.begin() + r.pos + meta_len);
  } catch (const std::exception& e) {
    MXDP_FAIL(what, ": checkpoint metadata is not valid JSON: ", e.what());
  }
  r.pos += meta_len;
  CheckpointData c;
  c.version = meta.at("version").get<int64_t>();
  c.iteration = meta.at("iteration").get<int64_t>();
  c.extra = meta.value("extra", nlohmann::json::object());
  for (const auto& pj : meta.at("params")) {
    ParamState p;
    p.name = pj.at("name").get<std::string>();
    p.shape = pj.at("shape").get<std::vector<int64_t>>();
    int64_t n = 1;
    for (auto d : p.shape) n *= d;
    for (auto* t : {&p.master, &p.m, &p.v}) {
      r.need(n * sizeof(float), "tensor data");
      t->resize(n);
      std::memcpy(t->data(), b.data() + r.pos, n * sizeof(float));
      r.pos += n * sizeof(float);
    }
    c.params.push_back(std::move(p));
  }
  MXDP_CHECK(r.pos + 8 == b.size(), what, ": ", b.size() - 8 - r.pos,
             " unexpected bytes after the tensors");
  return c;
}

void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  MXDP_CHECK(!ec, "cannot create directory '", dir.string(), "': ", ec.message());
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  MXDP_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      MXDP_FAIL("writing '", tmp, "' failed after ", done, " of ", bytes.size(), " bytes: ",
                std::strerror(e));
    }
    done += size_t(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    MXDP_FAIL("flushing '", tmp, "' failed: ", std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    MXDP_FAIL("renaming '", tmp, "' to '", path, "' failed: ", std::strerror(e));
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::vector<uint8_t> read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  MXDP_CHECK(f, "cannot open '", path, "': ", std::strerror(errno));
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  bool err = std::ferror(f);
  std::fclose(f);
  MXDP_CHECK(!err, "reading '", path, "' failed");
  return out;
}

}  // namespace mxdp
