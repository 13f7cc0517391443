// The types synth writes without kernels/cpu: the ported quantizers (Q4_0, Q4_1, Q5_0, Q5_1, MXFP4,
// IQ4_NL, IQ4_XS) decode back to the input within their precision, the AVX2 IQ4 lanes give the
// scalar port's bytes, the random Q2_K / Q3_K blocks are valid, zero-mean, of the asked scale and
// deterministic, and whole files of the new mixes are the same for any thread count. The bytes
// against llama.cpp's own quantizer: tests/oracle/test_quant_llamacpp.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "kernels/cpu/matmul.hpp"
#include "runtime/core/fp16.hpp"
#include "runtime/synth/encode.hpp"
#include "runtime/synth/quantize_extra.hpp"
#include "runtime/synth/random_blocks.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::synth {
namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

constexpr int8_t kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr int8_t kFp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ggml's dequantize_row_* for the ported types (a block at a time), written from the layouts.
std::vector<float> dequantize(GgmlType t, const uint8_t* y, size_t n) {
  std::vector<float> x(n);
  const TypeInfo& ti = type_info(t);
  for (size_t b = 0; b < n / ti.block_values; ++b, y += ti.block_bytes) {
    float* o = x.data() + b * ti.block_values;
    const auto nib = [&](const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; };
    switch (t) {
      case GgmlType::Q4_0:
        for (int j = 0; j < 32; ++j) o[j] = half(y) * (nib(y + 2, j) - 8);
        break;
      case GgmlType::Q4_1:
        for (int j = 0; j < 32; ++j) o[j] = half(y) * nib(y + 4, j) + half(y + 2);
        break;
      case GgmlType::Q5_0:
      case GgmlType::Q5_1: {
        const bool one = t == GgmlType::Q5_1;
        uint32_t qh;
        std::memcpy(&qh, y + (one ? 4 : 2), 4);
        for (int j = 0; j < 32; ++j) {
          const int q = nib(y + (one ? 8 : 6), j) | (((qh >> j) & 1) << 4);
          o[j] = one ? half(y) * q + half(y + 2) : half(y) * (q - 16);
        }
        break;
      }
      case GgmlType::MXFP4: {
        const float d = std::ldexp(1.0f, y[0] - 128);  // e8m0, halved (the values are doubled)
        for (int j = 0; j < 32; ++j) o[j] = d * kFp4[nib(y + 1, j)];
        break;
      }
      case GgmlType::IQ4_NL:
        for (int j = 0; j < 32; ++j) o[j] = half(y) * kIq4[nib(y + 2, j)];
        break;
      case GgmlType::IQ4_XS: {
        uint16_t sh;
        std::memcpy(&sh, y + 2, 2);
        for (int ib = 0; ib < 8; ++ib) {
          const int ls = ((y[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | (((sh >> 2 * ib) & 3) << 4);
          for (int j = 0; j < 32; ++j) o[32 * ib + j] = half(y) * (ls - 32) * kIq4[nib(y + 8 + 16 * ib, j)];
        }
        break;
      }
      default:
        ADD_FAILURE() << "no test dequantizer for " << type_name(t);
    }
  }
  return x;
}

// Gaussian blocks at several scales, zero, tiny (below ggml's 1e-15 group threshold), constant,
// all-positive and outlier blocks, 256 values each.
std::vector<float> awkward(int n_blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_blocks) * 256);
  for (int b = 0; b < n_blocks; ++b) {
    const float s = std::pow(10.0f, static_cast<float>(rng() % 7) - 4.0f);
    for (int i = 0; i < 256; ++i) {
      float& v = x[static_cast<size_t>(b) * 256 + i];
      switch (b % 7) {
        case 0: case 1: v = s * normal(rng); break;
        case 2: v = (i / 32) % 3 ? 0.0f : s * normal(rng); break;  // zero blocks in a super-block
        case 3: v = 1e-17f * normal(rng); break;
        case 4: v = (i / 32) % 2 ? 0.5f * s : s * normal(rng); break;
        case 5: v = s * std::fabs(normal(rng)); break;
        case 6: v = i % 41 == 3 ? 40.0f * s : 1e-3f * s * normal(rng); break;
      }
    }
  }
  return x;
}

const std::vector<GgmlType> kPorted = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                       GgmlType::MXFP4, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

TEST(SynthEncode, PortedQuantizersDecodeToTheirInput) {
  // Relative RMS error of Gaussian data.
  const std::vector<float> x = [] {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> v(64 * 256);
    for (float& f : v) f = normal(rng);
    return v;
  }();
  for (GgmlType t : kPorted) {
    std::vector<uint8_t> q(row_bytes(t, x.size()));
    quantize_extra_rows(t, x.data(), q.data(), 64, 256);
    const std::vector<float> y = dequantize(t, q.data(), x.size());
    double err = 0, ref = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (y[i] - x[i]) * (y[i] - x[i]);
      ref += x[i] * x[i];
    }
    const double rel = std::sqrt(err / ref);
    // Measured: Q4_0 0.086, Q4_1 0.078, Q5_0 0.042, Q5_1 0.038, MXFP4 0.114, IQ4_NL/XS 0.075.
    const double bound = t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ? 0.05
                         : t == GgmlType::MXFP4                     ? 0.13
                                                                    : 0.1;
    EXPECT_LT(rel, bound) << type_name(t);
    EXPECT_GT(rel, 0.005) << type_name(t) << ": suspiciously exact";
  }
  // Zero input stays zero.
  const std::vector<float> zero(512, 0.0f);
  for (GgmlType t : kPorted) {
    std::vector<uint8_t> q(row_bytes(t, zero.size()));
    quantize_extra_rows(t, zero.data(), q.data(), 1, 512);
    for (float v : dequantize(t, q.data(), zero.size())) ASSERT_EQ(v, 0.0f) << type_name(t);
  }
}

