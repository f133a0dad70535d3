#include "data/bpe.h"

#include <algorithm>
#include <fstream>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/check.h"
#include "data/unicode_class.h"
#include "data/unicode_nfc.h"
#include "data/utf8.h"

namespace mxdp {

using nlohmann::json;

namespace {

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68
// get the code points 256, 257, ... in byte order.
struct ByteMap {
  char32_t to_char[256];
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteMap() {
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_char[b] = printable(b) ? char32_t(b) : next++;
      to_byte[to_char[b]] = uint8_t(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

bool json_false_or_missing(const json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_boolean() && !j[key].get<bool>());
}
bool json_empty_or_missing(const json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_string() && j[key].get<std::string>().empty());
}

// The post-processor only acts when `tokenizers` is asked to add special
// tokens (a BOS template); mxdp encodes as encode(text, add_special_tokens=False),
// so ByteLevel, TemplateProcessing and a Sequence of them are accepted and have no effect.
void check_post_processor(const json& p, const std::string& w) {
  if (p.is_null()) return;
  const std::string type = p.is_object() ? p.value("type", std::string()) : std::string();
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const json& q : p["processors"]) check_post_processor(q, w);
    return;
  }
  MXDP_CHECK(type == "ByteLevel" || type == "TemplateProcessing", "tokenizer '", w, "': post_processor ", p.dump(),
             " is not supported (only ByteLevel, TemplateProcessing, a Sequence of them, or none)");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MXDP_CHECK(in.good(), "cannot open tokenizer '", path, "'");
  std::ostringstream s;
  s << in.rdbuf();
  MXDP_CHECK(!in.bad(), "reading tokenizer '", path, "' failed");
  return std::move(s).str();
}

// The BPE model's switches that change encoding; the ones mxdp lacks are refused.
struct BpeModelOptions {
  bool ignore_merges, fuse_unk;
};

BpeModelOptions read_model_options(const json& m, const std::string& w) {
  const std::string type = m.value("type", std::string("BPE"));
  MXDP_CHECK(type == "BPE", "tokenizer '", w, "': model type '", type, "' is not supported (only BPE)");
  MXDP_CHECK(!m.contains("dropout") || m["dropout"].is_null(), "tokenizer '", w, "': BPE dropout is not supported");
  MXDP_CHECK(json_empty_or_missing(m, "continuing_subword_prefix") && json_empty_or_missing(m, "end_of_word_suffix"),
             "tokenizer '", w, "': continuing_subword_prefix / end_of_word_suffix are not supported (GPT-2's BPE has none)");
  const auto flag = [&](const char* k) { return m.contains(k) && m[k].is_boolean() && m[k].get<bool>(); };
  const BpeModelOptions o{flag("ignore_merges"), flag("fuse_unk")};
  MXDP_CHECK(!m.contains("byte_fallback") || json_false_or_missing(m, "byte_fallback"), "tokenizer '", w,
             "': byte_fallback is not supported (a byte-level BPE has every byte in its vocabulary)");
  return o;
}

// Whether the normalizer is NFC; the only other one accepted is none.
bool read_normalizer(const json& j, const std::string& w) {
  const json norm = j.value("normalizer", json());
  const bool nfc = norm.is_object() && norm.value("type", std::string()) == "NFC";
  MXDP_CHECK(norm.is_null() || nfc, "tokenizer '", w, "': normalizer ", norm.dump(),
             " is not supported (only NFC or none)");
  return nfc;
}

void check_decoder(const json& j, const std::string& w) {
  if (j.contains("decoder") && !j["decoder"].is_null())
    MXDP_CHECK(j["decoder"].is_object() && j["decoder"].value("type", std::string()) == "ByteLevel", "tokenizer '", w,
               "': decoder ", j["decoder"].dump(), " is not supported (only ByteLevel or none)");
}

// model.vocab: token -> id.
std::unordered_map<std::string, int32_t> read_vocab(const json& m, const std::string& w) {
  MXDP_CHECK(m.contains("vocab") && m["vocab"].is_object(), "tokenizer '", w, "': model.vocab is not an object");
  std::unordered_map<std::string, int32_t> vocab;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    MXDP_CHECK(it.value().is_number_integer(), "tokenizer '", w, "': vocab entry '", it.key(), "' has id ",
               it.value().dump(), ", not an integer");
    const int64_t id = it.value().get<int64_t>();
    MXDP_CHECK(id >= 0 && id < kMaxTokenizerId, "tokenizer '", w, "': vocab entry '", it.key(), "' has id ", id,
               " (at most ", kMaxTokenizerId - 1, ")");
    vocab[it.key()] = int32_t(id);
  }
  MXDP_CHECK(!vocab.empty(), "tokenizer '", w, "': the vocabulary is empty");
  return vocab;
}

