// Checkpoint formats, readers and writers; the layout is in checkpoint.h. One
// file (over 500 lines): the step directory's manifest and rank files and the
// older single-file format share one container reader, which trusts no byte.
#include "io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "util/check.h"

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");

namespace mxdp {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr char kMagic[8] = {'M', 'X', 'D', 'P', 'C', 'K', 'P', 'T'};
constexpr char kRankMagic[8] = {'M', 'X', 'D', 'P', 'S', 'H', 'R', 'D'};
constexpr const char* kFormatName = "mxdp step directory";
constexpr size_t kContainerHead = 24;   // magic, version, reserved, meta_len
constexpr size_t kRankFixed = 40;       // magic, version, rank, n_pieces, chunk_bytes, data_bytes
constexpr int64_t kMaxNumel = int64_t(1) << 48;
constexpr int kMaxJsonDepth = 64;
constexpr uint64_t kMaxChunkBytes = uint64_t(1) << 30;

template <class T>
T get(std::span<const uint8_t> b, size_t at) {  // caller checked the bounds
  T x;
  std::memcpy(&x, b.data() + at, sizeof(T));
  return x;
}

// ---- JSON read from a file: types and ranges checked, errors name the file ----

const json& field(const json& obj, const char* key, const std::string& what) {
  MXDP_CHECK(obj.is_object(), what, ": expected a JSON object holding \"", key, "\", got a ", obj.type_name());
  const auto it = obj.find(key);
  MXDP_CHECK(it != obj.end(), what, ": no \"", key, "\" in the metadata");
  return *it;
}
int64_t int_field(const json& obj, const char* key, int64_t lo, int64_t hi, const std::string& what) {
  const json& v = field(obj, key, what);
  MXDP_CHECK(v.is_number_integer(), what, ": \"", key, "\" must be an integer, got a ", v.type_name());
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    MXDP_CHECK(u <= uint64_t(hi), what, ": \"", key, "\" is ", u, ", outside [", lo, ", ", hi, "]");
    return int64_t(u);
  }
  const int64_t x = v.get<int64_t>();
  MXDP_CHECK(x >= lo && x <= hi, what, ": \"", key, "\" is ", x, ", outside [", lo, ", ", hi, "]");
  return x;
}
uint64_t u64_field(const json& obj, const char* key, const std::string& what) {
  const json& v = field(obj, key, what);
  MXDP_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), what, ": \"", key,
             "\" must be a non-negative integer, got ", v.is_number() ? v.dump() : std::string("a ") + v.type_name());
  return v.get<uint64_t>();
}
std::string string_field(const json& obj, const char* key, const std::string& what) {
  const json& v = field(obj, key, what);
  MXDP_CHECK(v.is_string(), what, ": \"", key, "\" must be a string, got a ", v.type_name());
  return v.get<std::string>();
}

