// Causal GQA attention (flash-decoding split kernel, rows/split-K decode kernel and tiled prefill
// kernel) vs a double reference; the split kernel on quantized caches vs the rows kernel, which
// tests/gpu/test_gpu_kv_quant.cpp checks against the CPU.
#include "tests/gpu/gpu_test_util.hpp"

#include "runtime/core/fp16.hpp"
#include "runtime/core/types.hpp"

#if FERRY_HAVE_CUDA
#include "kernels/cuda/attention.cuh"
#endif

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

struct Case {
  int n_head, n_head_kv, head_dim;
  int64_t p0, n_tokens;
  GgmlType kv;
  bool gate;
};

std::string name(const Case& c) {
  return std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + "h d=" + std::to_string(c.head_dim) +
         " p0=" + std::to_string(c.p0) + " n=" + std::to_string(c.n_tokens) + " " + std::string(type_name(c.kv)) +
         (c.gate ? " gated" : "");
}

// plan_keys > 0: the position is read from device memory (AttentionArgs::p0_dev) and the launch is
// planned for plan_keys keys, as a replayed step graph runs it.
void run(const Case& c, int path /*0 dispatch, 1 rows, 2 tiled, 3 split, 4 staged*/, int64_t plan_keys = 0) {
  const int64_t n_kv = c.p0 + c.n_tokens, kvw = int64_t{c.n_head_kv} * c.head_dim;
  // q and gate interleaved per head like qwen35's attn_q output: [q(d) | gate(d)] per head.
  const int64_t q_ld_head = c.gate ? 2 * c.head_dim : c.head_dim, q_ld_token = c.n_head * q_ld_head;
  const auto qg = random_floats(c.n_tokens * q_ld_token, 1, -1.f, 1.f);
  auto kf = random_floats(n_kv * kvw, 2, -1.f, 1.f), vf = random_floats(n_kv * kvw, 3, -1.f, 1.f);
  const float scale = 1.f / std::sqrt(float(c.head_dim)) * 2.f;  // sharper softmax than random data gives
  std::vector<uint16_t> k16, v16;
  if (c.kv == GgmlType::F16) {
    for (auto* p : {&kf, &vf})
      for (auto& x : *p) x = fp16_to_fp32(fp32_to_fp16(x));  // reference sees what the cache holds
    for (float x : kf) k16.push_back(fp32_to_fp16(x));
    for (float x : vf) v16.push_back(fp32_to_fp16(x));
  }
  const int64_t out_w = int64_t{c.n_head} * c.head_dim;
  std::vector<double> ref(c.n_tokens * out_w);
  for (int64_t t = 0; t < c.n_tokens; ++t)
    for (int h = 0; h < c.n_head; ++h) {
      const int g = h / (c.n_head / c.n_head_kv);
      const float* q = qg.data() + t * q_ld_token + h * q_ld_head;
      const int64_t n_vis = c.p0 + t + 1;
      std::vector<double> s(n_vis);
      double mx = -1e300;
      for (int64_t j = 0; j < n_vis; ++j) {
        double d = 0;
        for (int i = 0; i < c.head_dim; ++i) d += double(q[i]) * kf[(j * c.n_head_kv + g) * c.head_dim + i];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (auto& v : s) sum += v = std::exp(v - mx);
      for (int i = 0; i < c.head_dim; ++i) {
        double o = 0;
        for (int64_t j = 0; j < n_vis; ++j) o += s[j] * vf[(j * c.n_head_kv + g) * c.head_dim + i];
        o /= sum;
        if (c.gate) o /= 1 + std::exp(-double(q[c.head_dim + i]));
        ref[t * out_w + h * c.head_dim + i] = o;
      }
    }
  DevBuf<float> dq(qg), dout(c.n_tokens * out_w), dk32(kf), dv32(vf);
  DevBuf<uint16_t> dk16(std::max<size_t>(k16.size(), 1)), dv16(std::max<size_t>(v16.size(), 1));
  if (c.kv == GgmlType::F16) {
    dk16.upload(k16);
    dv16.upload(v16);
  }
  cuda::AttentionArgs a;
  a.q = dq.get();
  a.q_ld_token = q_ld_token;
  a.q_ld_head = q_ld_head;
  a.k_cache = c.kv == GgmlType::F16 ? static_cast<const void*>(dk16.get()) : dk32.get();
  a.v_cache = c.kv == GgmlType::F16 ? static_cast<const void*>(dv16.get()) : dv32.get();
  a.k_type = a.v_type = c.kv;
  if (c.gate) {
    a.gate = dq.get() + c.head_dim;
    a.gate_ld_token = q_ld_token;
    a.gate_ld_head = q_ld_head;
  }
  a.out = dout.get();
  a.out_ld_token = out_w;
  a.n_tokens = c.n_tokens;
  a.p0 = c.p0;
  a.n_head = c.n_head;
  a.n_head_kv = c.n_head_kv;
  a.head_dim = c.head_dim;
  a.scale = scale;
  DevBuf<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(c.p0)});
  if (plan_keys > 0) {
    a.p0_dev = dpos.get();
    a.p0 = plan_keys - c.n_tokens;
  }
  DevBuf<uint8_t> ws(cuda::attention_workspace_bytes(c.n_tokens, c.n_head, c.head_dim, std::max(n_kv, plan_keys)));
  a.workspace = ws.get();
  a.workspace_bytes = ws.size();
  static const char* kPath[] = {"attention", "attention_rows", "attention_tiled", "attention_split", "attention_staged"};
  if (path == 3) {
    EXPECT_TRUE(cuda::attention_split_applies(a)) << name(c);  // not the rows fallback
  }
  if (path == 4) {
    EXPECT_TRUE(cuda::attention_staged_applies(a)) << name(c);  // not the register-split fallback
  }
  if (path == 0) cuda::attention(a, nullptr);
  else if (path == 1) cuda::attention_rows(a, nullptr);
  else if (path == 2) cuda::attention_tiled(a, nullptr);
  else if (path == 3) cuda::attention_split(a, nullptr);
  else cuda::attention_staged(a, nullptr);
  report(kPath[path], name(c) + (plan_keys > 0 ? " planned for " + std::to_string(plan_keys) : ""),
         nmse(ref, dout.download()), 1e-9);
  if (path == 1 && n_kv > 256) {  // also without workspace: no split-K
    a.workspace = nullptr;
    a.workspace_bytes = 0;
    cuda::attention_rows(a, nullptr);
    report("attention_rows(no split)", name(c), nmse(ref, dout.download()), 1e-9);
  }
}

