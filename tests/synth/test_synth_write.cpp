// Writing synthetic models: identical bytes whatever the thread count, a file the GGUF reader
// accepts with exactly the planned metadata and tensors, values with the documented statistics
// (scales, zeroed writer rows, router skew column).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kernels/cpu/quants.hpp"
#include "runtime/core/error.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::synth {
namespace {

namespace fs = std::filesystem;

class SynthWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(FERRY_BINARY_DIR) / "test-scratch" / "synth_write";
    fs::create_directories(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

Options tiny(Arch a, QuantMix q, uint64_t seed = 11) {
  Options o;
  o.arch = a;
  o.quant = q;
  o.seed = seed;
  o.router_skew = 1.0f;
  return o;
}

TEST_F(SynthWrite, SameBytesForAnyThreadCount) {
  for (Arch a : {Arch::qwen3moe, Arch::qwen35moe, Arch::qwen3next}) {
    const ModelPlan plan = make_plan(tiny(a, QuantMix::q4_k_m));
    WriteOptions one, three;
    one.threads = 1;
    three.threads = 3;
    const auto s1 = write_model(plan, path("t1.gguf"), one);
    const auto s3 = write_model(plan, path("t3.gguf"), three);
    const std::string b1 = read_all(path("t1.gguf")), b3 = read_all(path("t3.gguf"));
    EXPECT_EQ(s1.file_bytes, b1.size());
    EXPECT_EQ(s1.tensor_bytes, plan.tensor_bytes());
    EXPECT_EQ(s3.file_bytes, s1.file_bytes);
    EXPECT_TRUE(b1 == b3) << arch_name(a) << ": bytes differ between -t 1 and -t 3";
    EXPECT_LT(b1.size(), a == Arch::qwen3moe ? 5'000'000u : 5'600'000u) << "tiny q4_k_m size";
  }
}

TEST_F(SynthWrite, SeedChangesWeightsNotLayout) {
  const ModelPlan p1 = make_plan(tiny(Arch::qwen3moe, QuantMix::q8_0, 1));
  const ModelPlan p2 = make_plan(tiny(Arch::qwen3moe, QuantMix::q8_0, 2));
  write_model(p1, path("s1.gguf"));
  write_model(p2, path("s2.gguf"));
  const auto f1 = gguf::File::open(path("s1.gguf"));
  const auto f2 = gguf::File::open(path("s2.gguf"));
  ASSERT_EQ(f1.tensors().size(), f2.tensors().size());
  for (size_t i = 0; i < f1.tensors().size(); ++i) {
    const auto& a = f1.tensors()[i];
    const auto& b = f2.tensors()[i];
    EXPECT_EQ(a.offset, b.offset);
    if (a.n_bytes >= 64) {
      EXPECT_NE(std::memcmp(f1.data(a), f2.data(b), a.n_bytes), 0) << a.name;
    }
  }
}

TEST_F(SynthWrite, FileMatchesPlan) {
  const ModelPlan plan = make_plan(tiny(Arch::qwen35moe, QuantMix::q5_k_m));
  write_model(plan, path("plan.gguf"));
  const auto f = gguf::File::open(path("plan.gguf"));
  ASSERT_EQ(f.metadata().size(), plan.metadata.size());
  for (size_t i = 0; i < plan.metadata.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, plan.metadata[i].first);
    EXPECT_TRUE(f.metadata()[i].second == plan.metadata[i].second) << plan.metadata[i].first;
  }
  ASSERT_EQ(f.tensors().size(), plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& got = f.tensors()[i];
    const auto& want = plan.tensors[i];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.type, want.type) << want.name;
    EXPECT_EQ(got.n_dims, want.ne.size()) << want.name;
    for (size_t d = 0; d < want.ne.size(); ++d) EXPECT_EQ(got.ne[d], want.ne[d]) << want.name;
    EXPECT_EQ(got.n_bytes, want.n_bytes) << want.name;
    // The bytes are the planned values in the planned type.
    std::vector<float> f32(want.n_elements());
    generate_rows(plan, want, 0, want.n_rows(), f32.data());
    std::vector<uint8_t> enc(want.n_bytes);
    const uint64_t rb = row_bytes(want.type, want.row_len());
    for (uint64_t r = 0; r < want.n_rows(); ++r)
      cpu::quantize_row_ref(want.type, f32.data() + r * want.row_len(), enc.data() + r * rb,
                            static_cast<int64_t>(want.row_len()));
    EXPECT_EQ(std::memcmp(enc.data(), f.data(got), want.n_bytes), 0) << want.name;
  }
}

struct Stats {
  double mean = 0, std = 0, max_abs = 0;
};
Stats stats(const std::vector<float>& v) {
  Stats s;
  for (float x : v) s.mean += x;
  s.mean /= v.size();
  for (float x : v) {
    s.std += (x - s.mean) * (x - s.mean);
    s.max_abs = std::max(s.max_abs, static_cast<double>(std::fabs(x)));
  }
  s.std = std::sqrt(s.std / v.size());
  return s;
}