// The params list of either metadata version: names and shapes, numel checked.
std::vector<CheckpointParam> parse_params(const json& meta, const std::string& what) {
  const json& ps = field(meta, "params", what);
  MXDP_CHECK(ps.is_array(), what, ": \"params\" must be an array, got a ", ps.type_name());
  std::vector<CheckpointParam> out;
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::string at = what + ": param " + std::to_string(i);
    CheckpointParam p;
    p.name = string_field(ps[i], "name", at);
    const json& shape = field(ps[i], "shape", at);
    MXDP_CHECK(shape.is_array() && !shape.empty() && shape.size() <= 8, at, " ('", p.name,
               "'): \"shape\" must be an array of 1 to 8 dimensions");
    p.numel = 1;
    for (const json& d : shape) {
      MXDP_CHECK(d.is_number_integer(), at, " ('", p.name, "'): a dimension of its shape is not an integer");
      const bool neg = !d.is_number_unsigned() && d.get<int64_t>() < 0;
      MXDP_CHECK(!neg && d.get<uint64_t>() >= 1 && d.get<uint64_t>() <= uint64_t(kMaxNumel), at, " ('", p.name,
                 "'): dimension ", d.dump(), " is outside [1, 2^48]");
      const int64_t di = d.get<int64_t>();
      MXDP_CHECK(p.numel <= kMaxNumel / di, at, " ('", p.name, "'): shape ", shape.dump(),
                 " has more than 2^48 elements");
      p.numel *= di;
      p.shape.push_back(di);
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Parses the container: magic, version, metadata length, checksum, JSON.
// Returns the version and the metadata; `tensors` gets the bytes between the
// metadata and the checksum.
uint32_t parse_container(std::span<const uint8_t> b, const std::string& what, json& meta,
                         std::span<const uint8_t>& tensors) {
  MXDP_CHECK(b.size() >= kContainerHead + 8, what, ": not an mxdp checkpoint (", b.size(),
             " bytes, expected at least ", kContainerHead + 8, ")");
  MXDP_CHECK(std::memcmp(b.data(), kMagic, 8) == 0, what, ": not an mxdp checkpoint (magic bytes differ from MXDPCKPT)");
  const uint32_t ver = get<uint32_t>(b, 8);
  MXDP_CHECK(ver == kCheckpointVersion || ver == kSingleFileCheckpointVersion, what, ": checkpoint format version ", ver,
             ", this mxdp reads versions ", kSingleFileCheckpointVersion, " and ", kCheckpointVersion);
  const uint64_t meta_len = get<uint64_t>(b, 16);
  const uint64_t room = b.size() - kContainerHead - 8;
  MXDP_CHECK(meta_len <= room, what, ": truncated checkpoint: the metadata length is ", meta_len, " bytes but only ",
             room, " follow the header");
  const uint64_t stored = get<uint64_t>(b, b.size() - 8);
  const uint64_t actual = fnv1a64(b.data(), b.size() - 8);
  MXDP_CHECK(stored == actual, what, ": checksum mismatch (stored ", stored, ", computed ", actual,
             "): the file is corrupt or truncated");
  const auto* first = reinterpret_cast<const char*>(b.data() + kContainerHead);
  bool too_deep = false;
  try {
    meta = json::parse(first, first + meta_len, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) too_deep = true;
      return !too_deep;
    });
  } catch (const json::parse_error& e) {
    MXDP_FAIL(what, ": checkpoint metadata is not valid JSON (syntax error near byte ", e.byte, " of ", meta_len, ")");
  } catch (const json::exception& e) {
    MXDP_FAIL(what, ": checkpoint metadata is not valid JSON (error ", e.id, ", e.g. a number out of range)");
  }
  MXDP_CHECK(!too_deep, what, ": checkpoint metadata nests deeper than ", kMaxJsonDepth, " levels");
  MXDP_CHECK(meta.is_object(), what, ": checkpoint metadata must be a JSON object, got a ", meta.type_name());
  tensors = b.subspan(kContainerHead + meta_len, room - meta_len);
  return ver;
}

// Writes into a buffer sized up front (vector::insert of small spans trips
// GCC 12's -Wstringop-overflow false positives).
struct ByteWriter {
  std::vector<uint8_t> out;
  size_t at = 0;
  explicit ByteWriter(size_t n) : out(n) {}
  void bytes(const void* p, size_t n) {
    MXDP_CHECK(n <= out.size() - at, "internal: writing ", n, " bytes past a buffer of ", out.size());
    if (n) std::memcpy(out.data() + at, p, n);
    at += n;
  }
  template <class T>
  void value(const T& x) {
    bytes(&x, sizeof x);
  }
};

std::vector<uint8_t> container(uint32_t version, const json& meta, std::span<const std::vector<float>* const> tensors = {}) {
  const std::string js = meta.dump();
  size_t tensor_bytes = 0;
  for (const auto* t : tensors) tensor_bytes += t->size() * sizeof(float);
  ByteWriter w(kContainerHead + js.size() + tensor_bytes + 8);
  w.bytes(kMagic, 8);
  w.value<uint32_t>(version);
  w.value<uint32_t>(0);
  w.value<uint64_t>(js.size());
  w.bytes(js.data(), js.size());
  for (const auto* t : tensors) w.bytes(t->data(), t->size() * sizeof(float));
  w.value<uint64_t>(fnv1a64(w.out.data(), w.at));
  return std::move(w.out);
}