TEST(GpuAttention, Decode) {
  FERRY_REQUIRE_GPU();
  run({16, 2, 256, 700, 1, GgmlType::F16, true}, 1);   // qwen35 full attention, split-K
  run({32, 4, 128, 5000, 1, GgmlType::F16, false}, 1);  // qwen3, long context
  run({32, 4, 128, 0, 1, GgmlType::F32, false}, 1);     // first token
  run({8, 8, 64, 33, 3, GgmlType::F32, false}, 1);      // MHA, few tokens
  run({4, 2, 32, 10, 2, GgmlType::F16, true}, 0);
}

// The flash-decoding split at the model shapes (qwen35moe: 16/2 heads d=256 gated; qwen3moe: 32/4
// d=128), at odd and short lengths (one split of fewer keys than a tile, a last split shorter than
// the others, 2–4 tokens whose splits see different numbers of keys) and at 128K keys, where the
// length is what matters (2/1 heads of d=32 keep it to seconds on the emulator).
TEST(GpuAttention, SplitDecode) {
  FERRY_REQUIRE_GPU();
  run({16, 2, 256, 700, 1, GgmlType::F16, true}, 3);
  run({32, 4, 128, 1500, 1, GgmlType::F16, false}, 3);
  run({8, 4, 64, 127, 1, GgmlType::F32, false}, 3);   // 128 keys: two splits of 64
  run({8, 1, 64, 1001, 2, GgmlType::F32, false}, 3);  // groups of 8, odd length
  run({4, 2, 32, 333, 3, GgmlType::F16, true}, 3);
  run({8, 2, 128, 1021, 4, GgmlType::F16, false}, 3);
  run({2, 1, 32, 131071, 1, GgmlType::F16, false}, 3);  // 128K context
  run({16, 2, 256, 900, 1, GgmlType::F16, true}, 0);    // the dispatch takes the split
}

