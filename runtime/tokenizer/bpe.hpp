#pragma once
// Byte-level BPE over one pre-tokenized word: bytes → GPT-2 alphabet → merges by rank (lowest
// first, leftmost on ties) → token ids, exactly as llama.cpp's llm_tokenizer_bpe_session.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ferry::tok {

// Hash that lets unordered_map<std::string, V> be searched with a string_view (no allocation).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // tokens: token texts by id (byte-level alphabet); merges: "left right" pairs, rank = index.
  // A text that appears twice maps to its last id, a merge that appears twice keeps its first
  // rank (both as llama.cpp).
  Bpe(const std::vector<std::string>& tokens, const std::vector<std::string>& merges);
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  // Appends the ids of one word (raw UTF-8 bytes, as cut by the pre-tokenizer). A merged piece
  // that is not in the vocabulary falls back to its single-byte pieces, and bytes without a
  // token are dropped -- llama.cpp's behaviour, which consistent vocabularies never trigger.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_id(std::string_view text) const {
    auto it = text_to_id_.find(text);
    if (it == text_to_id_.end()) return std::nullopt;
    return it->second;
  }
  // Merge rank of (left, right), -1 when the pair never merges.
  int32_t merge_rank(std::string_view left, std::string_view right) const;
  size_t n_merges() const { return n_merges_; }

 private:
  void merge(std::string_view encoded, std::vector<int32_t>& out) const;

  StringMap<int32_t> text_to_id_;
  StringMap<int32_t> merge_rank_;  // key "left right": byte-level texts never hold a raw space
  size_t n_merges_ = 0;

  // Word → ids, shared by all threads that encode with this tokenizer. Bounded: cleared when
  // it reaches kCacheMaxWords (natural text reuses few words; a pathological input cannot
  // grow it without limit).
  static constexpr size_t kCacheMaxWords = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 64;
  mutable std::mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace ferry::tok