std::vector<float> values(const ModelPlan& p, const std::string& name) {
  const TensorPlan* t = p.find(name);
  if (!t) throw std::runtime_error("missing " + name);
  std::vector<float> v(t->n_elements());
  generate_rows(p, *t, 0, t->n_rows(), v.data());
  return v;
}

TEST(SynthValues, ScalesAndStructure) {
  Options o;
  o.arch = Arch::qwen35moe;
  o.preset = Preset::tiny;
  o.seed = 3;
  o.router_skew = 1.0f;
  const ModelPlan p = make_plan(o);
  const uint32_t n = p.hp.n_embd, ch = p.skew_channel;

  const Stats q = stats(values(p, "blk.3.attn_q.weight"));
  EXPECT_NEAR(q.mean, 0.0, 0.002);
  EXPECT_NEAR(q.std, 1.0 / std::sqrt(n), 0.003);
  EXPECT_LT(q.max_abs, 3.5 / std::sqrt(n));  // Irwin–Hall values are bounded by 2√3 σ

  const Stats nw = stats(values(p, "blk.0.attn_norm.weight"));
  EXPECT_NEAR(nw.mean, 1.0, 0.03);
  EXPECT_NEAR(nw.std, 0.1, 0.02);

  for (float a : values(p, "blk.0.ssm_a")) {
    EXPECT_LE(a, -1.0f);
    EXPECT_GE(a, -16.0f);
  }
  for (float b : values(p, "blk.0.ssm_dt.bias")) {
    const double dt = std::log1p(std::exp(static_cast<double>(b)));  // softplus
    EXPECT_GE(dt, 0.99e-3);
    EXPECT_LE(dt, 1.01e-1);
  }

  // Output projections never write the skew channel; the embedding always carries it.
  const auto down = values(p, "blk.1.ffn_down_exps.weight");
  const uint32_t ff = p.hp.n_ff_exp;
  for (uint32_t e = 0; e < p.hp.n_expert; ++e)
    for (uint32_t i = 0; i < ff; ++i) EXPECT_EQ(down[(uint64_t{e} * n + ch) * ff + i], 0.0f);
  EXPECT_NE(down[(uint64_t{0} * n + ch + 1) * ff], 0.0f);
  const auto emb = values(p, "token_embd.weight");
  for (uint32_t t = 0; t < p.hp.n_vocab; ++t) EXPECT_EQ(emb[uint64_t{t} * n + ch], p.skew_channel_value);

  // Output rows of the [PADn] filler tokens are weak, so real tokens win the argmax.
  const auto out = values(p, "output.weight");
  ASSERT_EQ(p.token_unused.size(), p.hp.n_vocab);
  ASSERT_TRUE(p.token_unused[p.hp.n_vocab - 1]);
  ASSERT_FALSE(p.token_unused[0]);
  auto row_std = [&](uint32_t t) {
    return stats(std::vector<float>(out.begin() + uint64_t{t} * n, out.begin() + uint64_t{t + 1} * n)).std;
  };
  EXPECT_NEAR(row_std(0), 1.0 / std::sqrt(n), 0.2 / std::sqrt(n));
  EXPECT_NEAR(row_std(p.hp.n_vocab - 1), 0.1 / std::sqrt(n), 0.02 / std::sqrt(n));

  // Router skew: offsets -0.5·S·ln(1 + rank) / channel value, one expert per rank, per layer.
  const auto router = values(p, "blk.2.ffn_gate_inp.weight");
  std::vector<double> offsets;
  for (uint32_t e = 0; e < p.hp.n_expert; ++e) offsets.push_back(router[uint64_t{e} * n + ch] * p.skew_channel_value);
  std::vector<double> sorted = offsets;
  std::sort(sorted.rbegin(), sorted.rend());
  for (uint32_t r = 0; r < p.hp.n_expert; ++r) EXPECT_NEAR(sorted[r], -0.5 * std::log(1.0 + r), 1e-5);
  const auto router0 = values(p, "blk.0.ffn_gate_inp.weight");
  bool same_order = true;
  for (uint32_t e = 0; e < p.hp.n_expert; ++e)
    same_order &= router0[uint64_t{e} * n + ch] == router[uint64_t{e} * n + ch];
  EXPECT_FALSE(same_order) << "each layer should have its own hot experts";

  o.router_skew = 0.0f;
  const auto flat = values(make_plan(o), "blk.2.ffn_gate_inp.weight");
  for (uint32_t e = 0; e < p.hp.n_expert; ++e) EXPECT_EQ(flat[uint64_t{e} * n + ch], 0.0f);
}

TEST_F(SynthWrite, FailureLeavesNothing) {
  const ModelPlan plan = make_plan(tiny(Arch::qwen3moe, QuantMix::f32));
  const std::string bad = path("no-such-dir/x.gguf");
  EXPECT_THROW(write_model(plan, bad), Error);
  EXPECT_FALSE(fs::exists(bad));
}

}  // namespace
}  // namespace ferry::synth
