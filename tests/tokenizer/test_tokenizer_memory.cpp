// Tokenizer on in-memory vocabularies: special-token partitioning (longest first, parse_special,
// user-defined tokens), rendering, end-of-generation ids, load errors, TextStream, ChatML.
#include <gtest/gtest.h>

#include <random>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "runtime/tokenizer/unicode.hpp"
#include "tests/tokenizer/memory_vocab.hpp"

namespace ferry {
namespace {

using test::bl;
using test::MemoryVocab;
using Ids = std::vector<int32_t>;

struct Specials {
  MemoryVocab m;
  int32_t im_start, im_end, eot_text, ud, ud_long, hello, he;
  Specials() {
    he = m.merge("h", "e");
    m.merge("l", "l");
    m.merge("he", "ll");
    hello = m.merge("hell", "o");
    eot_text = m.add("<|endoftext|>", TokenType::control);
    im_start = m.add("<|im_start|>", TokenType::control);
    im_end = m.add("<|im_end|>", TokenType::normal);  // mislabelled: becomes control by its text
    ud = m.add("<tool>", TokenType::user_defined);
    ud_long = m.add("<tool>x", TokenType::user_defined);
    m.v.eos = eot_text;
  }
  Tokenizer tok() { return Tokenizer::from_vocab(m.v); }
};

TEST(TokenizerMemory, SpecialTokensSplitTheText) {
  Specials s;
  const Tokenizer t = s.tok();
  EXPECT_EQ(t.encode("<|im_start|>hello<|im_end|>"), (Ids{s.im_start, s.hello, s.im_end}));
  EXPECT_EQ(t.encode("hello<|im_start|><|im_start|>"), (Ids{s.hello, s.im_start, s.im_start}));
  // Longest first: "<tool>x" wins over "<tool>" followed by x.
  EXPECT_EQ(t.encode("<tool>x<tool>"), (Ids{s.ud_long, s.ud}));
  // Without parse_special control tokens are text; user-defined ones still match.
  const Ids plain = t.encode("<|im_start|><tool>", false, false);
  EXPECT_EQ(plain.back(), s.ud);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), s.im_start), 0);
  EXPECT_EQ(t.decode(plain), "<|im_start|><tool>");
  // A special token inside a word cuts it.
  EXPECT_EQ(t.encode("hel<|im_end|>lo"), (Ids{s.he, 'l', s.im_end, 'l', 'o'}));
}

TEST(TokenizerMemory, RenderingAndEndOfGeneration) {
  Specials s;
  const Tokenizer t = s.tok();
  EXPECT_EQ(t.token_bytes(s.im_start), "");
  EXPECT_EQ(t.token_bytes(s.im_start, true), "<|im_start|>");
  EXPECT_EQ(t.token_bytes(s.ud), "<tool>");  // user-defined: always rendered
  EXPECT_EQ(t.token_bytes(s.im_end), "");    // made control because of its text
  EXPECT_TRUE(t.is_control(s.im_end));
  EXPECT_EQ(t.token_bytes(' '), " ");
  EXPECT_EQ(t.eos(), s.eot_text);
  EXPECT_EQ(t.eot(), s.im_end);  // found by text: <|im_end|> precedes <|endoftext|> in the list
  EXPECT_TRUE(t.is_eog(s.im_end));
  EXPECT_TRUE(t.is_eog(s.eot_text));
  EXPECT_FALSE(t.is_eog(s.im_start));
  EXPECT_FALSE(t.is_eog(-1));
  EXPECT_EQ(t.bos(), -1);
  EXPECT_THROW(t.token_bytes(t.n_vocab()), Error);
  EXPECT_THROW(t.token_bytes(-1), Error);
  EXPECT_EQ(t.token_id("<tool>"), s.ud);
  EXPECT_FALSE(t.token_id("nope").has_value());
}

TEST(TokenizerMemory, AddBosFollowsTheVocabulary) {
  Specials s;
  s.m.v.bos = s.eot_text;
  EXPECT_EQ(s.tok().encode("hello", true), (Ids{s.hello}));  // add_bos_token absent
  s.m.v.add_bos = true;
  s.m.v.add_eos = true;
  const Tokenizer t = s.tok();
  EXPECT_EQ(t.encode("hello", true), (Ids{s.eot_text, s.hello, s.eot_text}));
  EXPECT_EQ(t.encode("hello", false), (Ids{s.hello}));
  EXPECT_EQ(t.encode("", true), (Ids{s.eot_text, s.eot_text}));
}

