// CudaOps against CpuOps (the backend the oracle tests validate against llama.cpp) on the same
// random inputs, op by op through the Ops interface. Bounds allow for the documented numeric
// differences: the CPU quantizes activations for quantized weights (Q8_0 / Q8_K / F16) and rounds
// the attention query and probabilities to F16 with an F16 cache; the GPU keeps them float.
#include "tests/gpu/gpu_test_util.hpp"

#include <cstring>

#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device.hpp"
#include "tests/gpu/backend_pair.hpp"
#include "runtime/core/fp16.hpp"

namespace ferry::gputest {
namespace {

#if FERRY_HAVE_CUDA

std::vector<uint8_t> quantized(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  return quantize_rows(t, random_floats(rows * cols, seed), rows, cols, seed);
}

TEST(GpuCudaOps, MatmulAndEmbed) {
  FERRY_REQUIRE_GPU();
  Backends b;
  const int64_t rows = 200, cols = 512;
  std::vector<std::vector<uint8_t>> keep;  // host weights outlive the Ops, as mmapped GGUF data does
  for (GgmlType t : kCudaWeightTypes) {
    const auto& wq = keep.emplace_back(quantized(t, rows, cols, 3 + static_cast<uint32_t>(t)));
    const WeightView host{wq.data(), t, rows, cols};
    const WeightView dw = b.gpu->resident(host);
    EXPECT_EQ(b.gpu->resident(host).data, dw.data) << "resident() must reuse its copy";
    // F32: the same math up to float rounding. Others: the CPU quantizes activations (Q8_0/Q8_K,
    // F16/BF16 rounding) and large batches run cuBLAS with f16 inputs on the GPU.
    const double bound = t == GgmlType::F32 ? 1e-10 : 1e-4;
    for (int64_t n : {1, 5, 40}) {
      const int64_t ldx = cols + 4;
      const auto x = random_floats(n * ldx, 9, -2.f, 2.f);
      std::vector<float> ycpu(n * rows);
      b.cpu.matmul(host, x.data(), ldx, n, ycpu.data(), rows);
      auto dx = b.up(x);
      DeviceBuffer dy = b.gpu->alloc(n * rows * 4);
      b.gpu->matmul(dw, dx.f32(), ldx, n, dy.f32(), rows);
      report("CudaOps::matmul vs CpuOps", std::string(type_name(t)) + " 200x512 n=" + std::to_string(n),
             nmse(ycpu, b.down<float>(dy, n * rows)), bound);
    }
    // A view at a 4-byte offset (not 16-byte aligned) goes through the packing path.
    const auto x = random_floats(3 * cols + 1, 10);
    std::vector<float> ycpu(3 * rows);
    b.cpu.matmul(host, x.data() + 1, cols, 3, ycpu.data(), rows);
    auto dx = b.up(x);
    DeviceBuffer dy = b.gpu->alloc(3 * rows * 4);
    b.gpu->matmul(dw, dx.f32() + 1, cols, 3, dy.f32(), rows);
    report("CudaOps::matmul (unaligned x)", std::string(type_name(t)) + " 200x512 n=3", nmse(ycpu, b.down<float>(dy, 3 * rows)), bound);

    const std::vector<int32_t> ids = {0, 199, 7, 7};
    std::vector<float> ecpu(ids.size() * cols);
    b.cpu.embed(host, ids.data(), static_cast<int64_t>(ids.size()), ecpu.data());
    auto dids = b.up(ids);
    DeviceBuffer de = b.gpu->alloc(ecpu.size() * 4);
    b.gpu->embed(dw, dids.i32(), static_cast<int64_t>(ids.size()), de.f32());
    report_exact("CudaOps::embed vs CpuOps", std::string(type_name(t)), b.down<float>(de, ecpu.size()) == ecpu);
  }
}

// CudaOpsOptions::int8_dot: one-token matmuls of the quantized types run the integer matvec
// (activations rounded to 8 bits: same 1e-4 bound against the CPU, which quantizes them too);
// batches, other types, and a CudaOps without matmul workspace keep the float kernels.
TEST(GpuCudaOps, MatmulInt8Dot) {
  FERRY_REQUIRE_GPU();
  Backends b;
  CudaOpsOptions int8_opts, no_ws_opts;
  int8_opts.int8_dot = no_ws_opts.int8_dot = true;
  no_ws_opts.matmul_workspace_bytes = 0;
  auto gpu8 = make_cuda_ops(*b.dev, int8_opts);
  auto gpu8_no_ws = make_cuda_ops(*b.dev, no_ws_opts);
  const int64_t rows = 200, cols = 512;
  for (GgmlType t : kCudaWeightTypes) {
    if (t == GgmlType::F32 || t == GgmlType::BF16) continue;  // F16 stands for the float types
    const auto wq = quantized(t, rows, cols, 13 + static_cast<uint32_t>(t));
    const WeightView host{wq.data(), t, rows, cols};
    for (int64_t n : {1, 5}) {
      const auto x = random_floats(n * cols, 19, -2.f, 2.f);
      std::vector<float> ycpu(n * rows);
      b.cpu.matmul(host, x.data(), cols, n, ycpu.data(), rows);
      std::vector<float> ys[3];
      Ops* ops[3] = {b.gpu.get(), gpu8.get(), gpu8_no_ws.get()};
      for (int i = 0; i < 3; ++i) {
        const WeightView dw = ops[i]->resident(host);
        DeviceBuffer dx = ops[i]->alloc(x.size() * 4), dy = ops[i]->alloc(n * rows * 4);
        ops[i]->to_device(dx.data(), x.data(), x.size() * 4);
        ops[i]->matmul(dw, dx.f32(), cols, n, dy.f32(), rows);
        ys[i].resize(n * rows);
        ops[i]->to_host(ys[i].data(), dy.data(), n * rows * 4);
      }
      const bool integer_path = n == 1 && t != GgmlType::F16;
      if (integer_path) EXPECT_NE(ys[1], ys[0]) << type_name(t) << ": int8_dot must take the integer matvec";
      else EXPECT_EQ(ys[1], ys[0]) << type_name(t) << " n=" << n << ": float kernels expected";
      EXPECT_EQ(ys[2], ys[0]) << type_name(t) << ": without workspace the float matvec";
      report(std::string("CudaOps::matmul int8_dot vs CpuOps") + (integer_path ? "" : " (float path)"),
             std::string(type_name(t)) + " 200x512 n=" + std::to_string(n), nmse(ycpu, ys[1]), 1e-4);
    }
  }
}

TEST(GpuCudaOps, RowOps) {
  FERRY_REQUIRE_GPU();
  Backends b;
  const int64_t rows = 6, n = 2048;
  auto x = random_floats(rows * n, 1, -3.f, 3.f);
  const auto w = random_floats(n, 2, 0.5f, 1.5f), y = random_floats(rows * n, 3), g = random_floats(rows, 4, -2.f, 2.f);
  auto dx = b.up(x), dw = b.up(w), dy = b.up(y), dg = b.up(g);
  DeviceBuffer dout = b.gpu->alloc(rows * n * 4);
  std::vector<float> out(rows * n);

  b.cpu.rmsnorm(x.data(), w.data(), rows, n, n, 1e-6f, out.data());
  b.gpu->rmsnorm(dx.f32(), dw.f32(), rows, n, n, 1e-6f, dout.f32());
  report("CudaOps::rmsnorm vs CpuOps", "6x2048", nmse(out, b.down<float>(dout, out.size())), 1e-10);

  b.cpu.swiglu(x.data(), y.data(), rows, n, out.data());
  b.gpu->swiglu(dx.f32(), dy.f32(), rows, n, dout.f32());
  report("CudaOps::swiglu vs CpuOps", "6x2048", nmse(out, b.down<float>(dout, out.size())), 1e-10);

  b.cpu.add(x.data(), y.data(), rows * n, out.data());
  b.gpu->add(dx.f32(), dy.f32(), rows * n, dout.f32());
  report("CudaOps::add vs CpuOps", "12288", nmse(out, b.down<float>(dout, out.size())), 1e-14);

  std::vector<float> acc = y;
  b.cpu.sigmoid_gated_add(x.data(), g.data(), rows, n, acc.data());
  auto dacc = b.up(y);
  b.gpu->sigmoid_gated_add(dx.f32(), dg.f32(), rows, n, dacc.f32());
  report("CudaOps::sigmoid_gated_add vs CpuOps", "6x2048", nmse(acc, b.down<float>(dacc, acc.size())), 1e-12);

  std::vector<float> xs = x;
  b.cpu.scale(xs.data(), rows * n, 0.3f);
  b.gpu->scale(dx.f32(), rows * n, 0.3f);
  report("CudaOps::scale vs CpuOps", "12288", nmse(xs, b.down<float>(dx, xs.size())), 1e-14);

  std::vector<int32_t> am(rows);
  b.cpu.argmax(x.data(), rows, n, am.data());
  DeviceBuffer dam = b.gpu->alloc(rows * 4);
  b.gpu->argmax(dy.f32(), rows, n, dam.i32());  // y, not x: x was scaled on the GPU only
  std::vector<int32_t> am_y(rows);
  b.cpu.argmax(y.data(), rows, n, am_y.data());
  report_exact("CudaOps::argmax vs CpuOps", "6x2048", b.down<int32_t>(dam, rows) == am_y);

  const int32_t n_exp = 128, k = 8;
  const auto logits = random_floats(5 * n_exp, 5, -4.f, 4.f);
  std::vector<int32_t> ids(5 * k);
  std::vector<float> wts(5 * k);
  b.cpu.moe_route(logits.data(), 5, n_exp, k, true, 1.f, ids.data(), wts.data());
  auto dl = b.up(logits);
  DeviceBuffer dids = b.gpu->alloc(5 * k * 4), dwts = b.gpu->alloc(5 * k * 4);
  b.gpu->moe_route(dl.f32(), 5, n_exp, k, true, 1.f, dids.i32(), dwts.f32());
  report_exact("CudaOps::moe_route ids vs CpuOps", "5x128 k=8", b.down<int32_t>(dids, ids.size()) == ids);
  report("CudaOps::moe_route weights vs CpuOps", "5x128 k=8", nmse(wts, b.down<float>(dwts, wts.size())), 1e-10);
}

TEST(GpuCudaOps, RopeKvAttention) {
  FERRY_REQUIRE_GPU();
  Backends b;
  // qwen35 full-attention layer: 16 q heads of 256 with the gate interleaved, 2 KV heads, partial RoPE.
  const int32_t n_head = 16, n_kv = 2, hd = 256, n_rot = 64;
  const int64_t n_ctx = 96, q_head_stride = 2 * hd, q_token_stride = n_head * q_head_stride;
  for (GgmlType kvt : {GgmlType::F32, GgmlType::F16}) {
    std::vector<uint8_t> kc_cpu(n_ctx * n_kv * hd * 4), vc_cpu(kc_cpu.size());
    DeviceBuffer kc_gpu = b.gpu->alloc(kc_cpu.size()), vc_gpu = b.gpu->alloc(vc_cpu.size());
    KvLayerView kv_cpu{kc_cpu.data(), vc_cpu.data(), kvt, kvt, n_ctx, n_kv, hd, hd};
    KvLayerView kv_gpu{kc_gpu.data(), vc_gpu.data(), kvt, kvt, n_ctx, n_kv, hd, hd};
    int64_t pos0 = 0;
    for (int64_t n_tokens : {40, 1, 3}) {  // prefill, then decode steps through the cache
      auto q = random_floats(n_tokens * q_token_stride, 10 + n_tokens);
      auto k = random_floats(n_tokens * n_kv * hd, 20 + n_tokens), v = random_floats(n_tokens * n_kv * hd, 30 + n_tokens);
      std::vector<int32_t> pos(n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t) pos[t] = static_cast<int32_t>(pos0 + t);
      auto dq = b.up(q), dk = b.up(k), dv = b.up(v), dpos = b.up(pos);
      b.cpu.rope_neox(q.data(), n_tokens, n_head, q_token_stride, q_head_stride, n_rot, pos.data(), 1e7f);
      b.cpu.rope_neox(k.data(), n_tokens, n_kv, n_kv * hd, hd, n_rot, pos.data(), 1e7f);
      b.gpu->rope_neox(dq.f32(), n_tokens, n_head, q_token_stride, q_head_stride, n_rot, dpos.i32(), 1e7f);
      b.gpu->rope_neox(dk.f32(), n_tokens, n_kv, n_kv * hd, hd, n_rot, dpos.i32(), 1e7f);
      report("CudaOps::rope_neox vs CpuOps", "q 16x256 rot 64, n=" + std::to_string(n_tokens),
             nmse(q, b.down<float>(dq, q.size())), 1e-10);
      b.cpu.kv_store(kv_cpu, pos0, n_tokens, k.data(), v.data());
      b.gpu->kv_store(kv_gpu, pos0, n_tokens, dk.f32(), dv.f32());
      std::vector<float> out(n_tokens * n_head * hd);
      DeviceBuffer dout = b.gpu->alloc(out.size() * 4);
      AttentionArgs a;
      a.q = q.data();
      a.q_token_stride = q_token_stride;
      a.q_head_stride = q_head_stride;
      a.gate = q.data() + hd;
      a.kv = kv_cpu;
      a.n_tokens = static_cast<int32_t>(n_tokens);
      a.n_head = n_head;
      a.pos0 = pos0;
      a.scale = 1.f / 16;
      a.out = out.data();
      b.cpu.attention(a);
      a.q = dq.f32();
      a.gate = dq.f32() + hd;
      a.kv = kv_gpu;
      a.out = dout.f32();
      b.gpu->attention(a);
      report("CudaOps::attention vs CpuOps", std::string(type_name(kvt)) + " 16/2h d=256 gated p0=" + std::to_string(pos0) +
                                                 " n=" + std::to_string(n_tokens),
             nmse(out, b.down<float>(dout, out.size())), kvt == GgmlType::F16 ? 1e-5 : 1e-10);
      pos0 += n_tokens;
    }
  }
  const auto mem = b.dev->memory();
  std::printf("[gpu-info] CudaOps test device memory: peak %s of budget %s\n", format_size(mem.peak_bytes).c_str(),
              format_size(mem.budget_bytes).c_str());
}

#else
TEST(GpuCudaOps, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace ferry::gputest
