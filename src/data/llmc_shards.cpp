#include "data/llmc_shards.h"

#include <glob.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "util/check.h"

namespace mxdp {

namespace fs = std::filesystem;

namespace {

uint32_t le32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);  // sorted (no GLOB_NOSORT)
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  MXDP_CHECK(rc == 0 || rc == GLOB_NOMATCH, "--data: cannot expand '", pattern, "' (glob error ", rc, ")");
  MXDP_CHECK(!out.empty(), "--data: '", pattern, "' matches no file");
  return out;
}

bool is_val_name(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  size_t i = 0;
  while (i < name.size()) {
    size_t j = name.find_first_of("_-. ", i);
    if (j == std::string::npos) j = name.size();
    const std::string word = name.substr(i, j - i);
    if (word == "val" || word == "valid" || word == "validation") return true;
    i = j + 1;
  }
  return false;
}

// "GPT-2: magic 20240520, version 1, uint16 tokens"
std::string describe(const LlmcFormat& f) {
  return std::string(f.name) + ": magic " + std::to_string(f.magic) + ", version " + std::to_string(f.version) +
         ", uint" + std::to_string(8 * f.token_bytes) + " tokens";
}

// GPT-2 and Llama 3 shards hold two tokenizers' ids: one run reads one kind.
void check_one_format(const std::vector<std::string>& files) {
  const LlmcFormat* first = llmc_format_of_file(files.front());
  for (const auto& f : files) {
    const LlmcFormat* k = llmc_format_of_file(f);
    MXDP_CHECK(k == first, "--data: '", files.front(), "' holds llm.c ", first->name, " tokens but '", f, "' ",
               k ? k->name : "no llm.c", " tokens (two tokenizers' ids, not one sequence); name the shards of one "
               "of them");
  }
}

}  // namespace

const LlmcFormat* llmc_format_of(const unsigned char* bytes, size_t size) {
  if (size < 4) return nullptr;
  for (const LlmcFormat* f : {&kLlmcGpt2, &kLlmcLlama3})
    if (le32(bytes) == uint32_t(f->magic)) return f;
  return nullptr;
}

const LlmcFormat* llmc_format_of_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return nullptr;
  std::ifstream in(path, std::ios::binary);
  unsigned char b[4] = {};
  in.read(reinterpret_cast<char*>(b), 4);
  return in.gcount() == 4 ? llmc_format_of(b, 4) : nullptr;
}

bool is_llmc_shard(const std::string& path) { return llmc_format_of_file(path) != nullptr; }

LlmcHeader parse_llmc_header(const unsigned char* h, size_t size, const std::string& path) {
  LlmcHeader r;
  r.format = llmc_format_of(h, size);
  MXDP_CHECK(r.format, "'", path, "' is not an llm.c token shard (magic is neither ", kLlmcGpt2.magic, " nor ",
             kLlmcLlama3.magic, ")");
  const LlmcFormat& f = *r.format;
  MXDP_CHECK(size >= kLlmcHeaderBytes, "llm.c shard '", path, "' is truncated: ", size, " bytes, smaller than its ",
             kLlmcHeaderBytes, "-byte header");
  const uint32_t version = le32(h + 4);
  MXDP_CHECK(version == f.version, "llm.c shard '", path, "' has magic ", f.magic, " (", f.name, ") but version ",
             version, "; llm.c writes ", f.name, " shards as version ", f.version, " (", describe(kLlmcGpt2), "; ",
             describe(kLlmcLlama3), ")");
  const int32_t count = int32_t(le32(h + 8));
  MXDP_CHECK(count >= 0, "llm.c shard '", path, "' has a negative token count ", count);
  r.count = uint64_t(count);
  const uint64_t payload = size - kLlmcHeaderBytes;
  MXDP_CHECK(payload == f.token_bytes * r.count, "llm.c shard '", path, "' is ", size, " bytes, but its header says ",
             r.count, " ", f.name, " tokens = ", kLlmcHeaderBytes, " + ", f.token_bytes, "*", r.count,
             " bytes (truncated or padded file)");
  return r;
}

std::optional<LlmcShardSet> find_llmc_shards(const std::string& data) {
  std::vector<std::string> files;
  std::error_code ec;
  if (data.find(',') != std::string::npos || has_glob_chars(data)) {
    size_t i = 0;
    while (i <= data.size()) {
      size_t j = data.find(',', i);
      if (j == std::string::npos) j = data.size();
      const std::string item = data.substr(i, j - i);
      i = j + 1;
      if (item.empty()) continue;
      if (has_glob_chars(item)) {
        for (auto& f : expand_glob(item)) files.push_back(f);
      } else {
        MXDP_CHECK(fs::is_regular_file(item, ec), "--data: '", item, "' is not a file");
        files.push_back(item);
      }
    }
    MXDP_CHECK(!files.empty(), "--data '", data, "' names no file");
    for (const auto& f : files)
      MXDP_CHECK(is_llmc_shard(f), "--data: '", f, "' is not an llm.c token shard (its first int32 is neither ",
                 kLlmcGpt2.magic, " nor ", kLlmcLlama3.magic, "); a list or glob must name llm.c shards");
  } else if (fs::is_directory(data, ec)) {
    if (fs::exists(fs::path(data) / "train.bin", ec)) return std::nullopt;  // mxdp prepare's directory
    for (const auto& e : fs::directory_iterator(data, ec))
      if (e.path().extension() == ".bin" && is_llmc_shard(e.path().string())) files.push_back(e.path().string());
    if (files.empty()) return std::nullopt;
    std::sort(files.begin(), files.end());
  } else if (is_llmc_shard(data)) {
    files.push_back(data);
  } else {
    return std::nullopt;
  }
  check_one_format(files);
  LlmcShardSet s;
  for (const auto& f : files) (is_val_name(f) ? s.val : s.train).push_back(f);
  MXDP_CHECK(!s.train.empty(), "--data '", data, "': every llm.c shard it names is validation data (\"val\" in "
             "its file name); name training shards too");
  MXDP_CHECK(!s.val.empty(), "--data '", data, "': none of the ", s.train.size(),
             " llm.c shards it names is validation data; add one whose file name has \"val\" in it "
             "(llm.c writes e.g. fineweb_val_000000.bin)");
  return s;
}

}  // namespace mxdp
