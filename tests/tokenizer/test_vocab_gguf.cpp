// Reading tokenizer metadata from GGUF files written with Ferry's writer: the loaded tokenizer
// equals the in-memory one, and bad or missing metadata is a clear error naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "tests/tokenizer/memory_vocab.hpp"

namespace ferry {
namespace {

using gguf::Value;

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::path(FERRY_BINARY_DIR) / "test-tmp" / "tokenizer";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

test::MemoryVocab sample_vocab() {
  test::MemoryVocab m;
  m.merge("h", "e");
  m.merge("l", "l");
  m.merge("he", "ll");
  m.merge("hell", "o");
  m.merge(" ", "w");
  m.add("<|endoftext|>", TokenType::control);
  m.add("<|im_start|>", TokenType::control);
  m.add("<|im_end|>", TokenType::control);
  return m;
}

// Writes the vocabulary's metadata; edit may change or drop keys first.
std::string write_vocab(
    const std::string& name, const test::MemoryVocab& m,
    const std::function<void(std::vector<std::pair<std::string, Value>>&)>& edit = {}) {
  std::vector<std::pair<std::string, Value>> kv = {
      {"general.architecture", Value::str("qwen3moe")},
      {"tokenizer.ggml.model", Value::str("gpt2")},
      {"tokenizer.ggml.pre", Value::str("qwen2")},
      {"tokenizer.ggml.tokens", Value::arr_str(m.v.tokens)},
      {"tokenizer.ggml.token_type", Value::arr_i32(m.v.token_types)},
      {"tokenizer.ggml.merges", Value::arr_str(m.v.merges)},
      {"tokenizer.ggml.eos_token_id", Value::u32(static_cast<uint32_t>(m.v.tokens.size() - 1))},
      {"tokenizer.ggml.bos_token_id", Value::u32(static_cast<uint32_t>(m.v.tokens.size() - 3))},
      {"tokenizer.ggml.add_bos_token", Value::boolean(true)},
  };
  if (edit) edit(kv);
  const std::string path = temp_path(name);
  gguf::Writer w(path);
  for (auto& [k, v] : kv) w.set(k, v);
  w.finish();
  return path;
}

void drop(std::vector<std::pair<std::string, Value>>& kv, const std::string& key) {
  std::erase_if(kv, [&](const auto& e) { return e.first == key; });
}

TEST(VocabGguf, LoadsLikeTheInMemoryVocabulary) {
  const auto m = sample_vocab();
  const gguf::File f = gguf::File::open(write_vocab("ok.gguf", m));
  const Tokenizer t = Tokenizer::from_gguf(f);
  const int32_t n = static_cast<int32_t>(m.v.tokens.size());
  EXPECT_EQ(t.n_vocab(), n);
  EXPECT_EQ(t.eos(), n - 1);
  EXPECT_EQ(t.bos(), n - 3);
  EXPECT_TRUE(t.add_bos_token());
  EXPECT_EQ(t.pre(), "qwen2");
  const auto ids = t.encode("<|im_start|>hello world<|im_end|>", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{n - 3, n - 2, *t.token_id("hello"),
                                       *t.token_id(test::bl(" w")), 'o', 'r', 'l', 'd', n - 1}));
  EXPECT_EQ(t.token_type(n - 2), TokenType::control);
}

void expect_error(const std::string& name, ErrorKind kind, const std::string& needle,
                  const std::function<void(std::vector<std::pair<std::string, Value>>&)>& edit) {
  const std::string path = write_vocab(name, sample_vocab(), edit);
  const gguf::File f = gguf::File::open(path);
  try {
    Tokenizer::from_gguf(f);
    ADD_FAILURE() << name << ": loaded without error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << name << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << name << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos)
        << name << " not named: " << e.what();
  }
}

TEST(VocabGguf, BadMetadataIsAClearError) {
  expect_error("no_tokenizer.gguf", ErrorKind::unsupported, "tokenizer.ggml.model",
               [](auto& kv) { drop(kv, "tokenizer.ggml.model"); });
  expect_error("spm.gguf", ErrorKind::unsupported, "llama", [](auto& kv) {
    drop(kv, "tokenizer.ggml.model");
    kv.emplace_back("tokenizer.ggml.model", Value::str("llama"));
  });
  expect_error("pre.gguf", ErrorKind::unsupported, "gpt-4o", [](auto& kv) {
    drop(kv, "tokenizer.ggml.pre");
    kv.emplace_back("tokenizer.ggml.pre", Value::str("gpt-4o"));
  });
  expect_error("nopre.gguf", ErrorKind::unsupported, "tokenizer.ggml.pre",
               [](auto& kv) { drop(kv, "tokenizer.ggml.pre"); });
  expect_error("nomerges.gguf", ErrorKind::format, "merges",
               [](auto& kv) { drop(kv, "tokenizer.ggml.merges"); });
  expect_error("notokens.gguf", ErrorKind::format, "tokenizer.ggml.tokens",
               [](auto& kv) { drop(kv, "tokenizer.ggml.tokens"); });
  expect_error("types_str.gguf", ErrorKind::format, "token_type", [](auto& kv) {
    drop(kv, "tokenizer.ggml.token_type");
    kv.emplace_back("tokenizer.ggml.token_type", Value::arr_str({"1", "2"}));
  });
  expect_error("types_short.gguf", ErrorKind::format, "token_type", [](auto& kv) {
    drop(kv, "tokenizer.ggml.token_type");
    kv.emplace_back("tokenizer.ggml.token_type", Value::arr_i32({1, 1, 1}));
  });
  expect_error("bos_bad.gguf", ErrorKind::format, "bos", [](auto& kv) {
    drop(kv, "tokenizer.ggml.bos_token_id");
    kv.emplace_back("tokenizer.ggml.bos_token_id",
                    Value::u32(1u << 31));  // dropped → add_bos has no BOS
  });
}

}  // namespace
}  // namespace ferry