// The split kernel on quantized caches (the general path: rotated and rounded query, Q4_1's block
// mins, a rotated V read back through the combine kernel) against the rows kernel on the same bytes.
// The staged flash-decoding (K/V tiles in shared memory, a warp per query head) at the model
// shapes, every group size and head size, F16 and F32, 1–4 tokens, from one key to lengths that
// end inside a tile, and at 128K keys (2/1 heads of d=32 keep it to seconds on the emulator).
TEST(GpuAttention, StagedDecode) {
  FERRY_REQUIRE_GPU();
  run({16, 2, 256, 700, 1, GgmlType::F16, true}, 4);    // qwen35moe full attention
  run({32, 4, 128, 1500, 1, GgmlType::F16, false}, 4);  // qwen3moe
  run({16, 2, 256, 0, 1, GgmlType::F16, true}, 4);      // the first token: one key
  run({8, 1, 256, 77, 2, GgmlType::F32, false}, 4);     // groups of 8, F32 (tiles of 16 keys)
  run({8, 4, 64, 127, 1, GgmlType::F32, false}, 4);     // groups of 2
  run({8, 2, 128, 1021, 4, GgmlType::F16, false}, 4);   // 4 tokens, a last split inside a tile
  run({4, 2, 32, 333, 3, GgmlType::F16, true}, 4);
  run({2, 1, 32, 131071, 1, GgmlType::F16, false}, 4);  // 128K context
  run({16, 2, 256, 900, 1, GgmlType::F16, true}, 0);    // the dispatch takes it
}

// Decode planned ahead of the position (a replayed step graph: the kernels read the position from
// device memory, the launch covers a bucket of keys, kernels/cuda/attention.cuh
// attention_plan_keys): every decode path gives the reference with splits past the last key.
TEST(GpuAttention, DecodePlannedAheadReadsThePosition) {
  FERRY_REQUIRE_GPU();
  EXPECT_EQ(cuda::attention_plan_keys(1, 4096), 256);
  EXPECT_EQ(cuda::attention_plan_keys(256, 4096), 256);
  EXPECT_EQ(cuda::attention_plan_keys(257, 4096), 288);
  EXPECT_EQ(cuda::attention_plan_keys(481, 4096), 512);
  EXPECT_EQ(cuda::attention_plan_keys(513, 4096), 576);
  EXPECT_EQ(cuda::attention_plan_keys(40000, 1 << 20), 40960);  // 10·4096
  EXPECT_EQ(cuda::attention_plan_keys(100, 200), 200);           // at most the context
  EXPECT_EQ(cuda::attention_plan_keys(300, 300), 300);
  run({16, 2, 256, 700, 1, GgmlType::F16, true}, 4, cuda::attention_plan_keys(701, 4096));
  run({16, 2, 256, 700, 1, GgmlType::F16, true}, 3, 1536);
  run({32, 4, 128, 300, 1, GgmlType::F16, false}, 1, 2048);  // the rows kernel, most splits empty
  run({8, 2, 128, 1021, 4, GgmlType::F16, false}, 4, 1536);   // 4 tokens
  run({16, 2, 256, 0, 1, GgmlType::F16, true}, 0, 256);       // the first token
}