// added_tokens as the file lists them: content and the id written there.
std::vector<std::pair<std::string, int32_t>> read_added_tokens(const json& j, const std::string& w, bool nfc) {
  std::vector<std::pair<std::string, int32_t>> added;
  if (!j.contains("added_tokens") || j["added_tokens"].is_null()) return added;
  MXDP_CHECK(j["added_tokens"].is_array(), "tokenizer '", w, "': added_tokens is not an array");
  for (const json& a : j["added_tokens"]) {
    MXDP_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                   a["content"].is_string(),
               "tokenizer '", w, "': added token ", a.dump(), " needs an integer id and a string content");
    const int64_t id = a["id"].get<int64_t>();
    const std::string content = a["content"].get<std::string>();
    MXDP_CHECK(id >= 0 && id < kMaxTokenizerId, "tokenizer '", w, "': added token '", content, "' has id ", id);
    MXDP_CHECK(!content.empty(), "tokenizer '", w, "': added token ", id, " is empty");
    for (const char* k : {"single_word", "lstrip", "rstrip"})
      MXDP_CHECK(json_false_or_missing(a, k), "tokenizer '", w, "': added token '", content, "' has ", k,
                 " set, which is not supported");
    MXDP_CHECK(!nfc || json_false_or_missing(a, "normalized"), "tokenizer '", w, "': added token '", content,
               "' is matched in normalized text (\"normalized\": true), which mxdp does not support");
    added.emplace_back(content, int32_t(id));
  }
  return added;
}

// Gives the added tokens the ids `tokenizers` gives them when it loads the
// file (the "id" written there is not read back): a token of the vocabulary
// keeps its id; another gets the vocabulary's size, or one past the largest
// added id once that is at least the size. For the published files this is the
// id in the file. Returns the largest id of vocabulary and added tokens.
int64_t assign_added_ids(std::vector<std::pair<std::string, int32_t>>& added,
                         const std::unordered_map<std::string, int32_t>& vocab, const std::string& w) {
  const int64_t vocab_len = int64_t(vocab.size());
  int64_t max_id = -1;
  for (const auto& [tok, id] : vocab) max_id = std::max(max_id, int64_t(id));
  int64_t max_added = -1;
  std::unordered_map<std::string, int32_t> added_id;
  auto vocab_has_id = [&](int64_t id) {  // only asked for a vocabulary with gaps in its ids
    return std::any_of(vocab.begin(), vocab.end(), [&](const auto& e) { return e.second == id; });
  };
  for (auto& [content, id] : added) {
    if (auto v = vocab.find(content); v != vocab.end()) {
      id = v->second;
    } else if (auto a = added_id.find(content); a != added_id.end()) {
      id = a->second;
    } else {
      const int64_t next = max_added < 0 || max_added < vocab_len ? vocab_len : max_added + 1;
      MXDP_CHECK(next < kMaxTokenizerId && (next > max_id || !vocab_has_id(next)), "tokenizer '", w,
                 "': added token '", content, "' would get id ", next, ", which the vocabulary uses already");
      id = int32_t(next);
    }
    added_id.emplace(content, id);
    max_added = std::max(max_added, int64_t(id));
    max_id = std::max(max_id, int64_t(id));
  }
  return max_id;
}

// One entry of model.merges, "a b" or ["a", "b"]; `rank` is its position.
std::pair<std::string, std::string> read_merge(const json& e, int32_t rank, const std::string& w) {
  if (e.is_string()) {
    const std::string s = e.get<std::string>();
    const size_t sp = s.find(' ');
    MXDP_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, "tokenizer '", w, "': merge ",
               rank, " '", s, "' is not two tokens separated by one space");
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  MXDP_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), "tokenizer '", w, "': merge ",
             rank, " ", e.dump(), " is not a pair of strings");
  return {e[0].get<std::string>(), e[1].get<std::string>()};
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path) : what_(path) { parse(read_text_file(path)); }

BpeTokenizer::BpeTokenizer(const std::string& json_text, const std::string& what) : what_(what) { parse(json_text); }

