#pragma once
// Loads llama.cpp's tokenizer test vocabularies and their cases (.inp/.out) from
// ${FERRY_SOURCE_DIR}/.cache/vocab/, where scripts/fetch-test-data.sh puts them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace ferry::test {

inline std::filesystem::path vocab_dir() {
  return std::filesystem::path(FERRY_SOURCE_DIR) / ".cache" / "vocab";
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The .inp file holds the texts separated by "\n__ggml_vocab_test__\n" (the last one ends with
// that separator too); the .out file one line of space-separated ids per text. Same parsing as
// llama.cpp's tests/test-tokenizer-0.cpp.
inline std::vector<VocabCase> read_vocab_cases(const std::filesystem::path& inp,
                                               const std::filesystem::path& out) {
  const std::string raw = slurp(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines;
  std::istringstream os(slurp(out));
  for (std::string line; std::getline(os, line);) lines.push_back(line);
  EXPECT_EQ(texts.size(), lines.size())
      << inp << " and " << out << " disagree on the number of cases";
  std::vector<VocabCase> cases;
  for (size_t i = 0; i < std::min(texts.size(), lines.size()); ++i) {
    VocabCase c{texts[i], {}};
    std::istringstream ls(lines[i]);
    for (int32_t id; ls >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace ferry::test