json params_json(const std::vector<CheckpointParam>& ps) {
  json a = json::array();
  for (const auto& p : ps) a.push_back({{"name", p.name}, {"shape", p.shape}});
  return a;
}

std::string rank_file_what(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

}  // namespace

// ---- version 1: one file ----------------------------------------------------------

std::vector<uint8_t> serialize_checkpoint(const CheckpointData& c) {
  json meta;
  meta["version"] = c.version;
  meta["iteration"] = c.iteration;
  meta["extra"] = c.extra;
  meta["params"] = json::array();
  std::vector<const std::vector<float>*> tensors;
  for (const auto& p : c.params) {
    int64_t n = 1;
    for (auto d : p.shape) n *= d;
    MXDP_CHECK(int64_t(p.master.size()) == n && int64_t(p.m.size()) == n && int64_t(p.v.size()) == n,
               "param '", p.name, "': state sizes do not match its shape");
    meta["params"].push_back({{"name", p.name}, {"shape", p.shape}});
    for (const auto* t : {&p.master, &p.m, &p.v}) tensors.push_back(t);
  }
  return container(kSingleFileCheckpointVersion, meta, tensors);
}

CheckpointData deserialize_checkpoint(std::span<const uint8_t> b, const std::string& what) {
  json meta;
  std::span<const uint8_t> tensors;
  const uint32_t ver = parse_container(b, what, meta, tensors);
  MXDP_CHECK(ver == kSingleFileCheckpointVersion, what, ": this is the manifest of a step directory (format ", ver,
             "), not a single-file checkpoint; load its directory");
  CheckpointData c;
  c.version = int_field(meta, "version", 0, std::numeric_limits<int64_t>::max(), what);
  c.iteration = int_field(meta, "iteration", 0, std::numeric_limits<int64_t>::max(), what);
  if (meta.contains("extra")) {
    c.extra = meta["extra"];
    MXDP_CHECK(c.extra.is_object(), what, ": \"extra\" must be a JSON object, got a ", c.extra.type_name());
  }
  const std::vector<CheckpointParam> ps = parse_params(meta, what);
  // Every tensor byte accounted for before anything is allocated.
  uint64_t need = 0;
  for (const auto& p : ps) {
    const uint64_t bytes = 3 * uint64_t(p.numel) * sizeof(float);
    MXDP_CHECK(bytes <= tensors.size() - std::min<uint64_t>(need, tensors.size()), what, ": truncated checkpoint: param '",
               p.name, "' needs ", bytes, " bytes of tensors but only ", tensors.size() - std::min<uint64_t>(need, tensors.size()),
               " remain");
    need += bytes;
  }
  MXDP_CHECK(need == tensors.size(), what, ": ", tensors.size() - need, " unexpected bytes after the tensors");
  size_t at = 0;
  for (const auto& p : ps) {
    ParamState s;
    s.name = p.name;
    s.shape = p.shape;
    for (auto* t : {&s.master, &s.m, &s.v}) {
      t->resize(size_t(p.numel));
      std::memcpy(t->data(), tensors.data() + at, size_t(p.numel) * sizeof(float));
      at += size_t(p.numel) * sizeof(float);
    }
    c.params.push_back(std::move(s));
  }
  return c;
}

// ---- manifest ---------------------------------------------------------------------

std::string rank_file_name(int rank) {
  char b[32];
  std::snprintf(b, sizeof b, "rank_%05d.bin", rank);
  return b;
}

bool is_step_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / kManifestName, ec);
}

std::vector<uint8_t> serialize_manifest(const CheckpointManifest& m) {
  json files = json::array();
  for (const auto& f : m.files)
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"header_checksum", f.header_checksum}});
  const json meta = {{"format", kFormatName}, {"version", m.version},   {"iteration", m.iteration},
                     {"params", params_json(m.params)}, {"extra", m.extra}, {"chunk_bytes", m.chunk_bytes},
                     {"files", files}};
  return container(kCheckpointVersion, meta);
}