// Where the staged kernel does not apply (plain K/V not 16-byte aligned, block-type rows that are
// not whole 4-byte words, groups without an instance), attention_staged runs the register split
// and still gives the reference.
TEST(GpuAttention, StagedFallsBackWhereItDoesNotApply) {
  FERRY_REQUIRE_GPU();
  cuda::AttentionArgs a;
  a.n_tokens = 1;
  a.p0 = 100;
  a.n_head = 16;
  a.n_head_kv = 2;
  a.head_dim = 256;
  a.k_type = a.v_type = GgmlType::F16;
  alignas(16) static char ws[16];
  a.workspace = ws;
  a.workspace_bytes = 1 << 20;
  a.k_cache = a.v_cache = ws;
  EXPECT_TRUE(cuda::attention_staged_applies(a));
  a.k_cache = ws + 8;
  EXPECT_FALSE(cuda::attention_staged_applies(a)) << "K not 16-byte aligned";
  a.k_cache = ws;
  a.k_type = a.v_type = GgmlType::Q8_0;
  EXPECT_TRUE(cuda::attention_staged_applies(a)) << "Q8_0 rows of d=256: 272 bytes";
  a.k_cache = ws + 4;
  EXPECT_TRUE(cuda::attention_staged_applies(a)) << "block-type rows: 4-byte words suffice";
  a.k_cache = ws + 2;
  EXPECT_FALSE(cuda::attention_staged_applies(a)) << "K not 4-byte aligned";
  a.k_cache = ws;
  a.head_dim = 32;
  a.n_head = 4;
  EXPECT_FALSE(cuda::attention_staged_applies(a)) << "Q8_0 rows of d=32: 34 bytes";
  a.head_dim = 256;
  a.n_head = 16;
  a.k_type = a.v_type = GgmlType::F16;
  a.n_head_kv = 16;
  EXPECT_FALSE(cuda::attention_staged_applies(a)) << "no GQA group";
  run({8, 8, 64, 300, 1, GgmlType::F16, false}, 0);  // MHA through the dispatch: the fallback
}

