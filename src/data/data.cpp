// Byte tokenizer, shard files and loaders; the contract is in data.h. One file
// (over 500 lines) because the shard writer, the reader that trusts no byte of
// a shard and the loaders share the shard header's private layout.
#include "data/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "util/check.h"
#include "io/fileio.h"
#include "data/llmc_shards.h"

// The payload is read and written as native uint16: only little-endian hosts.
static_assert(std::endian::native == std::endian::little, "mxdp shards assume a little-endian host");

namespace mxdp {

// ---- tokenizer --------------------------------------------------------------

std::vector<uint16_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

namespace {
template <class T>
std::string decode_tokens(std::span<const T> tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    int64_t t = tokens[i];
    MXDP_CHECK(t >= 0 && t < ByteTokenizer::kVocabSize, "byte tokenizer: token ", t, " at position ", i,
               " is outside [0, 256)");
    out[i] = static_cast<char>(static_cast<unsigned char>(t));
  }
  return out;
}
}  // namespace

std::string ByteTokenizer::decode(std::span<const uint16_t> tokens) { return decode_tokens(tokens); }
std::string ByteTokenizer::decode(std::span<const int32_t> tokens) { return decode_tokens(tokens); }

// ---- shard files ------------------------------------------------------------

namespace {

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}
// Token i of a little-endian payload of `token_bytes`-byte (2 or 4) tokens.
uint32_t token_at(const unsigned char* payload, uint32_t token_bytes, size_t i) {
  return token_bytes == 2 ? uint32_t(payload[2 * i] | (payload[2 * i + 1] << 8)) : get_u32(payload + 4 * i);
}

}  // namespace

namespace {

template <typename T>
void write_shard_of(const std::string& path, std::span<const T> tokens, uint32_t vocab_size, uint32_t max_vocab) {
  MXDP_CHECK(vocab_size >= 1 && vocab_size <= max_vocab, "shard vocab_size must be in [1, ", max_vocab,
             "] for ", sizeof(T), "-byte tokens, got ", vocab_size);
  for (size_t i = 0; i < tokens.size(); ++i)
    MXDP_CHECK(tokens[i] < vocab_size, "token ", tokens[i], " at position ", i, " is >= vocab_size ", vocab_size);
  const size_t payload = tokens.size() * sizeof(T);
  unsigned char header[kShardHeaderBytes] = {};
  std::memcpy(header, kShardMagic, 8);
  put_u32(header + 8, kShardVersion);
  put_u32(header + 12, vocab_size);
  put_u32(header + 16, sizeof(T));
  put_u64(header + 24, tokens.size());
  put_u64(header + 32, fnv1a64(tokens.data(), payload));
  write_file_atomic(path, {std::span<const uint8_t>(header, sizeof header),
                           std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(tokens.data()), payload)});
}

}  // namespace

void write_shard(const std::string& path, std::span<const uint16_t> tokens, uint32_t vocab_size) {
  write_shard_of(path, tokens, vocab_size, 65536);
}

void write_shard(const std::string& path, std::span<const uint32_t> tokens, uint32_t vocab_size) {
  write_shard_of(path, tokens, vocab_size, kMaxShardVocab);
}

