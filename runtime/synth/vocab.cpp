#include "runtime/synth/vocab.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "runtime/core/error.hpp"

namespace ferry::synth {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

bool printable_byte(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

bool is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_newline(unsigned char c) { return c == '\n' || c == '\r'; }
char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Length of a contraction ('s 't 're 've 'm 'll 'd) at text[i], or 0.
size_t contraction_at(std::string_view t, size_t i) {
  if (t[i] != '\'' || i + 1 >= t.size()) return 0;
  const char a = lower(t[i + 1]);
  const char b = i + 2 < t.size() ? lower(t[i + 2]) : '\0';
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  return 0;
}

}  // namespace

std::string byte_to_unicode(uint8_t b) {
  if (printable_byte(b)) return utf8(b);
  uint32_t n = 0;
  for (int x = 0; x < b; ++x)
    if (!printable_byte(x)) ++n;
  return utf8(256 + n);
}

const std::vector<uint8_t>& byte_token_order() {
  static const std::vector<uint8_t> order = [] {
    std::vector<uint8_t> o;
    for (int b = 0; b < 256; ++b)
      if (printable_byte(b)) o.push_back(static_cast<uint8_t>(b));
    for (int b = 0; b < 256; ++b)
      if (!printable_byte(b)) o.push_back(static_cast<uint8_t>(b));
    return o;
  }();
  return order;
}

std::vector<std::string> pretokenize(std::string_view t) {
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = t.size();
  auto u = [&](size_t k) { return static_cast<unsigned char>(t[k]); };
  while (i < n) {
    size_t j = i;
    if (size_t c = contraction_at(t, i)) {
      j = i + c;
    } else if (is_letter(u(i)) || (!is_newline(u(i)) && !is_digit(u(i)) && i + 1 < n && is_letter(u(i + 1)))) {
      j = is_letter(u(i)) ? i : i + 1;  // [^\r\n\p{L}\p{N}]?\p{L}+
      while (j < n && is_letter(u(j))) ++j;
    } else if (is_digit(u(i))) {
      j = i + 1;
    } else if (!is_space(u(i)) || (u(i) == ' ' && i + 1 < n && !is_space(u(i + 1)) && !is_letter(u(i + 1)) &&
                                   !is_digit(u(i + 1)))) {
      j = u(i) == ' ' ? i + 1 : i;  //  ?[^\s\p{L}\p{N}]+[\r\n]*
      while (j < n && !is_space(u(j)) && !is_letter(u(j)) && !is_digit(u(j))) ++j;
      while (j < n && is_newline(u(j))) ++j;
    } else {
      size_t k = i;
      while (k < n && is_space(u(k))) ++k;
      size_t last_nl = std::string_view::npos;
      for (size_t m = i; m < k; ++m)
        if (is_newline(u(m))) last_nl = m;
      if (last_nl != std::string_view::npos) {
        j = last_nl + 1;  // \s*[\r\n]+
      } else if (k < n && k - i > 1) {
        j = k - 1;  // \s+(?!\S): leave one space to prefix the next word
      } else {
        j = k;
      }
    }
    out.emplace_back(t.substr(i, j - i));
    i = j;
  }
  return out;
}

BpeModel train_bpe(std::string_view text, int max_merges) {
  BpeModel m;
  std::unordered_map<std::string, int> id_of;
  for (uint8_t b : byte_token_order()) {
    id_of.emplace(byte_to_unicode(b), static_cast<int>(m.tokens.size()));
    m.tokens.push_back(byte_to_unicode(b));
  }
  std::vector<int> byte_id(256);
  for (int b = 0; b < 256; ++b) byte_id[b] = id_of.at(byte_to_unicode(static_cast<uint8_t>(b)));

  // Unique words (ordered map: deterministic iteration) with their counts, as token id sequences.
  std::map<std::string, int> word_count;
  for (auto& w : pretokenize(text)) ++word_count[w];
  std::vector<std::vector<int>> words;
  std::vector<int> counts;
  for (const auto& [w, c] : word_count) {
    std::vector<int> ids;
    for (unsigned char ch : w) ids.push_back(byte_id[ch]);
    words.push_back(std::move(ids));
    counts.push_back(c);
  }

  for (int step = 0; step < max_merges; ++step) {
    std::map<std::pair<int, int>, int> pair_count;
    for (size_t w = 0; w < words.size(); ++w)
      for (size_t k = 0; k + 1 < words[w].size(); ++k) pair_count[{words[w][k], words[w][k + 1]}] += counts[w];
    // Most frequent pair; ties go to the smaller (left, right) token strings. A pair seen once is
    // not worth a token.
    const std::pair<int, int>* best = nullptr;
    int best_count = 0;
    for (const auto& [p, c] : pair_count) {
      if (c < 2) continue;
      const bool better = best == nullptr || c > best_count ||
                          (c == best_count && std::tie(m.tokens[p.first], m.tokens[p.second]) <
                                                  std::tie(m.tokens[best->first], m.tokens[best->second]));
      if (better) {
        best = &p;
        best_count = c;
      }
    }
    if (best == nullptr) break;
    const auto [left, right] = *best;
    const std::string merged = m.tokens[left] + m.tokens[right];
    m.merges.push_back(m.tokens[left] + " " + m.tokens[right]);
    int new_id;
    if (auto it = id_of.find(merged); it != id_of.end()) {
      new_id = it->second;  // the same string reached through another split: no duplicate token
    } else {
      new_id = static_cast<int>(m.tokens.size());
      id_of.emplace(merged, new_id);
      m.tokens.push_back(merged);
    }
    for (auto& w : words) {
      std::vector<int> next;
      next.reserve(w.size());
      for (size_t k = 0; k < w.size(); ++k) {
        if (k + 1 < w.size() && w[k] == left && w[k + 1] == right) {
          next.push_back(new_id);
          ++k;
        } else {
          next.push_back(w[k]);
        }
      }
      w = std::move(next);
    }
  }
  return m;
}

Vocab build_vocab(uint32_t n_vocab, int32_t special_base, int max_merges) {
  // Training takes a few hundred ms; plans are made often (tests), so keep the results.
  static std::mutex mutex;
  static std::map<int, BpeModel> cache;
  BpeModel bpe;
  {
    std::lock_guard lock(mutex);
    auto it = cache.find(max_merges);
    if (it == cache.end()) it = cache.emplace(max_merges, train_bpe(training_corpus(), max_merges)).first;
    bpe = it->second;
  }
  const auto n_bpe = static_cast<int32_t>(bpe.tokens.size());
  // The chat specials' offsets from <|endoftext|>: Qwen's own ids in the real vocabularies
  // (151657 <tool_call> ... 151668 </think> in Qwen3's), packed after <|im_end|> in the small ones.
  const bool real_ids = special_base >= 0;
  const std::array<int32_t, 4> chat_offsets = real_ids ? std::array<int32_t, 4>{14, 15, 24, 25}
                                                       : std::array<int32_t, 4>{3, 4, 5, 6};
  if (special_base < 0) special_base = n_bpe;
  if (special_base < n_bpe || static_cast<int64_t>(special_base) + chat_offsets[3] + 1 > n_vocab)
    fail(ErrorKind::invalid_arg, "vocabulary of {} tokens cannot hold {} BPE tokens and the special tokens at {}",
         n_vocab, n_bpe, special_base);
  Vocab v;
  v.tokens.reserve(n_vocab);
  v.token_types.reserve(n_vocab);
  for (auto& t : bpe.tokens) {
    v.tokens.push_back(std::move(t));
    v.token_types.push_back(kTokenNormal);
  }
  v.merges = std::move(bpe.merges);
  auto pad_to = [&](int32_t end) {
    for (auto id = static_cast<int32_t>(v.tokens.size()); id < end; ++id) {
      v.tokens.push_back("[PAD" + std::to_string(id) + "]");
      v.token_types.push_back(kTokenUnused);
    }
  };
  pad_to(special_base);
  v.endoftext = special_base;
  v.im_start = special_base + 1;
  v.im_end = special_base + 2;
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.emplace_back(s);
    v.token_types.push_back(kTokenControl);
  }
  // Reasoning and tool-call tags, user-defined as in Qwen's GGUFs: matched in any text and
  // rendered in the output (the chat parsers read them).
  const std::array<const char*, 4> chat_specials = {"<tool_call>", "</tool_call>", "<think>", "</think>"};
  for (size_t k = 0; k < chat_specials.size(); ++k) {
    pad_to(special_base + chat_offsets[k]);
    v.tokens.emplace_back(chat_specials[k]);
    v.token_types.push_back(kTokenUserDefined);
  }
  pad_to(static_cast<int32_t>(n_vocab));
  return v;
}

}  // namespace ferry::synth