// Both flash-decoding kernels on the general path (quantized, BF16 and mixed pairs, rotated or not;
// narrow pairs of block types and wide ones with a 2-byte side, as attention_staged.cu tells them
// apart) against the rows kernel, which tests/gpu/test_gpu_kv_quant.cpp checks against the CPU.
TEST(GpuAttention, SplitAndStagedDecodeQuantizedMatchRows) {
  FERRY_REQUIRE_GPU();
  struct QCase { GgmlType k, v; int n_rot_k, n_rot_v, hd; int64_t n_kv; int n_tokens; };
  for (const QCase& qc : {QCase{GgmlType::Q8_0, GgmlType::Q4_0, 64, 64, 64, 1000, 1},
                          QCase{GgmlType::Q4_1, GgmlType::F16, 0, 0, 64, 517, 2},
                          QCase{GgmlType::Q5_1, GgmlType::Q8_0, 64, 64, 64, 2049, 1},
                          QCase{GgmlType::BF16, GgmlType::IQ4_NL, 0, 0, 64, 300, 1},
                          QCase{GgmlType::Q8_0, GgmlType::Q8_0, 256, 64, 256, 700, 1},   // qwen35moe, -ctk/-ctv q8_0
                          QCase{GgmlType::Q4_0, GgmlType::Q5_0, 128, 64, 128, 333, 4},   // a last tile cut short
                          QCase{GgmlType::BF16, GgmlType::BF16, 0, 0, 128, 150, 1}}) {
    const int n_head = 8, n_head_kv = 2, hd = qc.hd;
    const int64_t rows = qc.n_kv * n_head_kv;
    const auto kq = quantize_rows(qc.k, random_floats(rows * hd, 21, -1.f, 1.f), rows, hd, 21);
    const auto vq = quantize_rows(qc.v, random_floats(rows * hd, 22, -1.f, 1.f), rows, hd, 22);
    DevBuf<uint8_t> dk(kq.size()), dv(vq.size());
    dk.upload(kq);
    dv.upload(vq);
    const auto qv = random_floats(qc.n_tokens * n_head * hd, 23);
    DevBuf<float> dq(qv), out_rows(qc.n_tokens * n_head * hd), out_fast(qc.n_tokens * n_head * hd);
    DevBuf<uint8_t> ws(cuda::attention_workspace_bytes(qc.n_tokens, n_head, hd, qc.n_kv));
    cuda::AttentionArgs a;
    a.q = dq.get();
    a.q_ld_head = hd;
    a.q_ld_token = n_head * hd;
    a.k_cache = dk.get();
    a.v_cache = dv.get();
    a.k_type = qc.k;
    a.v_type = qc.v;
    a.n_rot_k = qc.n_rot_k;
    a.n_rot_v = qc.n_rot_v;
    a.rot_scale_k = qc.n_rot_k ? 1.f / std::sqrt(float(qc.n_rot_k)) : 1.f;
    a.rot_scale_v = qc.n_rot_v ? 1.f / std::sqrt(float(qc.n_rot_v)) : 1.f;
    a.out_ld_token = n_head * hd;
    a.n_tokens = qc.n_tokens;
    a.p0 = qc.n_kv - qc.n_tokens;
    a.n_head = n_head;
    a.n_head_kv = n_head_kv;
    a.head_dim = hd;
    a.scale = 0.25f;
    a.workspace = ws.get();
    a.workspace_bytes = ws.size();
    a.out = out_rows.get();
    cuda::attention_rows(a, nullptr);
    const auto want = out_rows.download();
    const std::string shape = std::string(type_name(qc.k)) + "/" + std::string(type_name(qc.v)) + " d=" + std::to_string(hd) +
                              " rot " + std::to_string(qc.n_rot_k) + "/" + std::to_string(qc.n_rot_v) +
                              " n_kv=" + std::to_string(qc.n_kv) + " n=" + std::to_string(qc.n_tokens);
    a.out = out_fast.get();
    ASSERT_TRUE(cuda::attention_split_applies(a)) << shape;
    cuda::attention_split(a, nullptr);
    report("attention_split vs rows", shape, nmse(want, out_fast.download()), 1e-10);
    ASSERT_TRUE(cuda::attention_staged_applies(a)) << shape;
    cuda::attention_staged(a, nullptr);
    report("attention_staged vs rows", shape, nmse(want, out_fast.download()), 1e-10);
  }
}

TEST(GpuAttention, Prefill) {
  FERRY_REQUIRE_GPU();
  run({16, 2, 256, 0, 70, GgmlType::F16, true}, 2);
  run({32, 4, 128, 30, 45, GgmlType::F16, false}, 2);
  run({8, 2, 64, 0, 17, GgmlType::F32, false}, 2);
  run({16, 2, 256, 100, 33, GgmlType::F32, true}, 0);
  run({32, 4, 128, 0, 200, GgmlType::F16, false}, 1);  // the rows kernel is correct for any n
}

TEST(GpuAttention, RejectsBadShapes) {
  FERRY_REQUIRE_GPU();
  DevBuf<float> buf(4096);
  cuda::AttentionArgs a;
  a.q = a.out = buf.get();
  a.k_cache = a.v_cache = buf.get();
  a.k_type = a.v_type = GgmlType::F32;
  a.n_tokens = 1;
  a.n_head = 6;
  a.n_head_kv = 4;  // not a divisor
  a.head_dim = 64;
  a.q_ld_head = 64;
  a.q_ld_token = 6 * 64;
  a.out_ld_token = 6 * 64;
  EXPECT_THROW(cuda::attention(a, nullptr), Error);
  a.n_head_kv = 2;
  a.head_dim = 96;  // unsupported head size
  a.q_ld_head = 96;
  a.q_ld_token = a.out_ld_token = 6 * 96;
  EXPECT_THROW(cuda::attention(a, nullptr), Error);
}

#else
TEST(GpuAttention, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace ferry::gputest
