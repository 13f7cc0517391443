// Ferry's tokenizer against llama.cpp's own test cases for the Qwen vocabularies
// (models/ggml-vocab-qwen2.gguf and ggml-vocab-qwen35.gguf with their .inp/.out files from the
// llama-cpp-python source distribution; run scripts/fetch-test-data.sh once).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/gguf/gguf.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "tests/tokenizer/vocab_cases.hpp"

namespace ferry {
namespace {

std::string show_ids(const std::vector<int32_t>& ids) {
  return fmt::format("[{}]", fmt::join(ids, ", "));
}

// Runs every case: encode with add_special = false, parse_special = false (test-tokenizer-0's
// settings), and checks decoding gives the text back. Returns the number of cases.
size_t run_cases(const std::string& name, const std::string& expect_pre) {
  const auto dir = test::vocab_dir();
  const auto gguf_path = dir / (name + ".gguf");
  const auto inp = dir / (name + ".gguf.inp");
  const auto out = dir / (name + ".gguf.out");
  for (const auto& p : {gguf_path, inp, out})
    if (!std::filesystem::exists(p)) {
      ADD_FAILURE()
          << p << " is missing: run scripts/fetch-test-data.sh (it downloads llama.cpp's tokenizer "
          << "test vocabularies into .cache/vocab/)";
      return 0;
    }
  const gguf::File f = gguf::File::open(gguf_path.string());
  const Tokenizer tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.pre(), expect_pre);
  const auto cases = test::read_vocab_cases(inp, out);
  EXPECT_GT(cases.size(), 30u);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::vector<int32_t> got = tok.encode(c.text, /*add_bos=*/false, /*parse_special=*/false);
    if (got == c.ids) ++passed;
    EXPECT_EQ(show_ids(got), show_ids(c.ids)) << name << " case " << i << ": '" << c.text << "'";
    // None of the cases holds special-token text, so parse_special must not change anything.
    EXPECT_EQ(tok.encode(c.text, false, true), c.ids)
        << name << " case " << i << " with parse_special";
    EXPECT_EQ(tok.decode(got), c.text) << name << " case " << i << " does not decode back";
  }
  std::printf("%s: %zu/%zu llama.cpp cases match\n", name.c_str(), passed, cases.size());
  return cases.size();
}

TEST(VocabQwen2, AllLlamaCppCasesMatch) {
  run_cases("ggml-vocab-qwen2", "qwen2");
}

TEST(VocabQwen35, AllLlamaCppCasesMatch) {
  // The qwen35 vocabulary is optional in scripts/fetch-test-data.sh (older llama.cpp releases
  // lack it); when the qwen2 one is present and this one is not, the sdist simply has none.
  if (!std::filesystem::exists(test::vocab_dir() / "ggml-vocab-qwen35.gguf") &&
      std::filesystem::exists(test::vocab_dir() / "ggml-vocab-qwen2.gguf"))
    GTEST_SKIP() << "this llama-cpp-python release ships no ggml-vocab-qwen35.gguf";
  run_cases("ggml-vocab-qwen35", "qwen35");
}

TEST(VocabQwen2, SpecialTokensAndIds) {
  const auto path = test::vocab_dir() / "ggml-vocab-qwen2.gguf";
  if (!std::filesystem::exists(path))
    FAIL() << path << " is missing: run scripts/fetch-test-data.sh";
  const gguf::File f = gguf::File::open(path.string());
  const Tokenizer tok = Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.n_vocab(), 151936);
  EXPECT_EQ(tok.eos(), 151643);
  EXPECT_EQ(tok.bos(), 151643);
  EXPECT_EQ(tok.pad(), 151643);
  EXPECT_EQ(tok.eot(), 151645);  // <|im_end|>, found by text as llama.cpp does
  EXPECT_FALSE(tok.add_bos_token());
  EXPECT_TRUE(tok.is_eog(151643));
  EXPECT_TRUE(tok.is_eog(151645));
  EXPECT_FALSE(tok.is_eog(151644));
  EXPECT_FALSE(tok.is_eog(9707));

  const std::string chat = format_chatml({{"user", "Hello"}});
  EXPECT_EQ(chat, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = tok.encode(chat);
  // <|im_start|> user \n Hello <|im_end|> \n <|im_start|> assistant \n
  EXPECT_EQ(ids, (std::vector<int32_t>{151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198}));
  EXPECT_EQ(tok.decode(ids), "user\nHello\nassistant\n");  // control tokens hidden
  EXPECT_EQ(tok.decode(ids, true), chat);
  // Without parse_special the markers are text; user-defined tokens ([PAD151650]) still match.
  const auto plain = tok.encode("<|im_start|>[PAD151650]", false, false);
  ASSERT_GE(plain.size(), 2u);
  EXPECT_EQ(plain.back(), 151650);
  EXPECT_EQ(tok.decode(plain), "<|im_start|>[PAD151650]");  // user-defined tokens always render
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 151644), 0);
  // add_bos follows the vocabulary: Qwen does not ask for BOS.
  EXPECT_EQ(tok.encode("Hello", true), (std::vector<int32_t>{9707}));
}

// Several threads share one Tokenizer (and its word cache): results equal the serial ones.
// Also reports load time and throughput on ~1 MB of the cases' mixed-script text.
TEST(VocabQwen2, ConcurrentEncodeAndThroughput) {
  const auto dir = test::vocab_dir();
  if (!std::filesystem::exists(dir / "ggml-vocab-qwen2.gguf"))
    FAIL() << "run scripts/fetch-test-data.sh (.cache/vocab/ggml-vocab-qwen2.gguf is missing)";
  const auto t0 = std::chrono::steady_clock::now();
  const gguf::File f = gguf::File::open((dir / "ggml-vocab-qwen2.gguf").string());
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const auto cases =
      test::read_vocab_cases(dir / "ggml-vocab-qwen2.gguf.inp", dir / "ggml-vocab-qwen2.gguf.out");
  std::vector<std::string> texts;
  for (const auto& c : cases) texts.push_back(c.text + "<|im_end|>\n");
  std::vector<std::vector<int32_t>> serial;
  for (const auto& t : texts) serial.push_back(tok.encode(t));

  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          bad[w] +=
              tok.encode(texts[(i + w * 7) % texts.size()]) != serial[(i + w * 7) % texts.size()];
    });
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(bad[w], 0) << "thread " << w;

  std::string big;
  while (big.size() < (1u << 20))
    for (const auto& c : cases) big += c.text + " ";
  const auto t1 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(big, false, false);
  const double enc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_EQ(tok.decode(ids), big);
  std::printf("qwen2 vocab: load %.0f ms; encode %.2f MB/s (%zu bytes -> %zu tokens)\n", load_ms,
              big.size() / enc_s / 1e6, big.size(), ids.size());
}

}  // namespace
}  // namespace ferry