ShardInfo check_shard_bytes(std::span<const uint8_t> bytes, const std::string& path) {
  const size_t size = bytes.size();
  MXDP_CHECK(size >= kShardHeaderBytes, "token shard '", path, "' is truncated: ", size, " bytes, smaller than the ",
             kShardHeaderBytes, "-byte header");
  const unsigned char* h = bytes.data();
  MXDP_CHECK(std::memcmp(h, kShardMagic, 8) == 0, "'", path, "' is not an mxdp token shard (magic is not MXDPTOK1)");
  const uint32_t version = get_u32(h + 8);
  MXDP_CHECK(version == kShardVersion, "token shard '", path, "' has version ", version, ", this build reads ",
             kShardVersion);
  ShardInfo info;
  info.vocab_size = get_u32(h + 12);
  const uint32_t token_bytes = get_u32(h + 16);
  MXDP_CHECK(token_bytes == 2 || token_bytes == 4, "token shard '", path, "' has token_bytes ", token_bytes,
             ", this build reads 2 (uint16) and 4 (uint32)");
  info.token_bytes = token_bytes;
  const uint32_t max_vocab = token_bytes == 2 ? 65536 : kMaxShardVocab;
  MXDP_CHECK(info.vocab_size >= 1 && info.vocab_size <= max_vocab, "token shard '", path, "' has vocab_size ",
             info.vocab_size, ", expected 1..", max_vocab, " for ", token_bytes, "-byte tokens");
  const uint64_t count = get_u64(h + 24);
  const uint64_t payload = size - kShardHeaderBytes;
  MXDP_CHECK(count <= payload / token_bytes && payload == token_bytes * count, "token shard '", path, "' is ", size,
             " bytes, but its header says ", count, " tokens = ", kShardHeaderBytes, " + ", token_bytes, "*", count,
             " bytes (truncated or padded file)");
  info.count = count;
  const unsigned char* tokens = h + kShardHeaderBytes;
  const uint64_t want = get_u64(h + 32);
  const uint64_t got = fnv1a64(tokens, payload);
  if (got != want) {
    std::ostringstream os;
    os << std::hex << "0x" << got << " but the header says 0x" << want;
    MXDP_FAIL("token shard '", path, "' is corrupt: payload checksum is ", os.str());
  }
  for (size_t i = 0; i < count; ++i) {
    const uint32_t t = token_at(tokens, token_bytes, i);
    MXDP_CHECK(t < info.vocab_size, "token shard '", path, "': token ", t, " at position ", i, " is >= vocab_size ",
               info.vocab_size);
  }
  return info;
}

