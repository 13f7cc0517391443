// The qwen2/qwen35 pre-tokenizer splits: regex semantics on hand-derived cases, llama.cpp's
// whitespace set and Unicode tables (the delta over PCRE2's), invalid UTF-8, long inputs.
#include <gtest/gtest.h>

#include <random>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/pretokenizer.hpp"
#include "runtime/tokenizer/unicode.hpp"

namespace ferry::tok {
namespace {

using Words = std::vector<std::string>;

Words split(PreKind k, std::string_view s) {
  return PreTokenizer(k).split(s);
}

TEST(PreTokenizer, KnownNames) {
  EXPECT_EQ(pre_kind_from_name("qwen2"), PreKind::qwen2);
  EXPECT_EQ(pre_kind_from_name("deepseek-r1-qwen"), PreKind::qwen2);
  EXPECT_EQ(pre_kind_from_name("qwen35"), PreKind::qwen35);
  EXPECT_FALSE(pre_kind_from_name("llama3"));
  EXPECT_FALSE(pre_kind_from_name(""));
  EXPECT_FALSE(pre_kind_from_name("Qwen2"));
}

TEST(PreTokenizer, Qwen2Basics) {
  const auto k = PreKind::qwen2;
  EXPECT_EQ(split(k, "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split(k, "  Hello"), (Words{" ", " Hello"}));
  EXPECT_EQ(split(k, "a  \n\n b"), (Words{"a", "  \n\n", " b"}));
  EXPECT_EQ(split(k, "3333"), (Words{"3", "3", "3", "3"}));
  EXPECT_EQ(split(k, "it's IT'S we'll"), (Words{"it", "'s", " IT", "'S", " we", "'ll"}));
  EXPECT_EQ(split(k, "hello!!!\n\nworld"), (Words{"hello", "!!!\n\n", "world"}));
  EXPECT_EQ(split(k, "x   "), (Words{"x", "   "}));
  EXPECT_EQ(split(k, "\t\tx"), (Words{"\t", "\tx"}));
  EXPECT_EQ(split(k, " ("), (Words{" ("}));
  EXPECT_EQ(split(k, "\n ="), (Words{"\n", " ="}));
  EXPECT_EQ(split(k, "' era"), (Words{"'", " era"}));
  EXPECT_EQ(split(k, "w048 7tuijk"), (Words{"w", "0", "4", "8", " ", "7", "tuijk"}));
  EXPECT_EQ(split(k, ""), Words{});
}

TEST(PreTokenizer, LlamaCppWhitespaceSet) {
  const auto k = PreKind::qwen2;
  // U+3000 and U+0085 are whitespace for llama.cpp.
  EXPECT_EQ(split(k, "a\u3000\u3000b"), (Words{"a", "\u3000", "\u3000b"}));
  EXPECT_EQ(split(k, "a\u0085\u0085b"), (Words{"a", "\u0085", "\u0085b"}));
  // U+001C is whitespace to Python but not to llama.cpp: it is a prefix like punctuation.
  EXPECT_EQ(split(k,
                  "a\x1C"
                  "b"),
            (Words{"a",
                   "\x1C"
                   "b"}));
  // U+200B (format) is not whitespace either.
  EXPECT_EQ(split(k, "a\u200B\u200B"), (Words{"a", "\u200B\u200B"}));
}

TEST(PreTokenizer, UnicodeTablesFollowLlamaCpp) {
  // Code points newer than PCRE2 10.42's Unicode 14 tables, which llama.cpp classifies.
  // U+1E4F0.. Nag Mundari digits (N): each digit is a word of its own.
  EXPECT_EQ(split(PreKind::qwen2, "x\U0001E4F0\U0001E4F1"),
            (Words{"x", "\U0001E4F0", "\U0001E4F1"}));
  // U+31350 CJK extension H (L): joins the letter run.
  EXPECT_EQ(split(PreKind::qwen2, "a\U00031350"), (Words{"a\U00031350"}));
  // U+0CF3 Kannada sign (M): part of a letter run only for qwen35.
  EXPECT_EQ(split(PreKind::qwen35, "a\u0CF3"), (Words{"a\u0CF3"}));
  EXPECT_EQ(split(PreKind::qwen2, "a\u0CF3"), (Words{"a", "\u0CF3"}));
  std::printf("PCRE2 Unicode tables: %s\n", pcre2_unicode_version().c_str());
}

TEST(PreTokenizer, Qwen35KeepsCombiningMarksInWords) {
  EXPECT_EQ(split(PreKind::qwen35, "e\u0301x r\u00E9sum\u00E9"),
            (Words{"e\u0301x", " r\u00E9sum\u00E9"}));
  EXPECT_EQ(split(PreKind::qwen2, "e\u0301x"), (Words{"e", "\u0301x"}));
  // A mark after punctuation: the punctuation rule stops before it in qwen35.
  EXPECT_EQ(split(PreKind::qwen35, "!\u0301"), (Words{"!\u0301"}));  // prefix + mark run
  EXPECT_EQ(split(PreKind::qwen2, "!\u0301"), (Words{"!\u0301"}));   // punctuation run
}

TEST(PreTokenizer, InvalidUtf8BecomesReplacementCharacters) {
  const auto k = PreKind::qwen2;
  EXPECT_EQ(split(k,
                  "a\xFF"
                  "b"),
            (Words{"a",
                   "\xEF\xBF\xBD"
                   "b"}));
  // A surrogate decodes (as in llama.cpp) and is kept as its 3 bytes.
  EXPECT_EQ(split(k,
                  "a\xED\xA0\x80"
                  "b"),
            (Words{"a",
                   "\xED\xA0\x80"
                   "b"}));
  // Overlong '/' decodes to '/'.
  EXPECT_EQ(split(k,
                  "a\xC0\xAF"
                  "b"),
            (Words{"a", "/b"}));
  // Truncated sequence at the end.
  EXPECT_EQ(split(k, "ab\xE2\x82"), (Words{"ab", "\xEF\xBF\xBD\xEF\xBF\xBD"}));
}

TEST(PreTokenizer, LongRunsDoNotExhaustTheMatcher) {
  const auto k = PreKind::qwen35;
  const std::string letters(1 << 20, 'a');
  EXPECT_EQ(split(k, letters), (Words{letters}));
  const std::string spaces(200000, ' ');
  EXPECT_EQ(split(k, spaces + "x"), (Words{std::string(199999, ' '), " x"}));
  const std::string bangs(300000, '!');
  EXPECT_EQ(split(k, bangs), (Words{bangs}));
  const std::string nl = std::string(100000, ' ') + std::string(100000, '\n');
  EXPECT_EQ(split(k, nl), (Words{nl}));
}

std::string random_text(std::mt19937& g, size_t n_cps) {
  static const std::vector<uint32_t> pool = {
      'a',     'Z',     ' ',    ' ',    '\n',    '\r',    '\t',   '0',    '7',    '\'',
      's',     '!',     '.',    ',',    0xA0,    0x3000,  0x4E2D, 0x0416, 0x0301, 0x0CF3,
      0x1F600, 0x1F680, 0x200D, 0xFE0F, 0x1E4F0, 0x31350, 0x0E01, 0x05D0, 0x1C};
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::string s;
  for (size_t i = 0; i < n_cps; ++i) append_utf8(s, pool[pick(g)]);
  return s;
}

TEST(PreTokenizer, WordsConcatenateToTheText) {
  std::mt19937 g(123);
  for (PreKind k : {PreKind::qwen2, PreKind::qwen35}) {
    const PreTokenizer pt(k);
    for (int i = 0; i < 300; ++i) {
      const std::string s = random_text(g, 1 + i % 40);
      const auto words = pt.split(s);
      std::string joined;
      for (const auto& w : words) {
        EXPECT_FALSE(w.empty());
        joined += w;
      }
      ASSERT_EQ(joined, s);
    }
  }
}

}  // namespace
}  // namespace ferry::tok