void BpeTokenizer::parse(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    MXDP_FAIL("tokenizer '", what_, "' is not valid JSON: ", e.what());
  }
  const std::string& w = what_;
  MXDP_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), "tokenizer '", w,
             "' is not a Hugging Face tokenizer.json (no \"model\" object)");
  const json& m = j["model"];
  const BpeModelOptions mo = read_model_options(m, w);
  ignore_merges_ = mo.ignore_merges;
  fuse_unk_ = mo.fuse_unk;

  // Normalizer, pre-tokenizer, post-processor, decoder.
  nfc_ = read_normalizer(j, w);
  MXDP_CHECK(j.contains("pre_tokenizer"), "tokenizer '", w, "' has no pre_tokenizer");
  pre_tokenizer_.emplace(j["pre_tokenizer"], w);
  check_post_processor(j.value("post_processor", json()), w);
  check_decoder(j, w);

  // Vocabulary and added tokens: the id tables.
  vocab_ = read_vocab(m, w);
  added_ = read_added_tokens(j, w, nfc_);
  vocab_size_ = int(assign_added_ids(added_, vocab_, w) + 1);
  id_to_token_.assign(vocab_size_, std::string());
  is_added_.assign(vocab_size_, false);
  std::vector<bool> seen(vocab_size_, false);
  for (const auto& [tok, id] : vocab_) {
    MXDP_CHECK(!seen[id], "tokenizer '", w, "': id ", id, " is given to two vocabulary entries ('",
               id_to_token_[id], "' and '", tok, "')");
    seen[id] = true;
    id_to_token_[id] = tok;
  }
  for (const auto& [content, id] : added_) {
    id_to_token_[id] = content;
    is_added_[id] = true;
  }

  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    const std::string unk = m["unk_token"].get<std::string>();
    auto it = vocab_.find(unk);
    MXDP_CHECK(it != vocab_.end(), "tokenizer '", w, "': unk_token '", unk, "' is not in the vocabulary");
    unk_id_ = it->second;
  }

  const ByteMap& bm = byte_map();
  for (int b = 0; b < 256; ++b) {
    byte_char_[b].clear();
    utf8_append(byte_char_[b], bm.to_char[b]);
    auto it = vocab_.find(byte_char_[b]);
    byte_id_[b] = it == vocab_.end() ? -1 : it->second;
  }

  // Merges: rank = position in the list; a later duplicate replaces an earlier one.
  MXDP_CHECK(m.contains("merges") && m["merges"].is_array(), "tokenizer '", w, "': model.merges is not an array");
  int32_t rank = 0;
  for (const json& e : m["merges"]) {
    const auto [a, b] = read_merge(e, rank, w);
    auto ia = vocab_.find(a), ib = vocab_.find(b), ic = vocab_.find(a + b);
    MXDP_CHECK(ia != vocab_.end() && ib != vocab_.end() && ic != vocab_.end(), "tokenizer '", w, "': merge ", rank,
               " ('", a, "', '", b, "') uses a token that is not in the vocabulary");
    merges_[pair_key(ia->second, ib->second)] = Merge{rank, ic->second};
    ++rank;
  }
}

std::string BpeTokenizer::describe() const {
  return "bpe " + what_ + " (vocab " + std::to_string(vocab_size_) + ", " + std::to_string(merges_.size()) + " merges, " +
         (nfc_ ? "NFC, " : "") + pre_tokenizer_->describe() + ")";
}

// ---- pre-tokenizer -----------------------------------------------------------

