// `ferry dump` end to end: a GGUF written byte by byte here (independently of the project's
// writer), dumped to .npy and to statistics by the built `ferry` binary, compared with the
// reference dequantizer. Skipped when the binary has not been built.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "kernel_test_util.hpp"

using namespace ferry;
using namespace ferry::test;
namespace fs = std::filesystem;

namespace {

struct Tensor {
  std::string name;
  GgmlType type;
  std::vector<uint64_t> ne;   // ne[0] fastest
  std::vector<uint8_t> data;  // quantized rows
  std::vector<float> values;  // dequantized with the reference, row-major over ne
};

void put(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
template <typename T>
void put(std::string& out, T v) { put(out, &v, sizeof v); }
void put_str(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// GGUF v3, alignment 32, one string KV (general.architecture).
void write_gguf(const fs::path& path, const std::vector<Tensor>& tensors) {
  std::string h;
  put(h, "GGUF", 4);
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors.size());
  put<uint64_t>(h, 1);
  put_str(h, "general.architecture");
  put<uint32_t>(h, 8);  // string
  put_str(h, "dumptest");
  uint64_t offset = 0;
  for (const Tensor& t : tensors) {
    put_str(h, t.name);
    put<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(h, d);
    put<uint32_t>(h, static_cast<uint32_t>(t.type));
    put<uint64_t>(h, offset);
    offset += (t.data.size() + 31) / 32 * 32;
  }
  h.append((32 - h.size() % 32) % 32, '\0');
  for (const Tensor& t : tensors) {
    put(h, t.data.data(), t.data.size());
    h.append((32 - t.data.size() % 32) % 32, '\0');
  }
  std::ofstream(path, std::ios::binary).write(h.data(), static_cast<std::streamsize>(h.size()));
}

Tensor make_tensor(std::mt19937& rng, std::string name, GgmlType t, std::vector<uint64_t> ne) {
  Tensor out{std::move(name), t, std::move(ne), {}, {}};
  uint64_t rows = 1;
  for (size_t i = 1; i < out.ne.size(); ++i) rows *= out.ne[i];
  const auto cols = static_cast<int64_t>(out.ne[0]);
  for (uint64_t r = 0; r < rows; ++r) {
    const auto q = quantize(t, random_weights(rng, cols));
    out.data.insert(out.data.end(), q.begin(), q.end());
    const auto d = dequantize(t, q.data(), cols);
    out.values.insert(out.values.end(), d.begin(), d.end());
  }
  return out;
}

std::string ferry_binary() { return std::string(FERRY_BINARY_DIR) + "/ferry"; }

int run(const std::string& cmd, std::string* stdout_text = nullptr) {
  std::FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    if (stdout_text) stdout_text->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Reads a float32 C-order .npy; returns the shape text from the header.
std::string read_npy(const fs::path& path, std::vector<float>& values) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const size_t hlen = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
  const std::string header = bytes.substr(10, hlen);
  EXPECT_EQ((10 + hlen) % 64, 0u) << "header must be padded to 64 bytes";
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
  values.resize((bytes.size() - 10 - hlen) / 4);
  std::memcpy(values.data(), bytes.data() + 10 + hlen, values.size() * 4);
  const size_t a = header.find("'shape': (");
  return header.substr(a + 10, header.find(')', a) - a - 10);
}

class DumpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(ferry_binary())) GTEST_SKIP() << ferry_binary() << " not built";
    dir_ = fs::temp_directory_path() / ("ferry_dump_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::mt19937 rng(51);
    tensors_.push_back(make_tensor(rng, "blk.0.ffn_down_exps.weight", GgmlType::Q4_K, {512, 3, 2}));
    tensors_.push_back(make_tensor(rng, "blk.0.attn_q.weight", GgmlType::Q6_K, {256, 5}));
    tensors_.push_back(make_tensor(rng, "token_embd.weight", GgmlType::Q8_0, {64, 7}));
    tensors_.push_back(make_tensor(rng, "output_norm.weight", GgmlType::F16, {33}));
    tensors_.push_back(make_tensor(rng, "blk.0.ffn_up.weight", GgmlType::Q5_K, {256, 2}));
    Tensor iq2{"blk.0.iq2_xxs.weight", GgmlType::IQ2_XXS, {256}, std::vector<uint8_t>(66, 0x11), {}};
    tensors_.push_back(iq2);
    gguf_ = dir_ / "model.gguf";
    write_gguf(gguf_, tensors_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path dir_, gguf_;
  std::vector<Tensor> tensors_;
};

}  // namespace

TEST_F(DumpCli, WritesNpyInTorchOrderBitExact) {
  const std::pair<size_t, const char*> expected_shapes[] = {
      {0, "2, 3, 512"}, {1, "5, 256"}, {2, "7, 64"}, {3, "33,"}, {4, "2, 256"}};
  for (auto [i, shape] : expected_shapes) {
    const Tensor& t = tensors_[i];
    const fs::path out = dir_ / (t.name + ".npy");
    ASSERT_EQ(run(ferry_binary() + " dump -m " + gguf_.string() + " -t " + t.name + " -o " + out.string()), 0)
        << t.name;
    std::vector<float> got;
    EXPECT_EQ(read_npy(out, got), shape) << t.name;
    ASSERT_EQ(got.size(), t.values.size()) << t.name;
    EXPECT_EQ(0, std::memcmp(got.data(), t.values.data(), got.size() * 4)) << t.name;
    EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
  }
}

TEST_F(DumpCli, PrintsStatistics) {
  const Tensor& t = tensors_[1];
  std::string text;
  ASSERT_EQ(run(ferry_binary() + " dump -m " + gguf_.string() + " -t " + t.name, &text), 0);
  double mean = 0, m2 = 0;
  float mn = t.values[0], mx = t.values[0];
  for (float v : t.values) {
    mean += v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  mean /= static_cast<double>(t.values.size());
  for (float v : t.values) m2 += (v - mean) * (v - mean);
  const double sd = std::sqrt(m2 / static_cast<double>(t.values.size()));
  auto field = [&](const std::string& key) {
    const size_t p = text.find("\n" + key);
    EXPECT_NE(p, std::string::npos) << key << " missing in:\n" << text;
    return p == std::string::npos ? NAN : std::stod(text.substr(p + 1 + key.size()));
  };
  EXPECT_NE(text.find("type   Q6_K"), std::string::npos) << text;
  EXPECT_NE(text.find("shape  (5, 256)"), std::string::npos) << text;
  EXPECT_EQ(static_cast<float>(field("min")), mn);  // %.9g round-trips a float
  EXPECT_EQ(static_cast<float>(field("max")), mx);
  EXPECT_NEAR(field("mean"), mean, 1e-7 * std::fabs(sd));
  EXPECT_NEAR(field("std"), sd, 1e-7 * sd);
}

TEST_F(DumpCli, ClearErrors) {
  EXPECT_EQ(run(ferry_binary() + " dump -m " + gguf_.string() + " -t no.such.tensor"), 1);
  EXPECT_EQ(run(ferry_binary() + " dump -m " + gguf_.string() + " -t blk.0.iq2_xxs.weight"), 1);  // unsupported
  EXPECT_EQ(run(ferry_binary() + " dump -m " + (dir_ / "missing.gguf").string() + " -t x"), 1);
  EXPECT_EQ(run(ferry_binary() + " dump -t x"), 2);  // -m is required
  // a failed dump leaves no output behind
  const fs::path out = dir_ / "bad.npy";
  EXPECT_EQ(run(ferry_binary() + " dump -m " + gguf_.string() + " -t blk.0.iq2_xxs.weight -o " + out.string()), 1);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
}