CheckpointManifest parse_manifest(std::span<const uint8_t> b, const std::string& what) {
  json meta;
  std::span<const uint8_t> rest;
  const uint32_t ver = parse_container(b, what, meta, rest);
  MXDP_CHECK(ver == kCheckpointVersion, what, ": a single-file checkpoint (format ", ver, "), not a step directory's manifest");
  MXDP_CHECK(rest.empty(), what, ": ", rest.size(), " unexpected bytes after the metadata");
  MXDP_CHECK(string_field(meta, "format", what) == kFormatName, what, ": \"format\" is not \"", kFormatName, "\"");
  CheckpointManifest m;
  m.version = int_field(meta, "version", 0, std::numeric_limits<int64_t>::max(), what);
  m.iteration = int_field(meta, "iteration", 0, std::numeric_limits<int64_t>::max(), what);
  MXDP_CHECK(m.version <= m.iteration, what, ": version ", m.version, " (updates applied) exceeds iteration ",
             m.iteration, " (steps taken)");
  m.params = parse_params(meta, what);
  MXDP_CHECK(!m.params.empty(), what, ": the checkpoint holds no params");
  m.extra = field(meta, "extra", what);
  MXDP_CHECK(m.extra.is_object(), what, ": \"extra\" must be a JSON object, got a ", m.extra.type_name());
  m.chunk_bytes = uint64_t(int_field(meta, "chunk_bytes", 1, int64_t(kMaxChunkBytes), what));
  const json& files = field(meta, "files", what);
  MXDP_CHECK(files.is_array() && !files.empty() && files.size() <= (1u << 20), what,
             ": \"files\" must be an array of 1 to 2^20 rank files");
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string at = what + ": file " + std::to_string(i);
    RankFileInfo f;
    f.name = string_field(files[i], "name", at);
    // Never a path from the file: the name must be exactly the one rank i writes.
    MXDP_CHECK(f.name == rank_file_name(int(i)), at, " is named '", f.name, "', expected '", rank_file_name(int(i)), "'");
    f.bytes = u64_field(files[i], "bytes", at);
    f.header_checksum = u64_field(files[i], "header_checksum", at);
    m.files.push_back(std::move(f));
  }
  return m;
}

CheckpointManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  return parse_manifest(read_file(path, kMaxManifestBytes), path);
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  CheckpointInfo info;
  if (is_step_directory(path)) {
    CheckpointManifest m = read_manifest(path);
    info.version = m.version;
    info.iteration = m.iteration;
    info.params = std::move(m.params);
    info.extra = std::move(m.extra);
    return info;
  }
  CheckpointData c = deserialize_checkpoint(read_file(path), path);
  info.version = c.version;
  info.iteration = c.iteration;
  for (auto& p : c.params) {
    int64_t n = 1;
    for (auto d : p.shape) n *= d;
    info.params.push_back({p.name, p.shape, n});
  }
  info.extra = std::move(c.extra);
  return info;
}

// ---- rank files --------------------------------------------------------------------

uint64_t rank_file_header_bytes(std::span<const uint8_t> b, uint64_t file_size, const std::string& what) {
  MXDP_CHECK(b.size() >= kRankFixed && file_size >= kRankFixed + 8, what, ": not an mxdp rank file (", file_size,
             " bytes, shorter than its header)");
  MXDP_CHECK(std::memcmp(b.data(), kRankMagic, 8) == 0, what, ": not an mxdp rank file (magic bytes differ from MXDPSHRD)");
  const uint32_t ver = get<uint32_t>(b, 8);
  MXDP_CHECK(ver == kRankFileVersion, what, ": rank file version ", ver, ", this mxdp reads version ", kRankFileVersion);
  const uint64_t n_pieces = get<uint64_t>(b, 16), chunk = get<uint64_t>(b, 24), data = get<uint64_t>(b, 32);
  MXDP_CHECK(chunk >= 1 && chunk <= kMaxChunkBytes, what, ": chunk size ", chunk, " is outside [1, 2^30]");
  const uint64_t room = file_size - kRankFixed - 8;  // for pieces, chunk sums and data
  MXDP_CHECK(n_pieces <= room / 24, what, ": ", n_pieces, " pieces cannot fit in a file of ", file_size, " bytes");
  MXDP_CHECK(data <= room - 24 * n_pieces, what, ": ", data, " data bytes cannot fit in a file of ", file_size, " bytes");
  const uint64_t n_chunks = data == 0 ? 0 : (data - 1) / chunk + 1;
  MXDP_CHECK(n_chunks <= room / 8, what, ": ", n_chunks, " chunk checksums cannot fit in a file of ", file_size, " bytes");
  const uint64_t meta = 24 * n_pieces + 8 * n_chunks;  // each term <= room: no overflow
  MXDP_CHECK(meta <= room && data == room - meta, what, ": the file has ", file_size, " bytes but its header says ",
             kRankFixed + meta + 8, " header bytes + ", data, " data bytes (truncated, or padded)");
  return kRankFixed + meta + 8;
}