TokenDataset::TokenDataset(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) MXDP_FAIL("cannot open token shard '", path, "': ", errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string err = errno_text();
    ::close(fd);
    MXDP_FAIL("cannot stat token shard '", path, "': ", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    MXDP_FAIL("token shard '", path, "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kShardHeaderBytes) {
    ::close(fd);
    MXDP_FAIL("token shard '", path, "' is truncated: ", size, " bytes, smaller than the ", kShardHeaderBytes,
              "-byte header");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string map_err = map == MAP_FAILED ? errno_text() : "";
  ::close(fd);
  if (map == MAP_FAILED) MXDP_FAIL("cannot mmap token shard '", path, "': ", map_err);
  map_ = map;
  map_bytes_ = size;

  // From here on, a failed check unmaps through release() before throwing.
  try {
    const auto* h = static_cast<const unsigned char*>(map_);
    if (llmc_format_of(h, size)) {  // an llm.c shard (llmc_shards.h): GPT-2 or Llama 3 tokens
      open_llmc(h, size);
      return;
    }
    const ShardInfo info = check_shard_bytes(std::span(static_cast<const uint8_t*>(map_), size), path);
    vocab_size_ = info.vocab_size;
    count_ = size_t(info.count);
    token_bytes_ = info.token_bytes;
    payload_ = static_cast<const unsigned char*>(map_) + kShardHeaderBytes;
  } catch (...) {
    release();
    throw;
  }
}

void TokenDataset::open_llmc(const unsigned char* h, size_t size) {
  const LlmcHeader lh = parse_llmc_header(h, size, path_);
  count_ = size_t(lh.count);
  token_bytes_ = lh.format->token_bytes;
  vocab_size_ = lh.format->vocab_size;
  const unsigned char* t = h + kLlmcHeaderBytes;
  payload_ = t;
  for (size_t i = 0; i < count_; ++i) {
    const uint32_t id = token_at(t, token_bytes_, i);
    MXDP_CHECK(id < vocab_size_, "llm.c shard '", path_, "': token ", id, " at position ", i, " is >= ",
               lh.format->name, "'s vocab_size ", vocab_size_);
  }
}

TokenDataset::TokenDataset(const std::vector<std::string>& paths) {
  MXDP_CHECK(!paths.empty(), "a token dataset needs at least one shard");
  for (const auto& p : paths) {
    parts_.emplace_back(p);
    MXDP_CHECK(parts_.size() == 1 || parts_.back().token_bytes() == parts_.front().token_bytes(), "token shards '",
               paths.front(), "' and '", p, "' hold tokens of different widths (", parts_.front().token_bytes(),
               " and ", parts_.back().token_bytes(), " bytes); prepare them with the same tokenizer");
    token_bytes_ = parts_.back().token_bytes();
    part_start_.push_back(count_);
    count_ += parts_.back().size();
    vocab_size_ = std::max(vocab_size_, parts_.back().vocab_size());
    path_ += (path_.empty() ? "" : ",") + p;
  }
}

std::span<const uint16_t> TokenDataset::tokens() const {
  MXDP_CHECK(parts_.empty(), "token dataset '", path_, "' is made of ", parts_.size(),
             " files; read it with window()");
  MXDP_CHECK(token_bytes_ == 2, "token shard '", path_, "' holds 4-byte tokens; read it with read()");
  return {static_cast<const uint16_t*>(payload_), count_};
}

const uint16_t* TokenDataset::window(size_t start, size_t n, std::vector<uint16_t>& scratch) const {
  MXDP_CHECK(start <= count_ && n <= count_ - start, "token window [", start, ", ", start + n,
             ") is outside the ", count_, " tokens of '", path_, "'");
  MXDP_CHECK(token_bytes_ == 2, "token dataset '", path_, "' holds 4-byte tokens; read it with read()");
  if (parts_.empty()) return static_cast<const uint16_t*>(payload_) + start;
  size_t k = size_t(std::upper_bound(part_start_.begin(), part_start_.end(), start) - part_start_.begin()) - 1;
  if (start + n <= part_start_[k] + parts_[k].size())
    return static_cast<const uint16_t*>(parts_[k].payload_) + (start - part_start_[k]);
  scratch.resize(n);
  for (size_t done = 0; done < n; ++k) {
    const size_t from = start + done - part_start_[k];
    const size_t take = std::min(n - done, parts_[k].size() - from);
    std::memcpy(scratch.data() + done, static_cast<const uint16_t*>(parts_[k].payload_) + from, take * sizeof(uint16_t));
    done += take;
  }
  return scratch.data();
}

void TokenDataset::read(size_t start, size_t n, int32_t* out) const {
  MXDP_CHECK(start <= count_ && n <= count_ - start, "token window [", start, ", ", start + n,
             ") is outside the ", count_, " tokens of '", path_, "'");
  if (parts_.empty()) {
    if (token_bytes_ == 2) {
      const uint16_t* t = static_cast<const uint16_t*>(payload_) + start;
      for (size_t i = 0; i < n; ++i) out[i] = t[i];
    } else {
      const uint32_t* t = static_cast<const uint32_t*>(payload_) + start;
      for (size_t i = 0; i < n; ++i) out[i] = int32_t(t[i]);
    }
    return;
  }
  size_t k = size_t(std::upper_bound(part_start_.begin(), part_start_.end(), start) - part_start_.begin()) - 1;
  for (size_t done = 0; done < n; ++k) {
    const size_t from = start + done - part_start_[k];
    const size_t take = std::min(n - done, parts_[k].size() - from);
    parts_[k].read(from, take, out + done);
    done += take;
  }
}

void TokenDataset::release() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  payload_ = nullptr;
  count_ = 0;
}

TokenDataset::~TokenDataset() { release(); }

TokenDataset::TokenDataset(TokenDataset&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      payload_(std::exchange(o.payload_, nullptr)),
      count_(std::exchange(o.count_, 0)),
      token_bytes_(o.token_bytes_),
      vocab_size_(o.vocab_size_),
      parts_(std::move(o.parts_)),
      part_start_(std::move(o.part_start_)) {}

TokenDataset& TokenDataset::operator=(TokenDataset&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    payload_ = std::exchange(o.payload_, nullptr);
    count_ = std::exchange(o.count_, 0);
    token_bytes_ = o.token_bytes_;
    vocab_size_ = o.vocab_size_;
    parts_ = std::move(o.parts_);
    part_start_ = std::move(o.part_start_);
  }
  return *this;
}

// ---- prepare ----------------------------------------------------------------

PrepareResult prepare(const std::string& input_path, const std::string& output_dir, double val_fraction,
                      std::FILE* log) {
  namespace fs = std::filesystem;
  MXDP_CHECK(std::isfinite(val_fraction) && val_fraction > 0.0 && val_fraction < 1.0,
             "val fraction must be in (0, 1), got ", val_fraction);
  std::error_code ec;
  if (fs::is_directory(input_path, ec)) MXDP_FAIL("input '", input_path, "' is a directory, not a text file");
  std::vector<uint8_t> bytes;
  try {
    bytes = read_file(input_path);
  } catch (const Error& e) {
    MXDP_FAIL("cannot read input '", input_path, "' (", e.what(), ")");
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const size_t n = text.size();
  MXDP_CHECK(n > 0, "input '", input_path, "' is empty");
  const size_t n_val = static_cast<size_t>(std::floor(val_fraction * static_cast<double>(n)));
  MXDP_CHECK(n_val >= 1, "input '", input_path, "' has ", n, " bytes: val fraction ", val_fraction,
             " leaves no validation bytes");
  MXDP_CHECK(n_val < n, "input '", input_path, "' has ", n, " bytes: val fraction ", val_fraction,
             " leaves no training bytes");
  const size_t n_train = n - n_val;

  if (fs::exists(output_dir, ec) && !fs::is_directory(output_dir, ec))
    MXDP_FAIL("output '", output_dir, "' exists and is not a directory");
  create_directories(output_dir);

  const std::vector<uint16_t> tokens = ByteTokenizer::encode(text);
  PrepareResult r;
  r.bytes_read = n;
  r.source_fnv1a64 = fnv1a64(bytes.data(), bytes.size());
  r.train_tokens = n_train;
  r.val_tokens = n_val;
  r.train_path = (fs::path(output_dir) / "train.bin").string();
  r.val_path = (fs::path(output_dir) / "val.bin").string();
  write_shard(r.train_path, std::span(tokens).first(n_train));
  write_shard(r.val_path, std::span(tokens).subspan(n_train));
  if (log) {
    std::fprintf(log, "prepare: read %zu bytes from %s (byte tokenizer, vocab %d)\n", n, input_path.c_str(),
                 ByteTokenizer::kVocabSize);
    std::fprintf(log, "prepare: wrote %s: %zu tokens (first %.4g of the text)\n", r.train_path.c_str(), n_train,
                 1.0 - val_fraction);
    std::fprintf(log, "prepare: wrote %s: %zu tokens (last %.4g of the text)\n", r.val_path.c_str(), n_val,
                 val_fraction);
  }
  return r;
}

std::string prepared_dir(const std::string& text_path) { return text_path + ".mxdp"; }

namespace {

// Size and FNV-1a 64 of a file's content, read a MiB at a time.
std::pair<uint64_t, uint64_t> content_key(const std::string& path) {
  const File f = File::open_read(path);
  const uint64_t size = f.size();
  std::vector<uint8_t> buf(size_t(1) << 20);
  uint64_t h = kFnv1a64Basis;
  for (uint64_t at = 0; at < size; at += buf.size()) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), size - at));
    f.pread(buf.data(), n, at);
    h = fnv1a64(buf.data(), n, h);
  }
  return {size, h};
}

