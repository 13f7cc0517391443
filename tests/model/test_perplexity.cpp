// llama-perplexity's scoring (runtime/engine/perplexity.hpp) against direct float64 formulas on
// random logits, and its log-probability file: round trip, and refusal of bad files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/core/error.hpp"
#include "runtime/engine/perplexity.hpp"

namespace ferry {
namespace {

std::vector<float> random_logits(std::mt19937& rng, int n, float spread) {
  std::normal_distribution<float> d(0.f, spread);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<double> log_softmax64(const std::vector<float>& l) {
  double m = l[0];
  for (float x : l) m = std::max(m, static_cast<double>(x));
  double s = 0;
  for (float x : l) s += std::exp(x - m);
  std::vector<double> out(l.size());
  for (size_t i = 0; i < l.size(); ++i) out[i] = l[i] - m - std::log(s);
  return out;
}

TEST(Perplexity, TokenNllIsTheNegativeLogSoftmax) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const auto l = random_logits(rng, 1000 + trial * 37, 3.f);
    const int32_t tok = static_cast<int32_t>(rng() % l.size());
    const double want = -log_softmax64(l)[static_cast<size_t>(tok)];
    EXPECT_NEAR(token_nll(l, tok), want, 1e-5 * std::max(1.0, want));
    std::vector<uint16_t> rec(static_cast<size_t>(logprob_record_u16(static_cast<int32_t>(l.size()))));
    EXPECT_NEAR(token_nll_packed(l, tok, rec.data()), want, 1e-4 * std::max(1.0, want));
  }
}

TEST(Perplexity, PackedRecordHoldsTheLogProbsWithin16OfTheTop) {
  std::mt19937 rng(12);
  const auto l = random_logits(rng, 777, 6.f);  // wide: some logits fall below max − 16
  std::vector<uint16_t> rec(static_cast<size_t>(logprob_record_u16(777)), 0xABCD);
  token_nll_packed(l, 0, rec.data());
  float scale, min_lp;
  std::memcpy(&scale, rec.data(), 4);
  std::memcpy(&min_lp, rec.data() + 2, 4);
  const auto lp = log_softmax64(l);
  const double top = *std::max_element(lp.begin(), lp.end());
  int below = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const double got = scale * rec[4 + i] + min_lp;
    if (lp[i] > top - 16) {
      EXPECT_NEAR(got, lp[i], scale * 0.51 + 1e-5) << i;
    } else {
      EXPECT_EQ(rec[4 + i], 0) << i;
      ++below;
    }
  }
  EXPECT_GT(below, 0);
  EXPECT_EQ(rec[4 + 777], 0xABCD);  // the padding word is not the record's business
}

TEST(Perplexity, KldAgainstAPackedBaseMatchesTheExactDivergence) {
  std::mt19937 rng(13);
  const int V = 500;
  KldSums same, other;
  for (int pos = 0; pos < 30; ++pos) {
    const auto base = random_logits(rng, V, 2.f);
    auto q = base;
    std::normal_distribution<float> noise(0.f, 0.3f);
    for (auto& x : q) x += noise(rng);
    std::vector<uint16_t> rec(static_cast<size_t>(logprob_record_u16(V)));
    const int32_t tok = static_cast<int32_t>(rng() % V);
    token_nll_packed(base, tok, rec.data());
    const auto [k0, dp0] = token_kld(base, rec.data(), tok, same);
    // The packing rounds log p to (max − min)/65535 ≈ 2.4e-4 here: a model against its own
    // record is off by first-order rounding terms, ~1e-5.
    EXPECT_NEAR(k0, 0.0, 5e-5);
    EXPECT_NEAR(dp0, 0.f, 1e-4f);
    const auto lb = log_softmax64(base), lq = log_softmax64(q);
    double exact = 0;
    for (int i = 0; i < V; ++i) exact += std::exp(lb[i]) * (lb[i] - lq[i]);
    const auto [k1, dp1] = token_kld(q, rec.data(), tok, other);
    EXPECT_NEAR(k1, exact, 2e-4 + 0.01 * exact);
    EXPECT_NEAR(dp1, std::exp(lq[tok]) - std::exp(lb[tok]), 1e-4);
  }
  EXPECT_EQ(same.count, 30);
  EXPECT_EQ(same.n_same_top, 30);
  EXPECT_GT(other.sum_kld, 0);
  // The report needs 100 positions, as llama-perplexity's.
  EXPECT_TRUE(kld_report(other, std::vector<float>(30, 0.1f), std::vector<float>(30, 0.f)).empty());
}