RankFileHeader parse_rank_file_header(std::span<const uint8_t> b, uint64_t file_size,
                                      const std::vector<CheckpointParam>& params, const std::string& what) {
  RankFileHeader h;
  h.header_bytes = rank_file_header_bytes(b, file_size, what);
  MXDP_CHECK(b.size() >= h.header_bytes, what, ": header of ", h.header_bytes, " bytes, only ", b.size(), " given");
  h.checksum = get<uint64_t>(b, h.header_bytes - 8);
  const uint64_t actual = fnv1a64(b.data(), h.header_bytes - 8);
  MXDP_CHECK(h.checksum == actual, what, ": header checksum mismatch (stored ", h.checksum, ", computed ", actual,
             "): the file is corrupt");
  h.rank = get<uint32_t>(b, 12);
  const uint64_t n_pieces = get<uint64_t>(b, 16);
  h.chunk_bytes = get<uint64_t>(b, 24);
  h.data_bytes = get<uint64_t>(b, 32);
  uint64_t offset = 0;
  for (uint64_t i = 0; i < n_pieces; ++i) {
    const size_t at = kRankFixed + 24 * i;
    const uint64_t p = get<uint64_t>(b, at), begin = get<uint64_t>(b, at + 8), len = get<uint64_t>(b, at + 16);
    MXDP_CHECK(p < params.size(), what, ": piece ", i, " names param ", p, " but the checkpoint has ", params.size());
    const uint64_t numel = uint64_t(params[p].numel);
    MXDP_CHECK(len >= 1 && begin < numel && len <= numel - begin, what, ": piece ", i, " holds elements [", begin,
               ", +", len, ") of param '", params[p].name, "', which has ", numel);
    const uint64_t bytes = 12 * len;  // len <= 2^48
    MXDP_CHECK(bytes <= h.data_bytes - offset, what, ": the pieces hold more than the ", h.data_bytes, " data bytes");
    h.pieces.push_back({int64_t(p), int64_t(begin), int64_t(len)});
    h.piece_offsets.push_back(offset);
    offset += bytes;
  }
  MXDP_CHECK(offset == h.data_bytes, what, ": the pieces hold ", offset, " bytes but the data has ", h.data_bytes);
  const uint64_t n_chunks = h.data_bytes == 0 ? 0 : (h.data_bytes - 1) / h.chunk_bytes + 1;
  for (uint64_t c = 0; c < n_chunks; ++c) h.chunk_sums.push_back(get<uint64_t>(b, kRankFixed + 24 * n_pieces + 8 * c));
  return h;
}

RankFileWriter::RankFileWriter(const std::string& path, int rank, std::vector<StoredPiece> pieces, uint64_t chunk_bytes)
    : file_(File::create(path)), name_(fs::path(path).filename().string()) {
  MXDP_CHECK(chunk_bytes >= 1 && chunk_bytes <= kMaxChunkBytes && chunk_bytes % sizeof(float) == 0,
             "rank file chunk size must be a multiple of 4 in [4, 2^30], got ", chunk_bytes);
  h_.rank = uint32_t(rank);
  h_.chunk_bytes = chunk_bytes;
  h_.pieces = std::move(pieces);
  for (const auto& p : h_.pieces) {
    MXDP_CHECK(p.len >= 1 && p.begin >= 0 && p.param >= 0, "rank file piece of param ", p.param, " is empty or negative");
    h_.piece_offsets.push_back(h_.data_bytes);
    h_.data_bytes += 12 * uint64_t(p.len);
  }
  const uint64_t n_chunks = h_.data_bytes == 0 ? 0 : (h_.data_bytes - 1) / chunk_bytes + 1;
  h_.header_bytes = kRankFixed + 24 * h_.pieces.size() + 8 * n_chunks + 8;
  // The header is written last; its place is reserved now.
  const std::vector<uint8_t> zeros(size_t(h_.header_bytes), 0);
  file_.write(zeros.data(), zeros.size());
  chunk_.reserve(size_t(chunk_bytes));
}