// ---- BPE ---------------------------------------------------------------------

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const std::string key(word);
  if (auto it = cache_.find(key); it != cache_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<int32_t> ids;
  if (ignore_merges_) {
    std::string mapped;
    for (unsigned char c : word) mapped += byte_char_[c];
    if (auto it = vocab_.find(mapped); it != vocab_.end()) ids.push_back(it->second);
  }
  if (ids.empty()) {
    struct Sym {
      int32_t id;
      int prev, next;
      bool alive;
    };
    std::vector<Sym> sym;
    sym.reserve(word.size());
    for (unsigned char c : word) {
      int32_t id = byte_id_[c];
      if (id < 0) {
        if (unk_id_ < 0) continue;  // no unk token: the character is dropped
        if (fuse_unk_ && !sym.empty() && sym.back().id == unk_id_) continue;
        id = unk_id_;
      }
      sym.push_back({id, int(sym.size()) - 1, int(sym.size()) + 1, true});
    }
    if (!sym.empty()) sym.back().next = -1;
    struct Cand {
      int32_t rank;
      int pos;
      int32_t id;
      bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }  // min-heap
    };
    std::priority_queue<Cand> q;
    auto push = [&](int pos) {
      const int nx = sym[pos].next;
      if (nx < 0) return;
      auto it = merges_.find(pair_key(sym[pos].id, sym[nx].id));
      if (it != merges_.end()) q.push({it->second.rank, pos, it->second.id});
    };
    for (int p = 0; p + 1 < int(sym.size()); ++p) push(p);
    while (!q.empty()) {
      const Cand c = q.top();
      q.pop();
      Sym& s = sym[c.pos];
      if (!s.alive || s.next < 0) continue;
      const int nx = s.next;
      auto it = merges_.find(pair_key(s.id, sym[nx].id));
      if (it == merges_.end() || it->second.id != c.id) continue;  // an entry from before a neighbour changed
      s.id = c.id;
      sym[nx].alive = false;
      s.next = sym[nx].next;
      if (s.next >= 0) sym[s.next].prev = c.pos;
      if (s.prev >= 0) push(s.prev);
      push(c.pos);
    }
    for (const Sym& s : sym)
      if (s.alive) ids.push_back(s.id);
  }
  if (cache_.size() > (1u << 20)) cache_.clear();
  out.insert(out.end(), ids.begin(), ids.end());
  cache_.emplace(key, std::move(ids));
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  // A long text goes in chunks of about kChunk bytes, so that its pre-tokens are
  // never all in memory at once. A chunk ends at a newline between a visible
  // ASCII character and an ASCII letter: every known pattern ends a piece on
  // both sides of such a newline (nothing joins a newline to a letter after it,
  // and the newline stands alone or ends the piece before it, in a chunk as in
  // the whole text), Digits does, and NFC composes nothing across it. Only
  // ByteLevel's prefix space would change, so such a text is kept whole.
  constexpr size_t kChunk = size_t(1) << 16;
  auto visible = [](char c) { return c >= 0x21 && c <= 0x7E; };
  auto letter = [](char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; };
  while (piece.size() > 2 * kChunk && !pre_tokenizer_->adds_prefix_space()) {
    size_t cut = piece.find('\n', kChunk);
    while (cut != std::string_view::npos && cut + 1 < piece.size() && !(visible(piece[cut - 1]) && letter(piece[cut + 1])))
      cut = piece.find('\n', cut + 1);
    if (cut == std::string_view::npos || cut + 1 >= piece.size()) break;
    encode_chunk(piece.substr(0, cut + 1), out);
    piece.remove_prefix(cut + 1);
  }
  encode_chunk(piece, out);
}

void BpeTokenizer::encode_chunk(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  std::vector<std::string> pieces;
  pre_tokenizer_->split(nfc_ ? unicode::nfc(piece) : std::string(piece), pieces);
  for (const std::string& p : pieces) encode_word(p, out);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  if (!utf8_valid(text)) {
    const std::string fixed = utf8_replace_invalid(text);
    size_t i = 0;
    while (i < text.size() && i < fixed.size() && text[i] == fixed[i]) ++i;
    MXDP_FAIL("tokenizer '", what_, "': the text is not valid UTF-8 (first bad byte near offset ", i, ")");
  }
  std::vector<int32_t> out;
  // next[k]: where added token k next occurs at or after pos (npos: nowhere), found again only once passed.
  std::vector<size_t> next(added_.size(), 0);
  for (size_t k = 0; k < added_.size(); ++k) next[k] = text.find(added_[k].first);
  size_t pos = 0;
  while (pos < text.size()) {
    // The next added token: leftmost, then longest.
    size_t best = std::string_view::npos, best_len = 0;
    int32_t best_id = -1;
    for (size_t k = 0; k < added_.size(); ++k) {
      const std::string& content = added_[k].first;
      if (next[k] != std::string_view::npos && next[k] < pos) next[k] = text.find(content, pos);
      const size_t f = next[k];
      if (f == std::string_view::npos) continue;
      if (f < best || (f == best && content.size() > best_len)) {
        best = f;
        best_len = content.size();
        best_id = added_[k].second;
      }
    }
    const size_t end = best == std::string_view::npos ? text.size() : best;
    encode_piece(text.substr(pos, end - pos), out);
    if (best == std::string_view::npos) break;
    out.push_back(best_id);
    pos = best + best_len;
  }
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  const ByteMap& bm = byte_map();
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int32_t id = ids[k];
    MXDP_CHECK(id >= 0 && id < vocab_size_ && (is_added_[id] || !id_to_token_[id].empty()), "tokenizer '", what_,
               "': token ", id, " at position ", k, " is not in the vocabulary (", vocab_size_, " ids)");
    const std::string& t = id_to_token_[id];
    std::string bytes;
    bool all = true;
    for (size_t i = 0; i < t.size() && all;) {
      const char32_t c = unicode::next_code_point(t.data(), t.size(), i);
      auto it = bm.to_byte.find(c);
      if (it == bm.to_byte.end())
        all = false;
      else
        bytes += char(it->second);
    }
    out += all ? bytes : t;
  }
  return out;
}

}  // namespace mxdp