TEST(SynthEncode, Iq4LanesMatchTheScalarPort) {
  if (!quantize_extra_is_fast(GgmlType::IQ4_XS)) GTEST_SKIP() << "no AVX2: the scalar port runs";
  const std::vector<float> x = awkward(140, 42);
  for (GgmlType t : {GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    for (int64_t row_len : {256, 2048, 96 * 8}) {
      if (row_len % type_info(t).block_values) continue;
      const int64_t rows = static_cast<int64_t>(x.size()) / row_len;
      const uint64_t n = static_cast<uint64_t>(rows * row_len);
      std::vector<uint8_t> ref(row_bytes(t, n)), fast(row_bytes(t, n));
      quantize_extra_row_ref(t, x.data(), ref.data(), static_cast<int64_t>(n));
      quantize_extra_rows(t, x.data(), fast.data(), rows, row_len);
      size_t diff = ref.size();
      for (size_t i = 0; i < ref.size(); ++i)
        if (ref[i] != fast[i]) {
          diff = i;
          break;
        }
      EXPECT_EQ(diff, ref.size()) << type_name(t) << " rows of " << row_len << ": first differing byte "
                                  << diff << " (block " << diff / type_info(t).block_bytes << ")";
    }
  }
  // IQ4_NL rows of 3 blocks: the lanes take 8 blocks at a time across rows, the rest one by one.
  std::vector<uint8_t> ref(row_bytes(GgmlType::IQ4_NL, 96 * 11)), fast(ref.size());
  quantize_extra_row_ref(GgmlType::IQ4_NL, x.data(), ref.data(), 96 * 11);
  quantize_extra_rows(GgmlType::IQ4_NL, x.data(), fast.data(), 11, 96);
  EXPECT_EQ(ref, fast);
}

// Q2_K / Q3_K dequantization (ggml's dequantize_row_q2_K / _q3_K) of one 256-value block.
void dequantize_k(GgmlType t, const uint8_t* y, float* o, std::vector<int>& scales, std::vector<int>& levels) {
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        const int is = 8 * h + 2 * j + l / 16, i = 128 * h + 32 * j + l;
        if (t == GgmlType::Q2_K) {
          const int q = (y[16 + 32 * h + l] >> 2 * j) & 3;
          o[i] = half(y + 80) * (y[is] & 0xF) * q - half(y + 82) * (y[is] >> 4);
          scales.push_back(y[is] & 0xF);
          scales.push_back(y[is] >> 4);
          levels.push_back(q);
        } else {
          const uint8_t* sc = y + 96;
          const int lo = is < 8 ? sc[is] & 0xF : sc[is - 8] >> 4;
          const int s = (lo | (((sc[8 + is % 4] >> 2 * (is / 4)) & 3) << 4)) - 32;
          const int q = ((y[32 + 32 * h + l] >> 2 * j) & 3) - ((y[l] >> (4 * h + j)) & 1 ? 0 : 4);
          o[i] = half(y + 108) * s * q;
          scales.push_back(s);
          levels.push_back(q);
        }
      }
}