TEST(TokenizerMemory, LoadErrors) {
  Specials s;
  auto v = s.m.v;
  v.model = "llama";
  try {
    Tokenizer::from_vocab(v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos);
  }
  v = s.m.v;
  v.pre = "llama3";
  v.source = "model.gguf";
  try {
    Tokenizer::from_vocab(v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("llama3"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("model.gguf"), std::string::npos);
  }
  v = s.m.v;
  v.token_types.resize(10);
  EXPECT_THROW(Tokenizer::from_vocab(v), Error);
  v = s.m.v;
  v.add_bos = true;  // no bos id
  EXPECT_THROW(Tokenizer::from_vocab(v), Error);
  v = s.m.v;
  v.tokens.clear();
  v.token_types.clear();
  EXPECT_THROW(Tokenizer::from_vocab(v), Error);
  // Out-of-range ids are dropped (as llama.cpp), not fatal.
  v = s.m.v;
  v.eos = 1 << 30;
  EXPECT_EQ(Tokenizer::from_vocab(v).eos(), -1);
}

TEST(TokenizerMemory, RoundTripOnRandomBytes) {
  Specials s;
  const Tokenizer t = s.tok();
  std::mt19937 g(11);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 60);
  for (int i = 0; i < 300; ++i) {
    std::string text;
    // Valid UTF-8 only (invalid bytes are replaced by U+FFFD, as llama.cpp does).
    for (int j = 0, n = len(g); j < n; ++j)
      tok::append_utf8(text,
                       static_cast<uint32_t>(byte(g) < 200 ? byte(g) % 128 : 0x400 + byte(g)));
    ASSERT_EQ(t.decode(t.encode(text, false, false)), text);
  }
  EXPECT_EQ(t.decode(t.encode("a\xFF")), "a\xEF\xBF\xBD");
}

TEST(TextStream, HoldsIncompleteUtf8) {
  Specials s;
  const Tokenizer t = s.tok();
  TextStream ts(t);
  // "é" = C3 A9 as two byte tokens; "😀" = F0 9F 98 80.
  EXPECT_EQ(ts.push('a'), "a");
  EXPECT_EQ(ts.push(0xC3), "");
  EXPECT_EQ(ts.push(0xA9), "\xC3\xA9");
  EXPECT_EQ(ts.push(0xF0), "");
  EXPECT_EQ(ts.push(0x9F), "");
  EXPECT_EQ(ts.push(0x98), "");
  EXPECT_EQ(ts.push(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(ts.push(s.im_start), "");  // control, not rendered
  EXPECT_EQ(ts.push(0xE2), "");
  EXPECT_EQ(ts.flush(), "\xE2");  // whatever is left
  EXPECT_EQ(ts.flush(), "");
  // Malformed bytes pass through instead of being held forever.
  EXPECT_EQ(ts.push(0x80), "\x80");
  EXPECT_EQ(ts.push(0xFF), "\xFF");
  TextStream special(t, true);
  EXPECT_EQ(special.push(s.im_start), "<|im_start|>");
}

TEST(TextStream, StreamedEqualsDecoded) {
  Specials s;
  const Tokenizer t = s.tok();
  std::mt19937 g(3);
  std::uniform_int_distribution<int32_t> id(0, t.n_vocab() - 1);
  for (int i = 0; i < 200; ++i) {
    std::vector<int32_t> ids(1 + i % 17);
    for (auto& x : ids) x = id(g);
    TextStream ts(t);
    std::string streamed;
    for (int32_t x : ids) streamed += ts.push(x);
    streamed += ts.flush();
    ASSERT_EQ(streamed, t.decode(ids));
  }
}

TEST(ChatMl, Format) {
  EXPECT_EQ(format_chatml({{"system", "Be brief."}, {"user", "Hi"}}),
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(format_chatml({{"user", "Hi"}}, false), "<|im_start|>user\nHi<|im_end|>\n");
}

}  // namespace
}  // namespace ferry