void RankFileWriter::append(const float* host, size_t n) {
  const auto* p = reinterpret_cast<const uint8_t*>(host);
  size_t left = n * sizeof(float);
  MXDP_CHECK(written_ + left <= h_.data_bytes, "'", file_.path(), "': more data appended than its pieces hold");
  while (left > 0) {
    const size_t take = std::min<size_t>(left, size_t(h_.chunk_bytes) - chunk_.size());
    chunk_.insert(chunk_.end(), p, p + take);
    p += take;
    left -= take;
    written_ += take;
    if (chunk_.size() == h_.chunk_bytes) flush_chunk();
  }
}

void RankFileWriter::flush_chunk() {
  if (chunk_.empty()) return;
  h_.chunk_sums.push_back(fnv1a64(chunk_.data(), chunk_.size()));
  file_.write(chunk_.data(), chunk_.size());
  chunk_.clear();
}

RankFileInfo RankFileWriter::finish() {
  flush_chunk();
  MXDP_CHECK(written_ == h_.data_bytes, "'", file_.path(), "': ", written_, " of ", h_.data_bytes,
             " data bytes appended before finish()");
  ByteWriter head(size_t(h_.header_bytes));
  head.bytes(kRankMagic, 8);
  head.value<uint32_t>(kRankFileVersion);
  head.value<uint32_t>(h_.rank);
  head.value<uint64_t>(h_.pieces.size());
  head.value<uint64_t>(h_.chunk_bytes);
  head.value<uint64_t>(h_.data_bytes);
  for (const auto& p : h_.pieces) {
    head.value<uint64_t>(uint64_t(p.param));
    head.value<uint64_t>(uint64_t(p.begin));
    head.value<uint64_t>(uint64_t(p.len));
  }
  for (uint64_t s : h_.chunk_sums) head.value<uint64_t>(s);
  const uint64_t sum = fnv1a64(head.out.data(), head.at);
  head.value<uint64_t>(sum);
  MXDP_CHECK(head.at == h_.header_bytes, "rank file header of ", head.at, " bytes, ", h_.header_bytes, " planned");
  file_.pwrite(head.out.data(), head.out.size(), 0);
  file_.sync();
  file_.close();
  return {name_, h_.header_bytes + h_.data_bytes, sum};
}

// ---- reading a step directory --------------------------------------------------------

CheckpointReader::CheckpointReader(std::string dir, CheckpointManifest manifest)
    : dir_(std::move(dir)), m_(std::move(manifest)) {
  headers_.resize(m_.files.size());
  loaded_.assign(m_.files.size(), false);
  index_.resize(m_.params.size());
}

void CheckpointReader::load_header(int i) {
  if (loaded_[i]) return;
  const RankFileInfo& info = m_.files[i];
  const std::string what = rank_file_what(dir_, info.name);
  const File f = File::open_read(what);
  const uint64_t size = f.size();
  MXDP_CHECK(size == info.bytes, what, " has ", size, " bytes but the manifest says ", info.bytes,
             ": the file is truncated or from another checkpoint");
  std::vector<uint8_t> head(std::min<uint64_t>(size, kRankFixed));
  f.pread(head.data(), head.size(), 0);
  const uint64_t hb = rank_file_header_bytes(head, size, what);
  head.resize(size_t(hb));
  f.pread(head.data(), head.size(), 0);
  RankFileHeader h = parse_rank_file_header(head, size, m_.params, what);
  MXDP_CHECK(h.checksum == info.header_checksum, what, ": its header checksum ", h.checksum,
             " differs from the manifest's ", info.header_checksum, ": the file is from another checkpoint");
  MXDP_CHECK(h.rank == uint32_t(i), what, " says it was written by rank ", h.rank, ", expected ", i);
  MXDP_CHECK(h.chunk_bytes == m_.chunk_bytes, what, ": chunk size ", h.chunk_bytes, ", the manifest says ", m_.chunk_bytes);
  for (size_t k = 0; k < h.pieces.size(); ++k) {
    const StoredPiece& p = h.pieces[k];
    auto& spans = index_[size_t(p.param)];
    const Span s{p.begin, p.begin + p.len, i, int(k)};
    const auto pos = std::lower_bound(spans.begin(), spans.end(), s,
                                      [](const Span& a, const Span& b) { return a.begin < b.begin; });
    const bool overlaps_next = pos != spans.end() && pos->begin < s.end;
    const bool overlaps_prev = pos != spans.begin() && std::prev(pos)->end > s.begin;
    MXDP_CHECK(!overlaps_next && !overlaps_prev, what, ": elements [", s.begin, ", ", s.end, ") of param '",
               m_.params[p.param].name, "' are also held by another piece");
    spans.insert(pos, s);
  }
  headers_[i] = std::move(h);
  loaded_[i] = true;
}

