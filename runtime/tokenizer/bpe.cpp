#include "runtime/tokenizer/bpe.hpp"

#include <algorithm>
#include <queue>

#include "runtime/tokenizer/unicode.hpp"

namespace ferry::tok {

Bpe::Bpe(const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
  text_to_id_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) text_to_id_[tokens[i]] = static_cast<int32_t>(i);
  merge_rank_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    // Split at the first space after the first byte (llama.cpp: find(' ', 1)), so a left part
    // may itself start with a space. A merge without one becomes the unusable pair ("", "").
    const std::string& m = merges[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    std::string key = sp == std::string::npos ? std::string(" ") : m;
    merge_rank_.try_emplace(std::move(key), static_cast<int32_t>(i));
  }
  n_merges_ = merges.size();
}

int32_t Bpe::merge_rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + 1 + right.size());
  key.append(left).push_back(' ');
  key.append(right);
  auto it = merge_rank_.find(std::string_view(key));
  return it == merge_rank_.end() ? -1 : it->second;
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::string encoded;
  encoded.reserve(word.size() * 2);
  const ByteLevel& bl = ByteLevel::get();
  for (char c : word) encoded += bl.encode(static_cast<uint8_t>(c));

  const size_t first = out.size();
  merge(encoded, out);
  if (cacheable) {
    std::lock_guard lock(cache_mu_);
    if (cache_.size() >= kCacheMaxWords) cache_.clear();
    cache_.try_emplace(std::string(word), out.begin() + static_cast<std::ptrdiff_t>(first),
                       out.end());
  }
}

namespace {

struct Symbol {
  uint32_t start, len;  // bytes of the encoded word; len 0 = merged into its left neighbour
  int32_t prev, next;   // neighbours in the live chain, -1 at the ends
};

struct Bigram {
  int32_t rank;
  int32_t left, right;
  uint32_t left_len, right_len;  // lengths when queued: a changed length means a stale entry
};

// Lowest rank first; among equal ranks the leftmost pair (llama.cpp's llm_bigram_bpe order).
struct BigramAfter {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void Bpe::merge(std::string_view enc, std::vector<int32_t>& out) const {
  // One symbol per UTF-8 character of the byte-level text (all 1 or 2 bytes long).
  std::vector<Symbol> sym;
  sym.reserve(enc.size());
  for (size_t off = 0; off < enc.size();) {
    const size_t len = std::min(enc.size() - off, utf8_len(static_cast<uint8_t>(enc[off])));
    const auto idx = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(len), idx - 1,
                   off + len == enc.size() ? -1 : idx + 1});
    off += len;
  }
  auto text = [&](const Symbol& s) { return enc.substr(s.start, s.len); };

  std::priority_queue<Bigram, std::vector<Bigram>, BigramAfter> queue;
  std::string key;
  auto push_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    key.assign(text(sym[l])).push_back(' ');
    key.append(text(sym[r]));
    auto it = merge_rank_.find(std::string_view(key));
    if (it == merge_rank_.end()) return;
    queue.push({it->second, l, r, sym[l].len, sym[r].len});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) push_pair(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    // Stale when either side changed since queued (equivalent to llama.cpp's text comparison:
    // a symbol's start never moves, and only its left neighbour can absorb it).
    if (l.len == 0 || r.len == 0 || l.len != b.left_len || r.len != b.right_len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    push_pair(l.prev, b.left);
    push_pair(b.left, l.next);
  }

  for (const Symbol& s : sym) {
    if (s.len == 0) continue;
    const std::string_view piece = text(s);
    if (auto it = text_to_id_.find(piece); it != text_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (char c : piece) {
      if (auto it = text_to_id_.find(std::string_view(&c, 1)); it != text_to_id_.end())
        out.push_back(it->second);
    }
  }
}

}  // namespace ferry::tok