TEST(SynthEncode, RandomBlocksAreValidAndOfTheAskedScale) {
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K}) {
    for (float rms : {1.0f, 0.0221f, 0.0025f}) {
      const uint64_t rows = 64, len = 512;
      std::vector<uint8_t> y(rows * row_bytes(t, len));
      random_block_rows(t, 1234, 0, rows, len, rms, y.data());
      std::vector<float> x(rows * len);
      std::vector<int> scales, levels;
      const uint32_t bb = type_info(t).block_bytes;
      for (uint64_t b = 0; b < rows * len / 256; ++b) {
        const uint8_t* blk = y.data() + b * bb;
        for (int k = 0; k < (t == GgmlType::Q2_K ? 2 : 1); ++k) {
          const float d = half(blk + (t == GgmlType::Q2_K ? 80 + 2 * k : 108));
          ASSERT_TRUE(std::isfinite(d) && d > 0.0f) << type_name(t) << " block " << b;
        }
        dequantize_k(t, blk, x.data() + b * 256, scales, levels);
      }
      double sum = 0, sum2 = 0;
      for (float v : x) {
        ASSERT_TRUE(std::isfinite(v));
        sum += v;
        sum2 += static_cast<double>(v) * v;
      }
      const double mean = sum / x.size(), got_rms = std::sqrt(sum2 / x.size());
      EXPECT_NEAR(got_rms / rms, 1.0, 0.05) << type_name(t) << " rms " << rms;
      EXPECT_LT(std::fabs(mean), 0.02 * rms) << type_name(t);
      for (int s : scales) ASSERT_GE(s, 8) << type_name(t);
      for (int s : scales) ASSERT_LE(s, t == GgmlType::Q2_K ? 15 : 31) << type_name(t);
      int seen[8] = {};
      for (int q : levels) ++seen[q + (t == GgmlType::Q3_K ? 4 : 0)];
      if (t == GgmlType::Q3_K) {
        EXPECT_EQ(seen[0], 0) << "q = -4 is left out";
      }
      for (int q = t == GgmlType::Q3_K ? 1 : 0; q < (t == GgmlType::Q3_K ? 8 : 4); ++q) EXPECT_GT(seen[q], 0) << q;
    }
  }
}

TEST(SynthEncode, RandomBlocksDependOnlyOnSeedAndRow) {
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K}) {
    const uint64_t rb = row_bytes(t, 512);
    std::vector<uint8_t> all(6 * rb), tail(2 * rb), again(6 * rb), other(6 * rb);
    random_block_rows(t, 77, 10, 6, 512, 0.02f, all.data());
    random_block_rows(t, 77, 14, 2, 512, 0.02f, tail.data());  // rows 14, 15 alone
    random_block_rows(t, 77, 10, 6, 512, 0.02f, again.data());
    random_block_rows(t, 78, 10, 6, 512, 0.02f, other.data());
    EXPECT_EQ(all, again);
    EXPECT_EQ(std::memcmp(all.data() + 4 * rb, tail.data(), 2 * rb), 0) << type_name(t);
    EXPECT_NE(all, other);
    EXPECT_NE(std::memcmp(all.data(), all.data() + rb, rb), 0) << "rows differ";
  }
}

TEST(SynthEncode, EveryWritableTypeEncodes) {
  Options o;
  o.quant = QuantMix::f32;
  const ModelPlan plan = make_plan(o);
  TensorPlan t = *plan.find("blk.0.ffn_up_exps.weight");
  std::vector<float> f32(4 * t.row_len());
  generate_rows(plan, t, 0, 4, f32.data());
  int n = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto info = type_info(id);
    if (!info) continue;
    const auto type = static_cast<GgmlType>(id);
    if (!encoding_of(type)) continue;
    t.type = type;
    std::vector<uint8_t> out(4 * row_bytes(type, t.row_len()));
    EXPECT_NO_THROW(encode_rows(plan, t, 0, 4, f32.data(), out.data())) << info->name;
    ++n;
  }
  EXPECT_EQ(n, 16);
  EXPECT_FALSE(encoding_of(GgmlType::IQ3_S));
  EXPECT_FALSE(encoding_of(GgmlType::Q8_K));
}

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(SynthEncode, NewMixesSameBytesForAnyThreadCount) {
  const std::string dir = std::string(FERRY_BINARY_DIR) + "/test-scratch";
  std::filesystem::create_directories(dir);
  for (QuantMix q : {QuantMix::q3_k_m, QuantMix::q2_k, QuantMix::iq4_xs, QuantMix::mxfp4_moe, QuantMix::q5_1}) {
    Options o;
    o.arch = Arch::qwen35moe;
    o.quant = q;
    o.seed = 9;
    const ModelPlan plan = make_plan(o);
    WriteOptions one, three;
    one.threads = 1;
    three.threads = 3;
    write_model(plan, dir + "/enc1.gguf", one);
    write_model(plan, dir + "/enc3.gguf", three);
    const std::string a = read_all(dir + "/enc1.gguf"), b = read_all(dir + "/enc3.gguf");
    EXPECT_GT(a.size(), plan.tensor_bytes()) << quant_mix_name(q);
    EXPECT_TRUE(a == b) << quant_mix_name(q) << ": bytes differ between -t 1 and -t 3";
  }
}

}  // namespace
}  // namespace ferry::synth
