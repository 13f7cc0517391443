// BPE merge core on in-memory vocabularies: rank order, leftmost ties, stale pairs, fallback for
// pieces missing from the vocabulary, duplicate entries, and agreement with a naive reference.
#include <gtest/gtest.h>

#include <random>

#include "runtime/tokenizer/bpe.hpp"
#include "runtime/tokenizer/unicode.hpp"
#include "tests/tokenizer/memory_vocab.hpp"

namespace ferry::tok {
namespace {

using test::bl;
using test::MemoryVocab;

std::vector<int32_t> enc(const Bpe& b, std::string_view w) {
  std::vector<int32_t> out;
  b.encode_word(w, out);
  return out;
}

TEST(Bpe, ByteLevelAlphabet) {
  const ByteLevel& b = ByteLevel::get();
  EXPECT_EQ(b.encode(' '), "\u0120");   // Ġ
  EXPECT_EQ(b.encode('\n'), "\u010A");  // Ċ
  EXPECT_EQ(b.encode('a'), "a");
  EXPECT_EQ(b.encode(0xAD), "\u0143");  // the one gap inside Latin-1: U+0100 + 67
  for (int x = 0; x < 256; ++x) {
    const auto cps = decode_utf8_lossy(b.encode(static_cast<uint8_t>(x)));
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(b.decode(cps[0]), x);
  }
  EXPECT_EQ(b.decode(' '), -1);
  EXPECT_EQ(b.decode(0x4E2D), -1);
}

TEST(Bpe, MergesByRankNotPosition) {
  MemoryVocab m;
  const int32_t bc = m.merge("b", "c");  // rank 0
  m.merge("a", "b");                     // rank 1: never applies to "abc"
  const Bpe b(m.v.tokens, m.v.merges);
  EXPECT_EQ(enc(b, "abc"), (std::vector<int32_t>{'a', bc}));
  EXPECT_EQ(b.merge_rank(bl("b"), bl("c")), 0);
  EXPECT_EQ(b.merge_rank(bl("c"), bl("b")), -1);
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  MemoryVocab m;
  const int32_t aa = m.merge("a", "a");
  const Bpe b(m.v.tokens, m.v.merges);
  EXPECT_EQ(enc(b, "aaa"), (std::vector<int32_t>{aa, 'a'}));
  EXPECT_EQ(enc(b, "aaaa"), (std::vector<int32_t>{aa, aa}));
}

TEST(Bpe, ChainsOfMerges) {
  MemoryVocab m;
  m.merge("h", "e");
  m.merge("l", "l");
  m.merge("he", "ll");
  const int32_t hello = m.merge("hell", "o");
  const int32_t sp_w = m.merge(" ", "w");
  const Bpe b(m.v.tokens, m.v.merges);
  EXPECT_EQ(enc(b, "hello"), (std::vector<int32_t>{hello}));
  EXPECT_EQ(enc(b, "hellol"), (std::vector<int32_t>{hello, 'l'}));
  EXPECT_EQ(enc(b, " wx"), (std::vector<int32_t>{sp_w, 'x'}));
  // Repeated calls hit the word cache and give the same answer.
  EXPECT_EQ(enc(b, "hello"), (std::vector<int32_t>{hello}));
}

TEST(Bpe, StalePairsAreSkipped) {
  // "abcd": pairs (b c)=0, (a b)=1, (c d)=2, (a bc)=3. After b+c, "a b" and "c d" are stale;
  // a+bc applies; d stays.
  MemoryVocab m;
  const int32_t bc = m.merge("b", "c");
  m.merge("a", "b");
  m.merge("c", "d");
  const int32_t abc = m.merge("a", "bc");
  (void)bc;
  const Bpe b(m.v.tokens, m.v.merges);
  EXPECT_EQ(enc(b, "abcd"), (std::vector<int32_t>{abc, 'd'}));
}

TEST(Bpe, MissingMergedPieceFallsBackToBytes) {
  MemoryVocab m;
  m.merge("x", "y", /*add_token=*/false);  // merges, but "xy" has no token
  // A two-byte character merged into a piece with no token: its alphabet text is 2 UTF-8 bytes
  // per symbol, and llama.cpp looks up each of those bytes alone -- they have no token, so
  // they vanish. Ferry reproduces that.
  m.merge("\xC3", "\xA9", /*add_token=*/false);
  const Bpe b(m.v.tokens, m.v.merges);
  EXPECT_EQ(enc(b, "xy"), (std::vector<int32_t>{'x', 'y'}));
  EXPECT_EQ(enc(b, "\xC3\xA9"), std::vector<int32_t>{});
}

TEST(Bpe, DuplicatesFollowLlamaCpp) {
  MemoryVocab m;
  const int32_t first = m.merge("a", "b");
  m.v.merges.push_back(bl("a") + " " + bl("b"));           // again, later rank: ignored
  const int32_t dup = m.add(bl("ab"), TokenType::normal);  // same text again: the last id wins
  const Bpe b(m.v.tokens, m.v.merges);
  EXPECT_NE(first, dup);
  EXPECT_EQ(b.merge_rank(bl("a"), bl("b")), 0);
  EXPECT_EQ(enc(b, "ab"), (std::vector<int32_t>{dup}));
  EXPECT_EQ(b.token_id(bl("ab")), dup);
}

// Reference: repeatedly merge the lowest-rank adjacent pair (leftmost on ties), O(n^2).
std::vector<std::string> naive_bpe(const std::vector<std::string>& syms_in, const Bpe& b) {
  std::vector<std::string> s = syms_in;
  for (;;) {
    int best = -1;
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const int32_t r = b.merge_rank(s[i], s[i + 1]);
      if (r >= 0 && r < best_rank) {
        best_rank = r;
        best = static_cast<int>(i);
      }
    }
    if (best < 0) return s;
    s[best] += s[best + 1];
    s.erase(s.begin() + best + 1);
  }
}

TEST(Bpe, AgreesWithNaiveReferenceOnRandomWords) {
  std::mt19937 g(5);
  MemoryVocab m;
  // Random merges over a 4-letter alphabet, built bottom-up so every merged piece exists.
  std::vector<std::string> pieces = {"a", "b", "c", "d"};
  std::uniform_int_distribution<int> coin(0, 1);
  for (int i = 0; i < 60; ++i) {
    std::uniform_int_distribution<size_t> pick(0, pieces.size() - 1);
    const std::string l = pieces[pick(g)], r = pieces[pick(g)];
    if (l.size() + r.size() > 6) continue;
    m.merge(l, r, /*add_token=*/true);
    pieces.push_back(l + r);
  }
  const Bpe b(m.v.tokens, m.v.merges);
  std::uniform_int_distribution<int> letter(0, 3), len(1, 30);
  for (int t = 0; t < 500; ++t) {
    std::string w;
    for (int i = 0, n = len(g); i < n; ++i) w += static_cast<char>('a' + letter(g));
    std::vector<std::string> syms;
    for (char c : w) syms.push_back(bl(std::string(1, c)));
    std::vector<int32_t> want;
    for (const auto& piece : naive_bpe(syms, b)) want.push_back(*b.token_id(piece));
    ASSERT_EQ(enc(b, w), want) << w;
  }
}

}  // namespace
}  // namespace ferry::tok