void CheckpointReader::load_all_headers() {
  for (int i = 0; i < int(m_.files.size()); ++i) load_header(i);
  all_loaded_ = true;
}

void CheckpointReader::prefer(int file) {
  if (file >= 0 && file < int(m_.files.size())) load_header(file);
}

const CheckpointReader::Span* CheckpointReader::find(int p, int64_t at) {
  for (;;) {
    const auto& spans = index_[size_t(p)];
    auto it = std::upper_bound(spans.begin(), spans.end(), at, [](int64_t x, const Span& s) { return x < s.begin; });
    if (it != spans.begin() && std::prev(it)->end > at) return &*std::prev(it);
    if (all_loaded_) return nullptr;
    load_all_headers();
  }
}

void CheckpointReader::check_stored(int p, int64_t begin, int64_t n) {
  MXDP_CHECK(p >= 0 && p < int(m_.params.size()) && begin >= 0 && n >= 0 && n <= m_.params[p].numel - begin,
             dir_, ": no elements [", begin, ", +", n, ") of param ", p, " in this checkpoint");
  for (int64_t at = begin; at < begin + n;) {
    const Span* s = find(p, at);
    MXDP_CHECK(s, dir_, ": element ", at, " of param '", m_.params[p].name, "' is in none of the ", m_.files.size(),
               " rank files: the checkpoint is incomplete");
    at = s->end;
  }
}

void CheckpointReader::read(int p, int64_t begin, int64_t n, int tensor, float* out) {
  MXDP_CHECK(tensor >= 0 && tensor < 3, "checkpoint tensor ", tensor, " is not master (0), m (1) or v (2)");
  check_stored(p, begin, n);
  for (int64_t at = begin; at < begin + n;) {
    const Span* s = find(p, at);
    const StoredPiece& pc = headers_[s->file].pieces[s->piece];
    const int64_t take = std::min(begin + n, s->end) - at;
    const uint64_t off = headers_[s->file].piece_offsets[s->piece] + uint64_t(tensor) * 4 * uint64_t(pc.len) +
                         4 * uint64_t(at - pc.begin);
    read_bytes(s->file, off, size_t(take) * 4, reinterpret_cast<uint8_t*>(out + (at - begin)));
    at += take;
  }
}

void CheckpointReader::read_bytes(int file, uint64_t offset, size_t bytes, uint8_t* out) {
  const RankFileHeader& h = headers_[file];
  while (bytes > 0) {
    const uint64_t c = offset / h.chunk_bytes;
    if (cache_file_ != file || cache_chunk_ != c) {
      const uint64_t start = c * h.chunk_bytes, len = std::min(h.chunk_bytes, h.data_bytes - start);
      const std::string what = rank_file_what(dir_, m_.files[file].name);
      cache_file_ = -1;
      cache_.resize(size_t(len));
      File::open_read(what).pread(cache_.data(), cache_.size(), h.header_bytes + start);
      const uint64_t sum = fnv1a64(cache_.data(), cache_.size());
      MXDP_CHECK(sum == h.chunk_sums[c], what, ": checksum mismatch in data chunk ", c, " (bytes ", start, " to ",
                 start + len, "): the file is corrupt");
      cache_file_ = file;
      cache_chunk_ = c;
    }
    const uint64_t in = offset - c * h.chunk_bytes;
    const size_t take = size_t(std::min<uint64_t>(bytes, cache_.size() - in));
    std::memcpy(out, cache_.data() + in, take);
    out += take;
    offset += take;
    bytes -= take;
  }
}

