// Synthetic vocabulary: GPT-2 byte mapping, the qwen2-like training split, BPE merges that are
// consistent with the token list, special tokens where Qwen puts them.
#include <gtest/gtest.h>

#include <set>
#include <unordered_set>

#include "runtime/core/error.hpp"
#include "runtime/synth/vocab.hpp"

namespace ferry::synth {
namespace {

TEST(SynthVocab, ByteToUnicodeMatchesGpt2) {
  EXPECT_EQ(byte_to_unicode('!'), "!");
  EXPECT_EQ(byte_to_unicode('a'), "a");
  EXPECT_EQ(byte_to_unicode(0), "\xC4\x80");     // U+0100 'Ā'
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode(0xAD), "\xC5\x83");  // soft hyphen is remapped: U+0143
  EXPECT_EQ(byte_to_unicode(0xFF), "\xC3\xBF");  // printable Latin-1 stays: U+00FF
  std::set<std::string> all;
  for (int b = 0; b < 256; ++b) all.insert(byte_to_unicode(static_cast<uint8_t>(b)));
  EXPECT_EQ(all.size(), 256u);
  // Token order: printable bytes first ('!' is token 0 in Qwen's vocabulary), then the rest.
  const auto& order = byte_token_order();
  ASSERT_EQ(order.size(), 256u);
  EXPECT_EQ(order[0], '!');
  EXPECT_EQ(order[93], '~');
  EXPECT_EQ(order[188], 0);
}

TEST(SynthVocab, PretokenizeSplitsLikeQwen2) {
  EXPECT_EQ(pretokenize("Hello, world's 12  x  += y\n\ndef f():"),
            (std::vector<std::string>{"Hello", ",", " world", "'s", " ", "1", "2", " ", " x", " ", " +=",
                                      " y", "\n\n", "def", " f", "():"}));
  // Every byte is kept, in order.
  const std::string text(training_corpus());
  std::string joined;
  for (const auto& p : pretokenize(text)) joined += p;
  EXPECT_EQ(joined, text);
}

TEST(SynthVocab, MergesAreConsistentWithTokens) {
  const BpeModel m = train_bpe(training_corpus(), 500);
  ASSERT_GE(m.merges.size(), 300u) << "the corpus should support a few hundred merges";
  std::unordered_set<std::string> tokens(m.tokens.begin(), m.tokens.end());
  EXPECT_EQ(tokens.size(), m.tokens.size()) << "duplicate token strings";
  for (const auto& mg : m.merges) {
    const size_t sp = mg.find(' ', 1);
    ASSERT_NE(sp, std::string::npos) << mg;
    const std::string l = mg.substr(0, sp), r = mg.substr(sp + 1);
    EXPECT_TRUE(tokens.count(l)) << "left part of merge '" << mg << "' is not a token";
    EXPECT_TRUE(tokens.count(r)) << "right part of merge '" << mg << "' is not a token";
    EXPECT_TRUE(tokens.count(l + r)) << "result of merge '" << mg << "' is not a token";
  }
  // Frequent English pieces are learned early.
  EXPECT_TRUE(tokens.count("\xC4\xA0the")) << "' the' should be a token";
  // Deterministic.
  const BpeModel again = train_bpe(training_corpus(), 500);
  EXPECT_EQ(again.merges, m.merges);
  EXPECT_EQ(again.tokens, m.tokens);
}

TEST(SynthVocab, SpecialTokensAndPadding) {
  const Vocab tiny = build_vocab(768, -1, 500);
  ASSERT_EQ(tiny.tokens.size(), 768u);
  ASSERT_EQ(tiny.token_types.size(), 768u);
  EXPECT_EQ(tiny.tokens[tiny.endoftext], "<|endoftext|>");
  EXPECT_EQ(tiny.tokens[tiny.im_start], "<|im_start|>");
  EXPECT_EQ(tiny.tokens[tiny.im_end], "<|im_end|>");
  EXPECT_EQ(tiny.im_start, tiny.endoftext + 1);
  EXPECT_EQ(tiny.token_types[tiny.im_end], kTokenControl);
  EXPECT_EQ(tiny.tokens[tiny.im_end + 1], "<tool_call>");
  EXPECT_EQ(tiny.tokens[tiny.im_end + 4], "</think>");
  EXPECT_EQ(tiny.token_types[tiny.im_end + 3], kTokenUserDefined);
  EXPECT_EQ(tiny.token_types[0], kTokenNormal);
  EXPECT_EQ(tiny.tokens[767], "[PAD767]");
  EXPECT_EQ(tiny.token_types[767], kTokenUnused);
  std::unordered_set<std::string> unique(tiny.tokens.begin(), tiny.tokens.end());
  EXPECT_EQ(unique.size(), tiny.tokens.size());

  const Vocab qwen3 = build_vocab(151936, 151643, 500);
  ASSERT_EQ(qwen3.tokens.size(), 151936u);
  EXPECT_EQ(qwen3.endoftext, 151643);
  EXPECT_EQ(qwen3.tokens[151645], "<|im_end|>");
  EXPECT_EQ(qwen3.tokens[151642], "[PAD151642]");
  EXPECT_EQ(qwen3.tokens[151646], "[PAD151646]");
  EXPECT_EQ(qwen3.tokens[151657], "<tool_call>");
  EXPECT_EQ(qwen3.tokens[151668], "</think>");
  EXPECT_EQ(qwen3.merges, tiny.merges);

  EXPECT_THROW(build_vocab(300, -1, 500), Error);      // too small for the BPE tokens
  EXPECT_THROW(build_vocab(151936, 151935, 500), Error);  // specials past the end
}

}  // namespace
}  // namespace ferry::synth
