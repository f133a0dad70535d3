#include "data/tokenizer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "data/bpe.h"
#include "util/check.h"
#include "io/checkpoint.h"

namespace mxdp {

namespace fs = std::filesystem;

namespace {

class Bytes final : public Tokenizer {
 public:
  std::string describe() const override { return "bytes (vocab 256)"; }
  int vocab_size() const override { return ByteTokenizer::kVocabSize; }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> out(text.size());
    for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
    return out;
  }
  std::string decode(std::span<const int32_t> ids) const override { return ByteTokenizer::decode(ids); }
};

std::string read_all(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) MXDP_FAIL("input '", path, "' is a directory, not a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) MXDP_FAIL("cannot read input '", path, "': ", std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  MXDP_CHECK(!in.bad(), "error while reading input '", path, "'");
  return std::move(buf).str();
}

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<Bytes>(); }

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  if (path.empty()) return make_byte_tokenizer();
  return std::make_unique<BpeTokenizer>(path);
}

std::unique_ptr<Tokenizer> data_tokenizer(const std::string& dir) {
  const fs::path p = fs::path(dir) / kDataTokenizerFile;
  std::error_code ec;
  if (!dir.empty() && fs::is_regular_file(p, ec)) return load_tokenizer(p.string());
  return make_byte_tokenizer();
}

PrepareResult prepare_with_tokenizer(const std::string& input_path, const std::string& output_dir,
                                     double val_fraction, const std::string& tokenizer_path, std::FILE* log) {
  MXDP_CHECK(std::isfinite(val_fraction) && val_fraction > 0.0 && val_fraction < 1.0,
             "val fraction must be in (0, 1), got ", val_fraction);
  const BpeTokenizer tok(tokenizer_path);
  MXDP_CHECK(uint32_t(tok.vocab_size()) <= kMaxShardVocab, "tokenizer '", tokenizer_path, "' has ", tok.vocab_size(),
             " ids, more than token shards hold (", kMaxShardVocab, ")");
  const std::string text = read_all(input_path);
  MXDP_CHECK(!text.empty(), "input '", input_path, "' is empty");
  const std::vector<int32_t> ids = tok.encode(text);
  const size_t n = ids.size();
  const size_t n_val = static_cast<size_t>(std::floor(val_fraction * static_cast<double>(n)));
  MXDP_CHECK(n_val >= 1, "input '", input_path, "' encodes to ", n, " tokens: val fraction ", val_fraction,
             " leaves no validation tokens");
  MXDP_CHECK(n_val < n, "input '", input_path, "' encodes to ", n, " tokens: val fraction ", val_fraction,
             " leaves no training tokens");
  std::error_code ec;
  if (fs::exists(output_dir, ec) && !fs::is_directory(output_dir, ec))
    MXDP_FAIL("output '", output_dir, "' exists and is not a directory");
  fs::create_directories(output_dir, ec);
  if (ec) MXDP_FAIL("cannot create output directory '", output_dir, "': ", ec.message());

  PrepareResult r;
  r.bytes_read = text.size();
  r.train_tokens = n - n_val;
  r.val_tokens = n_val;
  r.train_path = (fs::path(output_dir) / "train.bin").string();
  r.val_path = (fs::path(output_dir) / "val.bin").string();
  const uint32_t vocab = uint32_t(tok.vocab_size());
  // 2-byte tokens where the vocabulary fits (GPT-2, SmolLM2), else 4 (Llama 3, Qwen2).
  auto write_both = [&](const auto& tokens) {
    write_shard(r.train_path, std::span(tokens).first(r.train_tokens), vocab);
    write_shard(r.val_path, std::span(tokens).subspan(r.train_tokens), vocab);
  };
  if (vocab <= 65536)
    write_both(std::vector<uint16_t>(ids.begin(), ids.end()));
  else
    write_both(std::vector<uint32_t>(ids.begin(), ids.end()));
  const std::vector<uint8_t> tj = read_file(tokenizer_path);
  const std::string copy = (fs::path(output_dir) / kDataTokenizerFile).string();
  if (fs::weakly_canonical(copy, ec) != fs::weakly_canonical(tokenizer_path, ec)) write_file_atomic(copy, tj);
  if (log) {
    std::fprintf(log, "prepare: read %zu bytes from %s, %zu tokens with %s\n", text.size(), input_path.c_str(), n,
                 tok.describe().c_str());
    std::fprintf(log, "prepare: wrote %s: %zu tokens (first %.4g of the tokens)\n", r.train_path.c_str(),
                 r.train_tokens, 1.0 - val_fraction);
    std::fprintf(log, "prepare: wrote %s: %zu tokens (last %.4g of the tokens)\n", r.val_path.c_str(), r.val_tokens,
                 val_fraction);
    std::fprintf(log, "prepare: wrote %s (the tokenizer, for train and sample)\n", copy.c_str());
  }
  return r;
}

}  // namespace mxdp