// Whether `record` (source.json) says the shards beside it were made from
// exactly this source; anything unreadable or different is "no".
bool record_matches(const std::string& record, const nlohmann::json& want) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(record, ec)) return false;
  try {
    const std::vector<uint8_t> b = read_file(record, 1 << 20);
    const auto got = nlohmann::json::parse(b.begin(), b.end(), nullptr, /*allow_exceptions=*/false);
    return got == want;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

std::string prepare_cached(const std::string& text_path, double val_fraction, std::FILE* log) {
  namespace fs = std::filesystem;
  const std::string dir = prepared_dir(text_path);
  const std::string record = (fs::path(dir) / "source.json").string();
  std::error_code ec;
  const std::string source = fs::absolute(text_path, ec).lexically_normal().string();
  const auto [size, hash] = content_key(text_path);
  nlohmann::json want = {{"source", source}, {"bytes", size}, {"fnv1a64", hash},
                         {"val_fraction", val_fraction}, {"tokenizer", "byte"}};
  if (record_matches(record, want) && fs::exists(fs::path(dir) / "train.bin", ec) &&
      fs::exists(fs::path(dir) / "val.bin", ec))
    return dir;
  if (log) std::fprintf(log, "preparing %s -> %s/\n", text_path.c_str(), dir.c_str());
  fs::remove(record, ec);  // from here until the new record exists, the shards count as unprepared
  const PrepareResult r = prepare(text_path, dir, val_fraction, log);
  // Record what was tokenized (the file may have changed since it was hashed).
  want["bytes"] = r.bytes_read;
  want["fnv1a64"] = r.source_fnv1a64;
  write_file_atomic(record, want.dump() + "\n");
  return dir;
}

// ---- loaders ----------------------------------------------------------------

namespace {

uint64_t mix64(uint64_t z) {  // SplitMix64's output function
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct SplitMix64 {
  uint64_t x;
  uint64_t next() { return mix64(x += 0x9e3779b97f4a7c15ull); }
  // Uniform in [0, n), n >= 1, without modulo bias (rejection below 2^64 mod n).
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }
};

void check_geometry(int B, int T, int rank, int world_size) {
  MXDP_CHECK(B >= 1, "batch size B must be >= 1, got ", B);
  MXDP_CHECK(T >= 1, "sequence length T must be >= 1, got ", T);
  MXDP_CHECK(world_size >= 1, "world_size must be >= 1, got ", world_size);
  MXDP_CHECK(rank >= 0 && rank < world_size, "rank ", rank, " is outside [0, world_size=", world_size, ")");
}

// Copies window [start, start+T] into row b: inputs = tokens[start..start+T),
// targets = tokens[start+1..start+T].
void fill_row(const TokenDataset& tok, size_t start, int T, int b, std::vector<int32_t>& inputs,
              std::vector<int32_t>& targets) {
  int32_t* in = inputs.data() + size_t(b) * T;
  int32_t* tg = targets.data() + size_t(b) * T;
  tok.read(start, size_t(T), in);
  tok.read(start + 1, size_t(T), tg);
}

}  // namespace

void to_json(nlohmann::json& j, const DataLoaderState& s) {
  j = nlohmann::json{{"epoch", s.epoch},   {"step", s.step},
                     {"seed", s.seed},     {"seq_len", s.seq_len},
                     {"global_batch", s.global_batch}, {"dataset_tokens", s.dataset_tokens}};
}

void from_json(const nlohmann::json& j, DataLoaderState& s) {
  MXDP_CHECK(j.is_object(), "data loader state must be a JSON object, got: ", j.dump());
  for (const char* key : {"epoch", "step", "seed", "seq_len", "global_batch", "dataset_tokens"})
    MXDP_CHECK(j.contains(key) && j[key].is_number_integer(), "data loader state needs integer \"", key,
               "\", got: ", j.dump());
  s.epoch = j["epoch"].get<uint64_t>();
  s.step = j["step"].get<uint64_t>();
  s.seed = j["seed"].get<uint64_t>();
  s.seq_len = j["seq_len"].get<int64_t>();
  s.global_batch = j["global_batch"].get<int64_t>();
  s.dataset_tokens = j["dataset_tokens"].get<uint64_t>();
}

DataLoader::DataLoader(const TokenDataset& dataset, int B, int T, int rank, int world_size, uint64_t seed)
    : data_(&dataset), B_(B), T_(T), rank_(rank), world_size_(world_size), seed_(seed) {
  check_geometry(B, T, rank, world_size);
  const size_t N = dataset.size();
  MXDP_CHECK(N >= size_t(T) + 1, "token shard '", dataset.path(), "' has ", N, " tokens; one sequence of T=", T,
             " needs T+1 = ", size_t(T) + 1);
  num_windows_ = (N - 1) / size_t(T);
  MXDP_CHECK(num_windows_ <= std::numeric_limits<uint32_t>::max(), "token shard '", dataset.path(), "' has ",
             num_windows_, " windows of T+1 tokens, more than 2^32-1");
  const size_t G = size_t(world_size) * size_t(B);
  MXDP_CHECK(num_windows_ >= G, "token shard '", dataset.path(), "' has ", N, " tokens = ", num_windows_,
             " windows of T+1=", T + 1, " tokens, fewer than one global batch of world_size*B = ", world_size, "*",
             B, " = ", G, " sequences");
  steps_per_epoch_ = num_windows_ / G;
  inputs_.resize(size_t(B) * T);
  targets_.resize(size_t(B) * T);
  start_epoch(0);
}

void DataLoader::start_epoch(uint64_t epoch) {
  epoch_ = epoch;
  step_ = 0;
  SplitMix64 rng{mix64(mix64(seed_) + epoch)};
  const size_t slack = data_->size() - 1 - num_windows_ * size_t(T_);
  offset_ = size_t(rng.below(uint64_t(slack) + 1));
  perm_.resize(num_windows_);
  for (size_t k = 0; k < num_windows_; ++k) perm_[k] = uint32_t(k);
  for (size_t i = num_windows_ - 1; i > 0; --i) std::swap(perm_[i], perm_[size_t(rng.below(i + 1))]);
}

void DataLoader::next(Batch& batch) {
  const size_t G = size_t(world_size_) * size_t(B_);
  const TokenDataset& tok = *data_;
  for (int b = 0; b < B_; ++b)
    fill_row(tok, window_start(size_t(step_) * G + size_t(rank_) * B_ + b), T_, b, inputs_, targets_);
  batch = Batch{inputs_.data(), targets_.data(), B_, T_};
  if (++step_ == steps_per_epoch_) start_epoch(epoch_ + 1);
}

DataLoaderState DataLoader::state() const {
  DataLoaderState s;
  s.epoch = epoch_;
  s.step = step_;
  s.seed = seed_;
  s.seq_len = T_;
  s.global_batch = int64_t(world_size_) * B_;
  s.dataset_tokens = data_->size();
  return s;
}

void DataLoader::set_state(const DataLoaderState& s) {
  const DataLoaderState mine = state();
  MXDP_CHECK(s.seed == mine.seed, "data loader state was saved with seed ", s.seed, ", this loader has seed ",
             mine.seed);
  MXDP_CHECK(s.seq_len == mine.seq_len, "data loader state was saved with T=", s.seq_len, ", this loader has T=",
             mine.seq_len);
  MXDP_CHECK(s.global_batch == mine.global_batch, "data loader state was saved with global batch world_size*B = ",
             s.global_batch, ", this loader has ", mine.global_batch, " (", world_size_, "*", B_, ")");
  MXDP_CHECK(s.dataset_tokens == mine.dataset_tokens, "data loader state was saved for a shard of ",
             s.dataset_tokens, " tokens, '", data_->path(), "' has ", mine.dataset_tokens);
  MXDP_CHECK(s.step < steps_per_epoch_, "data loader state has step ", s.step, " but an epoch has only ",
             steps_per_epoch_, " steps");
  start_epoch(s.epoch);
  step_ = s.step;
}

int EvalLoader::max_batches(size_t tokens, int B, int T, int world_size) {
  if (B < 1 || T < 1 || world_size < 1 || tokens < size_t(T) + 1) return 0;
  const size_t batches = ((tokens - 1) / size_t(T)) / (size_t(world_size) * size_t(B));
  return int(std::min<size_t>(batches, std::numeric_limits<int>::max()));
}

EvalLoader::EvalLoader(const TokenDataset& dataset, int B, int T, int rank, int world_size, int eval_batches)
    : data_(&dataset), B_(B), T_(T), rank_(rank), world_size_(world_size), eval_batches_(eval_batches) {
  check_geometry(B, T, rank, world_size);
  MXDP_CHECK(eval_batches >= 1, "eval_batches must be >= 1, got ", eval_batches);
  const size_t N = dataset.size();
  MXDP_CHECK(N >= size_t(T) + 1, "token shard '", dataset.path(), "' has ", N, " tokens; one sequence of T=", T,
             " needs T+1 = ", size_t(T) + 1);
  const int most = max_batches(N, B, T, world_size);
  MXDP_CHECK(eval_batches <= most, "token shard '", dataset.path(), "' has ", N, " tokens = ", (N - 1) / size_t(T),
             " windows of T+1=", T + 1, " tokens: room for ", most, " eval batches of world_size*B = ", world_size,
             "*", B, " sequences, ", eval_batches, " asked");
  inputs_.resize(size_t(B) * T);
  targets_.resize(size_t(B) * T);
}

bool EvalLoader::next(Batch& batch) {
  if (next_ >= eval_batches_) return false;
  const size_t G = size_t(world_size_) * size_t(B_);
  const TokenDataset& tok = *data_;
  for (int b = 0; b < B_; ++b) {
    const size_t k = size_t(next_) * G + size_t(rank_) * B_ + b;
    fill_row(tok, k * size_t(T_), T_, b, inputs_, targets_);
  }
  batch = Batch{inputs_.data(), targets_.data(), B_, T_};
  ++next_;
  return true;
}

}  // namespace mxdp