CheckpointData read_checkpoint(const std::string& path, bool moments) {
  if (!is_step_directory(path)) {
    std::error_code ec;
    MXDP_CHECK(!fs::is_directory(path, ec), "'", path, "' is a directory without a ", kManifestName,
               ": not a checkpoint (an interrupted save?)");
    CheckpointData c = deserialize_checkpoint(read_file(path), path);
    if (!moments)
      for (auto& p : c.params) p.m.clear(), p.v.clear();
    return c;
  }
  CheckpointReader r(path, read_manifest(path));
  CheckpointData c;
  c.version = r.manifest().version;
  c.iteration = r.manifest().iteration;
  c.extra = r.manifest().extra;
  for (int p = 0; p < int(r.manifest().params.size()); ++p) {
    const CheckpointParam& cp = r.manifest().params[p];
    ParamState s{cp.name, cp.shape, {}, {}, {}};
    r.check_stored(p, 0, cp.numel);  // every element present before allocating for it
    int t = 0;
    for (auto* v : {&s.master, &s.m, &s.v}) {
      if (t == 0 || moments) {
        v->resize(size_t(cp.numel));
        r.read(p, 0, cp.numel, t, v->data());
      }
      ++t;
    }
    c.params.push_back(std::move(s));
  }
  return c;
}

// ---- committing a directory -------------------------------------------------------------

void commit_directory(const std::string& staged, const std::string& target) {
  sync_directory(staged);
  const fs::path t(target);
  const std::string parent = t.has_parent_path() ? t.parent_path().string() : ".";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(target, ec))) {
    rename_path(staged, target);
  } else if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    // Swapped in one step: `staged` now holds the previous checkpoint.
    fs::remove_all(staged, ec);
  } else {
    // A filesystem without RENAME_EXCHANGE: move the old one aside first.
    const std::string aside = temporary_path(target + ".old");
    rename_path(target, aside);
    rename_path(staged, target);
    fs::remove_all(aside, ec);
  }
  sync_directory(parent);
}

// ---- save directories -------------------------------------------------------------------

std::string checkpoint_name(int64_t step) {
  char b[48];
  std::snprintf(b, sizeof b, "step_%06lld.ckpt", (long long)step);
  return b;
}

int64_t checkpoint_step(const std::string& name) {
  const std::string pre = "step_", suf = ".ckpt";
  if (name.size() <= pre.size() + suf.size() || name.compare(0, pre.size(), pre) != 0 ||
      name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
    return -1;
  const std::string digits = name.substr(pre.size(), name.size() - pre.size() - suf.size());
  if (digits.size() > 18) return -1;
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_temporary_name(name)) continue;
    const std::string base = name.substr(0, name.rfind(".tmp."));
    if (base != "latest" && base.compare(0, 5, "step_") != 0) continue;
    removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  for (const auto& name : removed) {
    fs::remove_all(fs::path(dir) / name, ec);
    MXDP_CHECK(!ec, "cannot remove the stale temporary '", (fs::path(dir) / name).string(), "': ", ec.message());
  }
  return removed;
}

std::vector<std::string> remove_old_checkpoints(const std::string& dir, int keep, const std::string& keep_name) {
  if (keep <= 0) return {};
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const int64_t step = checkpoint_step(name);
    if (step >= 0) found.push_back({step, name});
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> removed;
  for (size_t i = 0; i + size_t(keep) < found.size(); ++i) {
    if (found[i].second == keep_name) continue;
    fs::remove_all(fs::path(dir) / found[i].second, ec);
    MXDP_CHECK(!ec, "cannot remove the old checkpoint '", (fs::path(dir) / found[i].second).string(), "': ", ec.message());
    removed.push_back(found[i].second);
  }
  return removed;
}

}  // namespace mxdp