TEST(Perplexity, EstimateAndItsError) {
  NllSums s;
  for (double v : {1.0, 2.0, 3.0, 2.0}) {
    s.nll += v;
    s.nll2 += v * v;
    ++s.count;
  }
  const PplEstimate e = ppl_estimate(s);
  EXPECT_NEAR(e.ppl, std::exp(2.0), 1e-12);
  // var = mean(v²) − mean² = 4.5 − 4 = 0.5; err = ppl·sqrt(0.5/3)
  EXPECT_NEAR(e.err, std::exp(2.0) * std::sqrt(0.5 / 3), 1e-12);
  NllSums flat{3.0, 4.5, 2};
  EXPECT_EQ(ppl_estimate(flat).err, 0);
}

TEST(Perplexity, ReportHasLlamaPerplexitysBlocks) {
  std::mt19937 rng(14);
  KldSums k;
  std::vector<float> kv, dv;
  for (int pos = 0; pos < 150; ++pos) {
    const auto base = random_logits(rng, 64, 2.f);
    auto q = base;
    q[static_cast<size_t>(pos % 64)] += 1.f;
    std::vector<uint16_t> rec(static_cast<size_t>(logprob_record_u16(64)));
    token_nll_packed(base, pos % 64, rec.data());
    const auto [kl, dp] = token_kld(q, rec.data(), pos % 64, k);
    kv.push_back(static_cast<float>(kl));
    dv.push_back(dp);
  }
  const std::string r = kld_report(k, kv, dv);
  for (const char* line : {"====== Perplexity statistics ======", "Mean PPL(Q)                   :",
                           "====== KL divergence statistics ======", "Mean    KLD:", "99.0%   KLD:",
                           "====== Token probability statistics ======", "RMS Δp    :", "Same top p:"})
    EXPECT_NE(r.find(line), std::string::npos) << line;
  EXPECT_NE(kld_chunk_line(1, k).find("%"), std::string::npos);
}

class PerplexityFile : public ::testing::Test {
 protected:
  // ctest runs the tests of this fixture in parallel processes: one file each.
  std::string path = (std::filesystem::temp_directory_path() /
                      ("ferry-test-logprobs-" + std::to_string(::getpid()) + "-" +
                       ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".kld"))
                         .string();
  void TearDown() override {
    std::filesystem::remove(path);
    std::filesystem::remove(path + ".tmp");
  }
  LogProbFileHeader header() {
    LogProbFileHeader h;
    h.n_ctx = 16;
    h.n_vocab = 33;  // odd: one padding word per record
    h.n_chunk = 2;
    for (int i = 0; i < 32; ++i) h.tokens.push_back(i * 7 % 33);
    return h;
  }
  std::vector<uint16_t> chunk(uint16_t seed) {
    std::vector<uint16_t> r(static_cast<size_t>(scored_per_chunk(16) * logprob_record_u16(33)));
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<uint16_t>(seed + i * 31);
    return r;
  }
};

TEST_F(PerplexityFile, RoundTrip) {
  const auto h = header();
  {
    LogProbWriter w(path, h);
    w.write_chunk(chunk(1));
    w.write_chunk(chunk(2));
    w.finish();
  }
  EXPECT_EQ(std::filesystem::file_size(path), logprob_file_bytes(16, 33, 2));
  EXPECT_EQ(logprob_file_bytes(16, 33, 2), 8u + 12u + 32u * 4u + 2u * 7u * 38u * 2u);
  LogProbReader r(path);
  EXPECT_EQ(r.header().n_ctx, 16);
  EXPECT_EQ(r.header().n_vocab, 33);
  EXPECT_EQ(r.header().tokens, h.tokens);
  std::vector<uint16_t> got;
  r.read_chunk(got);
  EXPECT_EQ(got, chunk(1));
  r.read_chunk(got);
  EXPECT_EQ(got, chunk(2));
}

TEST_F(PerplexityFile, UnfinishedWriterLeavesNothing) {
  {
    LogProbWriter w(path, header());
    w.write_chunk(chunk(1));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_F(PerplexityFile, BadFilesAreRefusedWithTheirFigures) {
  {
    LogProbWriter w(path, header());
    w.write_chunk(chunk(1));
    w.write_chunk(chunk(2));
    w.finish();
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  try {
    LogProbReader r(path);
    FAIL() << "a truncated file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::format);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  {
    std::ofstream o(path, std::ios::binary | std::ios::trunc);
    o << "GGUF and something else entirely";
  }
  try {
    LogProbReader r(path);
    FAIL() << "a file without the magic was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::format);
    EXPECT_NE(std::string(e.what()).find("_logits_"), std::string::npos) << e.what();
  }
  EXPECT_THROW(LogProbReader("/nonexistent/ferry.kld"), Error);
}

}  // namespace
}  // namespace ferry
