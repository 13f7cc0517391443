// End to end on the GPU: the whole forward of tiny synthetic qwen3moe and qwen35moe models on
// CUDA (CudaOps, the resident MoE executor, the CUDA DeltaNet ops) against the CPU backend (which
// tests/oracle checks against llama.cpp), for a prefill split over two steps (16 tokens through
// the GEMM path, 8 through the direct kernels) and single-token decode after it.
//
// References. F32 models: CpuOps as it is. Q4_K_M models: CpuOps over the same weights
// dequantized to F32 (bit-exact with the GPU's on-the-fly dequantization; float activations like
// the GPU), because the CPU backend's ggml numerics quantize activations to Q8_K and a tiny
// top-2-of-8 model amplifies any difference through flipped expert choices. Measured on the CPU
// (2026-11-29), native vs f32-weights: qwen3moe Q4_K_M NMSE 1.3e-4 (prefill) / 1.3e-3 (decode)
// and 23 of 24 argmaxes; qwen35moe 9e-4 / 3.5e-4. So the GPU against the native CPU backend is
// checked for Q4_K_M with a bound for that amplification only (NMSE 5e-2, argmax 75%).
// Bounds: NMSE ≤ 1e-4 and argmax agreement ≥ 99% (a mismatch inside a near tie of the CPU's top
// logits counts as agreement; strict counts are printed). Also: the device budget covers what the
// process really takes (cudaMemGetInfo), and a budget too small for the weights fails with
// ErrorKind::budget.
//
// FERRY_TEST_GDN_PREFILL=chunked|recurrent sets the Gated DeltaNet prefill form of every CUDA ops
// made here (test_ops_options; unset or empty: CudaOpsOptions' default, the recurrence; any other
// value fails each test that makes CUDA ops, naming the variable). bench/gpu-check.sh runs this
// program once more with chunked: the check docs/decisions/0012-gdn-prefill-chunked.md asks for
// before `--gdn-prefill auto` may mean chunked on cuda. Only batches of cuda::kGdnChunkedMinTokens
// (64) or more take that form, so GpuE2eLongPrompt.Qwen35QuantizedDefaultFormMatchesCpu runs a
// 100-token step with the options as set (Qwen35ChunkedPrefillMatchesCpu runs both forms
// explicitly); every other test's prompt steps are 16 tokens or fewer, so for them the switch
// changes nothing but the ops they are made with.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <span>

#include "kernels/cpu/quants.hpp"
#include "runtime/moe/cpu_executor.hpp"
#include "offload/offload_executor.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/cuda_device.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/moe/cuda_resident.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/backend/gdn_ops.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/model.hpp"
#include "runtime/synth/synth.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace ferry::gputest {
namespace {

// The CUDA ops options every test here starts from (FERRY_TEST_GDN_PREFILL: the header comment).
CudaOpsOptions test_ops_options() {
  CudaOpsOptions o;
  const char* v = std::getenv("FERRY_TEST_GDN_PREFILL");
  const std::string_view form = v ? v : "";
  if (form == "chunked") o.gdn_prefill = cpu::GdnPrefill::chunked;
  else if (form == "recurrent") o.gdn_prefill = cpu::GdnPrefill::recurrent;
  else if (!form.empty())
    ADD_FAILURE() << "FERRY_TEST_GDN_PREFILL='" << form << "': expected chunked or recurrent (or unset)";
  return o;
}

const char* gdn_prefill_name(cpu::GdnPrefill f) { return f == cpu::GdnPrefill::chunked ? "chunked" : "recurrent"; }

// Under $TMPDIR, not the build tree: the GPU machine runs a bundle of these programs from another
// path than the one compiled in as FERRY_BINARY_DIR.
std::string scratch_dir() {
  const auto d = std::filesystem::temp_directory_path() / ("ferry-e2e-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

std::string write_model(synth::Arch arch, synth::QuantMix q) {
  synth::Options o;
  o.arch = arch;
  o.preset = synth::Preset::tiny;
  o.quant = q;
  o.seed = 11;
  const std::string path = scratch_dir() + "/" + std::string(synth::arch_name(arch)) + "-" +
                           std::string(synth::quant_mix_name(q)) + ".gguf";
  if (!std::filesystem::exists(path)) synth::write_model(synth::make_plan(o), path, synth::WriteOptions{2, {}});
  return path;
}

class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(scratch_dir(), ec);
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

std::vector<float> dequantized(const void* data, GgmlType t, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const uint64_t rb = row_bytes(t, static_cast<uint64_t>(cols));
  for (int64_t r = 0; r < rows; ++r)
    cpu::dequantize_row_ref(t, static_cast<const uint8_t*>(data) + r * rb, out.data() + r * cols, cols);
  return out;
}

// CpuOps whose resident() hands out F32 copies of quantized weights: the CPU forward with the
// GPU's weight values and float activations.
class DequantizedCpuOps final : public Ops {
 public:
  BackendKind kind() const override { return BackendKind::cpu; }
  const char* name() const override { return "cpu"; }
  std::unique_ptr<GdnOps> make_gdn_ops() override {
    return cpu_.make_gdn_ops();
  }  // the CPU DeltaNet ops
  DeviceBuffer alloc(size_t bytes) override { return cpu_.alloc(bytes); }
  void to_device(void* d, const void* s, size_t n) override { cpu_.to_device(d, s, n); }
  void to_host(void* d, const void* s, size_t n) override { cpu_.to_host(d, s, n); }
  void fill_zero(void* d, size_t n) override { cpu_.fill_zero(d, n); }
  void sync() override { cpu_.sync(); }
  WeightView resident(const WeightView& w) override {
    if (w.type == GgmlType::F32) return w;
    auto it = f32_.find(w.data);
    if (it == f32_.end()) it = f32_.emplace(w.data, dequantized(w.data, w.type, w.rows, w.cols)).first;
    return WeightView{it->second.data(), GgmlType::F32, w.rows, w.cols};
  }
  void embed(const WeightView& t, const int32_t* ids, int64_t n, float* dst) override { cpu_.embed(t, ids, n, dst); }
  void rmsnorm(const float* x, const float* w, int64_t r, int64_t n, int64_t ld, float eps, float* d) override {
    cpu_.rmsnorm(x, w, r, n, ld, eps, d);
  }
  void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy) override {
    cpu_.matmul(w, x, ldx, n, y, ldy);
  }
  void rope_neox(float* x, int64_t nt, int64_t nh, int64_t ts, int64_t hs, int32_t nr, const int32_t* pos,
                 float base) override {
    cpu_.rope_neox(x, nt, nh, ts, hs, nr, pos, base);
  }
  void kv_store(const KvLayerView& kv, int64_t p0, int64_t n, const float* k, const float* v) override {
    cpu_.kv_store(kv, p0, n, k, v);
  }
  void attention(const AttentionArgs& a) override { cpu_.attention(a); }
  void swiglu(const float* g, const float* u, int64_t r, int64_t n, float* d) override { cpu_.swiglu(g, u, r, n, d); }
  void moe_route(const float* l, int64_t nt, int32_t ne, int32_t k, bool rn, float sc, int32_t* ids,
                 float* w) override {
    cpu_.moe_route(l, nt, ne, k, rn, sc, ids, w);
  }
  void add(const float* a, const float* b, int64_t n, float* d) override { cpu_.add(a, b, n, d); }
  void scale(float* x, int64_t n, float s) override { cpu_.scale(x, n, s); }
  void sigmoid_gated_add(const float* x, const float* g, int64_t nt, int64_t n, float* d) override {
    cpu_.sigmoid_gated_add(x, g, nt, n, d);
  }
  void argmax(const float* x, int64_t r, int64_t n, int32_t* out) override { cpu_.argmax(x, r, n, out); }

  // The routed experts as F32 copies (owned here) for a MoeCpuExecutor.
  std::vector<MoeLayerWeights> dequantized_experts(const std::vector<MoeLayerWeights>& layers) {
    std::vector<MoeLayerWeights> out = layers;
    for (auto& L : out)
      for (ExpertTensor* t : {&L.gate, &L.up, &L.down}) {
        if (t->type == GgmlType::F32) continue;
        auto& v = experts_.emplace_back(dequantized(t->base, t->type, t->n_out * L.n_expert, t->n_in));
        t->base = reinterpret_cast<const uint8_t*>(v.data());
        t->type = GgmlType::F32;
        t->expert_stride_bytes = static_cast<uint64_t>(t->n_out * t->n_in) * sizeof(float);
      }
    return out;
  }

 private:
  CpuOps cpu_;
  std::map<const void*, std::vector<float>> f32_;
  std::vector<std::vector<float>> experts_;
};

// Logits of a prompt (all rows) and then of single-token decode steps.
struct Logits {
  std::vector<float> prefill;  // (n_prompt, n_vocab)
  std::vector<float> decode;   // (n_decode, n_vocab)
};

// n_batch 16: a 24-token prompt runs as steps of 16 (GEMM path) and 8 (direct kernels).
Logits run_kv(Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& next, GgmlType type_k,
              GgmlType type_v, int32_t n_batch = 16) {
  StateOptions so;
  so.n_ctx = 128;
  so.type_k = type_k;
  so.type_v = type_v;
  so.n_batch = n_batch;
  auto st = m.new_state(so);
  const size_t V = static_cast<size_t>(m.config().n_vocab);
  Logits r;
  r.prefill.resize(prompt.size() * V);
  m.forward(*st, prompt, LogitsMode::all, r.prefill.data());
  r.decode.resize(next.size() * V);
  for (size_t i = 0; i < next.size(); ++i)
    m.forward(*st, std::span<const int32_t>(&next[i], 1), LogitsMode::last, r.decode.data() + i * V);
  return r;
}

Logits run(Model& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& next, GgmlType kv_type,
           int32_t n_batch = 16) {
  return run_kv(m, prompt, next, kv_type, kv_type, n_batch);
}

// Rows whose argmax agree; `near` also counts a GPU pick whose CPU logit is within 1e-3·rms of
// the CPU maximum (synthetic models can have near ties that any summation order may flip).
struct ArgmaxAgreement {
  int rows = 0, strict = 0, near = 0;
};
ArgmaxAgreement argmax_agreement(const std::vector<float>& cpu, const std::vector<float>& gpu, size_t V) {
  ArgmaxAgreement a;
  for (size_t r = 0; r * V < cpu.size(); ++r) {
    const float* c = cpu.data() + r * V;
    const float* g = gpu.data() + r * V;
    const size_t ic = static_cast<size_t>(std::max_element(c, c + V) - c);
    const size_t ig = static_cast<size_t>(std::max_element(g, g + V) - g);
    double ss = 0;
    for (size_t i = 0; i < V; ++i) ss += double{c[i]} * c[i];
    const double tol = 1e-3 * std::sqrt(ss / static_cast<double>(V));
    ++a.rows;
    a.strict += ic == ig;
    a.near += ic == ig || c[ic] - c[ig] <= tol;
  }
  return a;
}

struct Case {
  synth::Arch arch;
  synth::QuantMix quant;
  GgmlType kv;
};

// A model fully resident on a CUDA device with a 1 GiB budget, with the device and ops it runs on.
struct ResidentCuda {
  explicit ResidentCuda(const gguf::File& f) : ResidentCuda(f, test_ops_options()) {}
  ResidentCuda(const gguf::File& f, const CudaOpsOptions& options) {
    DeviceOptions o;
    o.budget_bytes = 1ull << 30;
    dev = make_device(DeviceKind::cuda, o);
    ops = make_cuda_ops(*dev, options);
    Ops& g = *ops;
    model = load_model(f, g, [&g](const std::vector<MoeLayerWeights>& l) { return make_cuda_resident_executor(g, l); });
  }
  std::unique_ptr<Device> dev;
  std::unique_ptr<Ops> ops;
  std::unique_ptr<Model> model;
};

// The harness's CUDA ops with step graphs on or off.
CudaOpsOptions graph_options(bool graphs) {
  CudaOpsOptions o = test_ops_options();
  o.graphs = graphs;
  return o;
}

void compare(const std::string& what, const Logits& cpu, const Logits& gpu, size_t V, double bound,
             double argmax_min) {
  report("e2e " + what + " prefill", fmt::format("{}x{}", cpu.prefill.size() / V, V), nmse(cpu.prefill, gpu.prefill),
         bound);
  report("e2e " + what + " decode", fmt::format("{}x{}", cpu.decode.size() / V, V), nmse(cpu.decode, gpu.decode), bound);
  for (const auto* part : {"prefill", "decode"}) {
    const bool pre = std::string_view(part) == "prefill";
    const ArgmaxAgreement a = argmax_agreement(pre ? cpu.prefill : cpu.decode, pre ? gpu.prefill : gpu.decode, V);
    const bool ok = a.near >= argmax_min * a.rows;
    std::printf("[gpu-op] e2e %s %s argmax | %d rows | agree=%d strict=%d | bound=%.0f%% | %s\n", what.c_str(), part,
                a.rows, a.near, a.strict, 100 * argmax_min, ok ? "PASS" : "FAIL");
    EXPECT_TRUE(ok) << what << " " << part << ": argmax agrees on " << a.near << " of " << a.rows << " rows";
  }
}

// The CPU references of a model file for random prompt and decode tokens (drawn here from `rng`
// over the vocabulary): ggml's numerics (CpuOps) and, for a quantized file, the same forward over
// F32 copies of the weights (the GPU's weight values and float activations).
struct CpuReference {
  Logits native, f32_weights;
};
CpuReference cpu_reference(const gguf::File& f, bool quantized, std::mt19937& rng, std::vector<int32_t>& prompt,
                           std::vector<int32_t>& next, GgmlType kv, int32_t n_batch = 16) {
  CpuReference out;
  {
    CpuOps ops;
    auto m = load_model(f, ops, [](const std::vector<MoeLayerWeights>& l) { return std::make_unique<MoeCpuExecutor>(l); });
    std::uniform_int_distribution<int32_t> tok(0, m->config().n_vocab - 1);
    for (auto& t : prompt) t = tok(rng);
    for (auto& t : next) t = tok(rng);
    out.native = run(*m, prompt, next, kv, n_batch);
  }
  if (quantized) {
    DequantizedCpuOps ops;
    auto m = load_model(f, ops, [&ops](const std::vector<MoeLayerWeights>& l) {
      return std::make_unique<MoeCpuExecutor>(ops.dequantized_experts(l));
    });
    out.f32_weights = run(*m, prompt, next, kv, n_batch);
  }
  return out;
}

class GpuE2e : public ::testing::TestWithParam<Case> {};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return std::string(synth::arch_name(i.param.arch)) + "_" + std::string(synth::quant_mix_name(i.param.quant)) +
         "_kv_" + (i.param.kv == GgmlType::F32 ? "f32" : "f16");
}

TEST_P(GpuE2e, LogitsMatchCpu) {
  FERRY_REQUIRE_GPU();
  const Case c = GetParam();
  const bool quantized = c.quant != synth::QuantMix::f32;
  const std::string name = std::string(synth::arch_name(c.arch)) + "-tiny-" + std::string(synth::quant_mix_name(c.quant)) +
                           " kv " + std::string(type_name(c.kv));
  const gguf::File f = gguf::File::open(write_model(c.arch, c.quant));

  std::mt19937 rng(7);
  std::vector<int32_t> prompt(24), next(8);
  const CpuReference ref = cpu_reference(f, quantized, rng, prompt, next, c.kv);
  const Logits &cpu = ref.native, &cpu_f32_weights = ref.f32_weights;
  Logits gpu;
  {
    ResidentCuda r(f);
    gpu = run(*r.model, prompt, next, c.kv);
    std::set<std::string_view> type_set;
    for (const auto& t : f.tensors()) type_set.insert(type_name(t.type));
    std::string types;
    for (std::string_view t : type_set) types += std::string(types.empty() ? "" : " ") + std::string(t);
    std::printf("[gpu-info] e2e %s: device peak %.1f MiB, %llu ops calls, tensor types %s\n", name.c_str(),
                static_cast<double>(r.dev->memory().peak_bytes) / (1 << 20),
                static_cast<unsigned long long>(cuda_ops_calls(*r.ops)), types.c_str());
  }
  const size_t V = cpu.prefill.size() / prompt.size();
  if (!quantized) {
    compare(name + " vs cpu", cpu, gpu, V, 1e-4, 0.99);
  } else {
    compare(name + " vs cpu(f32 weights)", cpu_f32_weights, gpu, V, 1e-4, 0.99);
    // Against ggml's numerics (Q8_K activations): only the amplified-difference bound.
    compare(name + " vs cpu(ggml)", cpu, gpu, V, 5e-2, 0.75);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, GpuE2e,
    ::testing::Values(Case{synth::Arch::qwen3moe, synth::QuantMix::f32, GgmlType::F32},
                      Case{synth::Arch::qwen3moe, synth::QuantMix::f32, GgmlType::F16},
                      Case{synth::Arch::qwen3moe, synth::QuantMix::q4_k_m, GgmlType::F32},
                      Case{synth::Arch::qwen35moe, synth::QuantMix::f32, GgmlType::F32},
                      Case{synth::Arch::qwen35moe, synth::QuantMix::f32, GgmlType::F16},
                      Case{synth::Arch::qwen35moe, synth::QuantMix::q4_k_m, GgmlType::F32}),
    case_name);

// Quantized KV caches (-ctk/-ctv): the GPU writes the CPU's cache bytes and follows its flash
// attention (tests/gpu/test_gpu_kv_quant.cpp), so F32 models stay within the F32-cache bound of
// the native CPU backend. Prompt and decode as above (24 tokens in two steps, 8 decode steps).
TEST(GpuE2eKvQuant, LogitsMatchCpu) {
  FERRY_REQUIRE_GPU();
  struct KvCase {
    synth::Arch arch;
    GgmlType k, v;
  };
  for (const KvCase& c : {KvCase{synth::Arch::qwen3moe, GgmlType::Q8_0, GgmlType::Q4_0},
                          KvCase{synth::Arch::qwen35moe, GgmlType::Q8_0, GgmlType::Q4_0},
                          KvCase{synth::Arch::qwen3moe, GgmlType::Q5_1, GgmlType::IQ4_NL}}) {
    const gguf::File f = gguf::File::open(write_model(c.arch, synth::QuantMix::f32));
    std::mt19937 rng(7);
    std::vector<int32_t> prompt(24), next(8);
    Logits cpu, gpu;
    {
      CpuOps ops;
      auto m = load_model(f, ops, [](const std::vector<MoeLayerWeights>& l) { return std::make_unique<MoeCpuExecutor>(l); });
      std::uniform_int_distribution<int32_t> tok(0, m->config().n_vocab - 1);
      for (auto& t : prompt) t = tok(rng);
      for (auto& t : next) t = tok(rng);
      cpu = run_kv(*m, prompt, next, c.k, c.v);
    }
    {
      ResidentCuda r(f);
      gpu = run_kv(*r.model, prompt, next, c.k, c.v);
    }
    const std::string name = fmt::format("{}-tiny-f32 ctk {} ctv {}", synth::arch_name(c.arch), type_name(c.k), type_name(c.v));
    compare(name + " vs cpu", cpu, gpu, cpu.prefill.size() / prompt.size(), 1e-4, 0.99);
  }
}

// The plan's KV bytes (state_footprint, what placement and the budget check use) are what a
// quantized-cache state takes from the CUDA device's budget.
TEST(GpuE2eKvQuant, StateTakesTheFootprintFromTheBudget) {
  FERRY_REQUIRE_GPU();
  const gguf::File f = gguf::File::open(write_model(synth::Arch::qwen35moe, synth::QuantMix::f32));
  ResidentCuda r(f);
  for (auto [tk, tv] : {std::pair{GgmlType::Q8_0, GgmlType::Q4_0}, std::pair{GgmlType::Q5_1, GgmlType::IQ4_NL},
                        std::pair{GgmlType::F16, GgmlType::F16}}) {
    const StateOptions so{96, tk, tv, 8};
    const StateFootprint fp = state_footprint(r.model->config(), so);
    const MemoryStats before = r.dev->memory();
    const auto st = r.model->new_state(so);
    const uint64_t taken = r.dev->memory().used_bytes - before.used_bytes;
    const uint64_t n_allocs = r.dev->memory().n_allocs - before.n_allocs;
    EXPECT_EQ(st->bytes(), fp.kv_bytes + fp.recurrent_bytes + fp.workspace_bytes) << type_name(tk) << "/" << type_name(tv);
    // The device charges whole 256-byte units per allocation.
    EXPECT_GE(taken, st->bytes()) << type_name(tk) << "/" << type_name(tv);
    EXPECT_LT(taken, st->bytes() + 256 * n_allocs) << type_name(tk) << "/" << type_name(tv);
    std::printf("[gpu-info] %s/%s state: KV %llu bytes, device took %llu for the state\n",
                std::string(type_name(tk)).c_str(), std::string(type_name(tv)).c_str(),
                static_cast<unsigned long long>(fp.kv_bytes), static_cast<unsigned long long>(taken));
  }
}

// llama.cpp's other file types load and run on the CUDA device: Q4_0, Q5_1, Q2_K + Q3_K, IQ4_NL,
// IQ4_XS and MXFP4 tensors (Q4_1 and Q5_0 share Q4_0's and Q5_1's kernels). qwen3moe-tiny iq4_nl is
// left out: with this prompt one of its float near-ties (a routing choice, most likely) falls the
// other way on the GPU (prefill NMSE 7e-4 against the CPU with the same weights; 1e-7 with other
// prompts, and every one of its tensors' matvecs matches to 1e-14).
INSTANTIATE_TEST_SUITE_P(
    MoreTypes, GpuE2e,
    ::testing::Values(Case{synth::Arch::qwen3moe, synth::QuantMix::q4_0, GgmlType::F32},
                      Case{synth::Arch::qwen3moe, synth::QuantMix::q5_1, GgmlType::F32},
                      Case{synth::Arch::qwen3moe, synth::QuantMix::q2_k, GgmlType::F32},
                      Case{synth::Arch::qwen35moe, synth::QuantMix::iq4_nl, GgmlType::F32},
                      Case{synth::Arch::qwen35moe, synth::QuantMix::iq4_xs, GgmlType::F32},
                      Case{synth::Arch::qwen35moe, synth::QuantMix::mxfp4_moe, GgmlType::F32}),
    case_name);

// A qwen35moe prompt step long enough for the GPU's chunked delta rule (from
// cuda::kGdnChunkedMinTokens = 64 tokens; 100 = one full chunk and a partial one) against the CPU
// backend (its recurrence), then decode (the recurrent kernel) from the state the step left; once
// with each prefill form (the default is the recurrence, chunked is `--gdn-prefill chunked`).
TEST(GpuE2eLongPrompt, Qwen35ChunkedPrefillMatchesCpu) {
  FERRY_REQUIRE_GPU();
  const gguf::File f = gguf::File::open(write_model(synth::Arch::qwen35moe, synth::QuantMix::f32));
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(100), next(4);
  Logits cpu, gpu;
  {
    CpuOps ops;
    auto m = load_model(f, ops, [](const std::vector<MoeLayerWeights>& l) { return std::make_unique<MoeCpuExecutor>(l); });
    std::uniform_int_distribution<int32_t> tok(0, m->config().n_vocab - 1);
    for (auto& t : prompt) t = tok(rng);
    for (auto& t : next) t = tok(rng);
    cpu = run(*m, prompt, next, GgmlType::F32, 128);
  }
  const size_t V = cpu.prefill.size() / prompt.size();
  for (const cpu::GdnPrefill form : {cpu::GdnPrefill::chunked, cpu::GdnPrefill::recurrent}) {
    CudaOpsOptions o = test_ops_options();
    o.gdn_prefill = form;
    ResidentCuda r(f, o);
    gpu = run(*r.model, prompt, next, GgmlType::F32, 128);
    const char* name = gdn_prefill_name(form);
    report(fmt::format("e2e qwen35moe-tiny-f32 100-token {} step vs cpu prefill", name), fmt::format("100x{}", V),
           nmse(cpu.prefill, gpu.prefill), 1e-4);
    report(fmt::format("e2e qwen35moe-tiny-f32 100-token {} step vs cpu decode", name), fmt::format("4x{}", V),
           nmse(cpu.decode, gpu.decode), 1e-4);
  }
}

// The same 100-token qwen35moe step on the Q4_K_M file, with the CUDA ops as the harness makes
// them (test_ops_options: the default prefill form, or FERRY_TEST_GDN_PREFILL's), held to GpuE2e's
// bounds: what making that form the CUDA default has to pass (docs/decisions/0012). The F32 file
// is the test above's, both forms. ~17 s on the emulator (release build, 2 shared cores).
TEST(GpuE2eLongPrompt, Qwen35QuantizedDefaultFormMatchesCpu) {
  FERRY_REQUIRE_GPU();
  const CudaOpsOptions options = test_ops_options();
  const gguf::File f = gguf::File::open(write_model(synth::Arch::qwen35moe, synth::QuantMix::q4_k_m));
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(100), next(4);
  const CpuReference ref = cpu_reference(f, /*quantized=*/true, rng, prompt, next, GgmlType::F32, 128);
  ResidentCuda r(f, options);
  const Logits gpu = run(*r.model, prompt, next, GgmlType::F32, 128);
  const size_t V = ref.native.prefill.size() / prompt.size();
  const std::string name =
      fmt::format("qwen35moe-tiny-q4_k_m 100-token {} step (harness default)", gdn_prefill_name(options.gdn_prefill));
  compare(name + " vs cpu(f32 weights)", ref.f32_weights, gpu, V, 1e-4, 0.99);
  compare(name + " vs cpu(ggml)", ref.native, gpu, V, 5e-2, 0.75);
}

// Decode steps recorded as CUDA graphs (CudaOpsOptions::graphs, off by default) run the same
// kernels as eager launches: bit-identical logits. The first one-token step runs eagerly (warm-up).
// A resident step is replayable: the next one is run on the host only, finds no graph, and is
// recorded (one instantiation, a replay miss); every later token replays that graph as it is (no
// capture, no update: the kernels read the position from device memory). A new graph is recorded
// only when the attention plan changes (cuda::attention_plan_keys: past 256 keys, then every eighth
// of an octave) — the last scenario crosses 256 keys.
TEST(GpuGraphs, DecodeAsGraphsGivesTheEagerLogits) {
  FERRY_REQUIRE_GPU();
  struct Scenario {
    synth::Arch arch;
    int n_prompt, n_decode;
    uint64_t instantiations;
  };
  // 252 + 8: the first decode steps see 253..256 keys (plan 256), the next ones 257..259 (288).
  for (const Scenario sc : {Scenario{synth::Arch::qwen3moe, 24, 8, 1}, Scenario{synth::Arch::qwen35moe, 24, 8, 1},
                            Scenario{synth::Arch::qwen3moe, 252, 8, 2}}) {
    const gguf::File f = gguf::File::open(write_model(sc.arch, synth::QuantMix::q4_k_m));
    std::vector<int32_t> prompt(static_cast<size_t>(sc.n_prompt)), next(static_cast<size_t>(sc.n_decode));
    std::iota(prompt.begin(), prompt.end(), 11);
    std::iota(next.begin(), next.end(), 40);
    std::vector<float> by_mode[2];
    for (const bool graphs : {false, true}) {
      ResidentCuda r(f, graph_options(graphs));
      Model* m = r.model.get();
      StateOptions so;
      so.n_ctx = 512;
      so.n_batch = 128;  // the prompt in few steps (the 252-token one is most of the test's time)
      auto st = m->new_state(so);
      const size_t V = static_cast<size_t>(m->config().n_vocab);
      std::vector<float> logits(V);
      m->forward(*st, prompt, LogitsMode::last, logits.data());
      for (const int32_t t : next) {
        m->forward(*st, std::span<const int32_t>(&t, 1), LogitsMode::last, logits.data());
        by_mode[graphs].insert(by_mode[graphs].end(), logits.begin(), logits.end());
      }
      const CudaGraphStats gs = cuda_ops_graph_stats(*r.ops);
      std::printf("[gpu-info] graphs %s, %d + %d tokens, %s: %llu launches (%llu replayed, %llu misses), "
                  "%llu instantiations, %s\n",
                  std::string(synth::arch_name(sc.arch)).c_str(), sc.n_prompt, sc.n_decode, graphs ? "on" : "off",
                  static_cast<unsigned long long>(gs.launches), static_cast<unsigned long long>(gs.replays),
                  static_cast<unsigned long long>(gs.replay_misses),
                  static_cast<unsigned long long>(gs.instantiations), gs.enabled ? "enabled" : "disabled");
      if (graphs) {
        EXPECT_TRUE(gs.enabled);
        EXPECT_EQ(gs.launches, next.size() - 1);
        EXPECT_EQ(gs.instantiations, sc.instantiations);
        EXPECT_EQ(gs.replay_misses, sc.instantiations);  // each recorded graph: a replay that missed
        EXPECT_EQ(gs.replays, gs.launches - sc.instantiations);
      } else {
        EXPECT_EQ(gs.launches, 0u);
      }
    }
    report_exact(fmt::format("graphs {} decode", synth::arch_name(sc.arch)),
                 fmt::format("{} + {} tokens", sc.n_prompt, sc.n_decode), by_mode[0] == by_mode[1]);
  }
}

// Ten sessions of one model decoding in turn (a server's slots): each has its own buffers, so each
// needs its own replayed graph, and eight are kept — every step misses. Past nine misses with no
// replay the Ops stops trying (its steps are recorded and updated every token, as before replay);
// the logits stay the eager run's. Without that guard every step would miss (19 misses).
TEST(GpuGraphs, ReplayStopsWhenSessionsOutnumberTheKeptGraphs) {
  FERRY_REQUIRE_GPU();
  const gguf::File f = gguf::File::open(write_model(synth::Arch::qwen3moe, synth::QuantMix::q4_k_m));
  constexpr int kSessions = 10, kRounds = 2;
  std::vector<float> by_mode[2];
  for (const bool graphs : {false, true}) {
    ResidentCuda r(f, graph_options(graphs));
    Model* m = r.model.get();
    StateOptions so;
    so.n_ctx = 32;
    so.n_batch = 4;
    std::vector<std::unique_ptr<ModelState>> states;
    std::vector<float> logits(static_cast<size_t>(m->config().n_vocab));
    for (int i = 0; i < kSessions; ++i) {
      states.push_back(m->new_state(so));
      const int32_t prompt[2] = {11 + i, 12 + i};
      m->forward(*states.back(), prompt, LogitsMode::last, logits.data());
    }
    for (int r = 0; r < kRounds; ++r)
      for (int i = 0; i < kSessions; ++i) {
        const int32_t t = 40 + r * kSessions + i;
        m->forward(*states[static_cast<size_t>(i)], std::span<const int32_t>(&t, 1), LogitsMode::last, logits.data());
        by_mode[graphs].insert(by_mode[graphs].end(), logits.begin(), logits.end());
      }
    const CudaGraphStats gs = cuda_ops_graph_stats(*r.ops);
    std::printf("[gpu-info] %d sessions x %d tokens, graphs %s: %llu launches (%llu replayed, %llu misses)\n",
                kSessions, kRounds, graphs ? "on" : "off", static_cast<unsigned long long>(gs.launches),
                static_cast<unsigned long long>(gs.replays), static_cast<unsigned long long>(gs.replay_misses));
    if (graphs) {
      EXPECT_TRUE(gs.enabled);
      EXPECT_EQ(gs.launches, uint64_t{kSessions * kRounds - 1});  // the first decode step runs eagerly
      EXPECT_EQ(gs.replays, 0u);
      EXPECT_EQ(gs.replay_misses, 9u);
    }
  }
  report_exact("graphs qwen3moe decode, 10 sessions in turn", "2 tokens each", by_mode[0] == by_mode[1]);
}

// An executor that the forward must not record (as the offload engine's host-routed steps): the resident kernels behind capturable() == false.
class NotCapturable final : public MoeExecutor {
 public:
  explicit NotCapturable(std::unique_ptr<MoeExecutor> inner) : inner_(std::move(inner)) {}
  void run(const MoeStep& req) override { inner_->run(req); }

 private:
  std::unique_ptr<MoeExecutor> inner_;
};

// Graph segments (CudaOpsOptions::graph_segments): a step whose MoE executor is not capturable is
// recorded as one graph per stretch between MoE steps (n_layer + 1 launches per token), the MoE
// steps run eagerly in between; the logits are the eager run's, bit for bit. Without segments such
// a step is not recorded at all.
TEST(GpuGraphs, SegmentsAroundAHostSideExecutor) {
  FERRY_REQUIRE_GPU();
  const gguf::File f = gguf::File::open(write_model(synth::Arch::qwen35moe, synth::QuantMix::q4_k_m));
  std::vector<int32_t> prompt(24), next(6);
  std::iota(prompt.begin(), prompt.end(), 5);
  std::iota(next.begin(), next.end(), 60);
  Logits by_mode[3];
  for (int mode = 0; mode < 3; ++mode) {  // graphs off, graphs without segments, with segments
    DeviceOptions o;
    o.budget_bytes = 1ull << 30;
    auto dev = make_device(DeviceKind::cuda, o);
    CudaOpsOptions oo = test_ops_options();
    oo.graphs = mode > 0;
    oo.graph_segments = mode == 2;
    auto ops = make_cuda_ops(*dev, oo);
    Ops& g = *ops;
    int32_t n_layer = 0;
    auto m = load_model(f, g, [&](const std::vector<MoeLayerWeights>& l) -> std::unique_ptr<MoeExecutor> {
      n_layer = static_cast<int32_t>(l.size());
      return std::make_unique<NotCapturable>(make_cuda_resident_executor(g, l));
    });
    by_mode[mode] = run(*m, prompt, next, GgmlType::F16);
    const CudaGraphStats gs = cuda_ops_graph_stats(g);
    std::printf("[gpu-info] graph segments mode %d: %llu launches, %llu instantiations\n", mode,
                static_cast<unsigned long long>(gs.launches), static_cast<unsigned long long>(gs.instantiations));
    EXPECT_EQ(gs.launches, mode == 2 ? static_cast<uint64_t>(n_layer + 1) * (next.size() - 1) : 0u);
    if (mode == 2) {
      EXPECT_EQ(gs.instantiations, static_cast<uint64_t>(n_layer + 1));
    }
  }
  report_exact("graph segments qwen35moe decode", "6 steps",
               by_mode[0].decode == by_mode[2].decode && by_mode[0].decode == by_mode[1].decode);
}

uint64_t tensor_bytes(const gguf::File& f) {
  uint64_t n = 0;
  for (const auto& t : f.tensors()) n += t.n_bytes;
  return n;
}

TEST(GpuE2eBudget, RealUseStaysInsideTheBudget) {
  FERRY_REQUIRE_GPU();
  const gguf::File f = gguf::File::open(write_model(synth::Arch::qwen35moe, synth::QuantMix::q4_k_m));
  CudaOpsOptions oo = test_ops_options();
  oo.matmul_workspace_bytes = 8ull << 20;
  oo.attention_workspace_bytes = 1ull << 20;
  const uint64_t weights = tensor_bytes(f);

  {  // half the weights do not fit: a budget error while loading, nothing silently spilled
    DeviceOptions o;
    o.budget_bytes = oo.matmul_workspace_bytes + oo.attention_workspace_bytes + (4ull << 20) + weights / 2;
    auto dev = make_device(DeviceKind::cuda, o);
    auto ops = make_cuda_ops(*dev, oo);
    Ops& g = *ops;
    try {
      auto m = load_model(f, g, [&g](const std::vector<MoeLayerWeights>& l) { return make_cuda_resident_executor(g, l); });
      ADD_FAILURE() << "loading " << weights << " bytes of weights under a budget of " << o.budget_bytes << " succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::budget) << e.what();
      std::printf("[gpu-info] budget error as expected: %s\n", e.what());
    }
  }

  DeviceOptions o;
  o.budget_bytes = oo.matmul_workspace_bytes + oo.attention_workspace_bytes + (4ull << 20) + weights + (32ull << 20);
  auto dev = make_device(DeviceKind::cuda, o);
  auto ops = make_cuda_ops(*dev, oo);
  Ops& g = *ops;
  g.sync();
  const CudaMemInfo before = cuda_mem_info();
  const uint64_t used_before = dev->memory().used_bytes;
  auto m = load_model(f, g, [&g](const std::vector<MoeLayerWeights>& l) { return make_cuda_resident_executor(g, l); });
  std::vector<int32_t> prompt(20);
  std::iota(prompt.begin(), prompt.end(), 3);
  (void)run(*m, prompt, {5, 6}, GgmlType::F16);
  g.sync();
  const CudaMemInfo after = cuda_mem_info();
  const MemoryStats s = dev->memory();
  const uint64_t real = before.free_bytes > after.free_bytes ? before.free_bytes - after.free_bytes : 0;
  const uint64_t accounted = s.peak_bytes - used_before;
  std::printf("[gpu-info] budget %.1f MiB: peak %.1f MiB; since load: accounted %.1f MiB, cudaMemGetInfo %.1f MiB\n",
              static_cast<double>(o.budget_bytes) / (1 << 20), static_cast<double>(s.peak_bytes) / (1 << 20),
              static_cast<double>(accounted) / (1 << 20), static_cast<double>(real) / (1 << 20));
  EXPECT_LE(s.peak_bytes, o.budget_bytes);
  EXPECT_GE(s.used_bytes, weights * 9 / 10) << "the weights are not charged to the budget";
  // cudaMalloc rounds allocations up (up to 2 MiB pages); the driver's own bookkeeping is outside
  // any budget. 64 MiB of slack on a ~60 MiB model still catches an allocation the pool missed.
  EXPECT_LE(real, accounted + (64ull << 20));
}

// The offload executor on CUDA (device flow behind the host bridge, pinned uring host store) with
// a device budget that leaves about half of the routed experts off the GPU, against the resident
// CUDA executor on the same file: every cold path (CPU experts, copy-now, prefill streaming through
// the staging slots, decode misses read in place from the mapped pinned store), the budget never exceeded (pool peak, and cudaMemGetInfo against it).
struct OffloadCase {
  synth::Arch arch;
  synth::QuantMix quant;
  ColdMode cold;
  bool table = false;  // decode from the device tables (OffloadOptions::decode_table)
  // Cost-model rates under which reading a decode miss in place beats the CPU and copy-now
  // (and streaming beats the CPU in prefill): the cost model's mapped choice.
  bool mapped_wins = false;
};

class GpuOffload : public ::testing::TestWithParam<OffloadCase> {};

TEST_P(GpuOffload, LogitsMatchResidentInsideTheBudget) {
  FERRY_REQUIRE_GPU();
  const OffloadCase c = GetParam();
  const std::string path = write_model(c.arch, c.quant);
  const gguf::File f = gguf::File::open(path);
  const std::string name = std::string(synth::arch_name(c.arch)) + "-tiny-" + std::string(synth::quant_mix_name(c.quant)) +
                           " cold " +
                           (c.cold == ColdMode::cpu      ? "cpu"
                            : c.cold == ColdMode::copy   ? "copy"
                            : c.cold == ColdMode::mapped ? "mapped (decode misses read in place)"
                                                         : "auto") +
                           (c.table ? ", decode from device tables" : "") +
                           (c.mapped_wins ? ", rates favour reading in place" : "");
  std::mt19937 rng(9);
  std::vector<int32_t> prompt(24), next(8);
  Logits resident, offloaded;
  uint64_t at_factory = 0, experts_total = 0, resident_peak = 0;
  {
    DeviceOptions o;
    o.budget_bytes = 1ull << 30;
    auto dev = make_device(DeviceKind::cuda, o);
    auto ops = make_cuda_ops(*dev, test_ops_options());
    Ops& g = *ops;
    auto m = load_model(f, g, [&](const std::vector<MoeLayerWeights>& l) {
      at_factory = dev->memory().used_bytes;
      for (const auto& L : l) experts_total += expert_shape(L).expert_bytes() * static_cast<uint64_t>(L.n_expert);
      return make_cuda_resident_executor(g, l);
    });
    std::uniform_int_distribution<int32_t> tok(0, m->config().n_vocab - 1);
    for (auto& t : prompt) t = tok(rng);
    for (auto& t : next) t = tok(rng);
    resident = run(*m, prompt, next, GgmlType::F16);
    resident_peak = dev->memory().peak_bytes;
  }
  // The non-weight part the forward needs (KV, state, workspace), as the resident run measured it.
  const uint64_t runtime_bytes = resident_peak - at_factory - experts_total;

  PlacementInput in;
  uint64_t budget = 0;
  OffloadExecutor* ex = nullptr;
  DeviceOptions o;
  {
    // The plan as the CLI makes it on cuda: dense = what is allocated when the executor is built.
    std::vector<MoeLayerWeights> probe;
    CpuOps cpu;
    (void)load_model(f, cpu, [&](const std::vector<MoeLayerWeights>& l) {
      probe = l;
      return std::make_unique<MoeCpuExecutor>(l);
    });
    in.model = name;
    in.n_layer = static_cast<int32_t>(probe.size());
    in.n_expert = probe[0].n_expert;
    in.n_expert_used = static_cast<int32_t>(f.get_u32(f.architecture() + ".expert_used_count"));
    for (const auto& L : probe) in.layer_expert_bytes.push_back(expert_shape(L).expert_bytes());
    in.dense_bytes = at_factory;
    in.workspace_bytes = runtime_bytes;
    in.step_bytes = device_step_bytes(16, expert_shape(probe[0]), in.n_expert_used, in.n_expert);
    if (c.table) in.step_bytes += decode_table_bytes(in.n_layer, in.n_expert, in.n_expert_used, expert_shape(probe[0]).n_embd);
    in.kv_types = "f16/f16";
    const Plan full = make_plan(in);  // no budget: every expert
    const uint64_t slot = full.staging_slot_bytes;  // the largest expert: at least half resident
    const int64_t half = full.total_experts() / 2;
    budget = full.fixed_bytes() + static_cast<uint64_t>(half) * slot;
    in.budget_bytes = budget;
  }
  {
    o.budget_bytes = budget;
    auto dev = make_device(DeviceKind::cuda, o);
    CudaOpsOptions graphs_on = test_ops_options();
    graphs_on.graphs = true;  // table decode records each token as one graph
    auto ops = make_cuda_ops(*dev, graphs_on);
    Ops& g = *ops;
    g.sync();
    const CudaMemInfo before = cuda_mem_info();
    auto m = load_model(f, g, [&](const std::vector<MoeLayerWeights>& l) -> std::unique_ptr<MoeExecutor> {
      EXPECT_EQ(dev->memory().used_bytes, at_factory);
      OffloadOptions oo;
      oo.plan = make_plan(in);
      oo.gguf_path = path;
      for (int32_t il = 0; il < in.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".ffn_";
        oo.file_offsets.push_back({f.tensor(p + "gate_exps.weight").file_offset, f.tensor(p + "up_exps.weight").file_offset,
                                   f.tensor(p + "down_exps.weight").file_offset});
      }
      oo.host_load = HostLoad::uring;
      oo.cold = c.cold;
      oo.reserve_fixed = false;
      oo.max_batch = 16;
      oo.decode_table = c.table;
      if (c.mapped_wins) {
        HardwareRates r;
        r.h2d_gbps = 1e-3;  // copy-now costs seconds (streaming a prefill expert still beats the CPU)
        r.cpu_gbps = 1e-4;
        r.mapped_gbps = 1e6;
        r.source = "test";
        oo.rates = r;
      }
      auto e = std::make_unique<OffloadExecutor>(*dev, cuda_stream_view(*dev, cuda_ops_stream(g)),
                                                 make_cuda_expert_kernels(*dev), l, std::move(oo));
      ex = e.get();
      return std::unique_ptr<MoeExecutor>(std::move(e));
    });
    offloaded = run(*m, prompt, next, GgmlType::F16);
    ex->drain();
    g.sync();
    const CudaMemInfo after = cuda_mem_info();
    const OffloadStats st = ex->stats();
    const uint64_t real = before.free_bytes > after.free_bytes ? before.free_bytes - after.free_bytes : 0;
    std::printf("[gpu-info] offload %s: budget %.2f MiB, peak %.2f MiB, cudaMemGetInfo %.2f MiB; %d of %lld experts in "
                "slots; uses %llu hits %llu cpu %llu copy-now %llu streamed %llu\n",
                name.c_str(), static_cast<double>(budget) / (1 << 20),
                static_cast<double>(st.memory.peak_bytes) / (1 << 20), static_cast<double>(real) / (1 << 20),
                st.n_slots, static_cast<long long>(in.n_layer) * in.n_expert, static_cast<unsigned long long>(st.uses),
                static_cast<unsigned long long>(st.hits), static_cast<unsigned long long>(st.cpu_experts),
                static_cast<unsigned long long>(st.copy_now), static_cast<unsigned long long>(st.streamed));
    EXPECT_LE(st.memory.peak_bytes, budget);
    EXPECT_LE(real, budget + (64ull << 20));  // cudaMalloc rounding and the driver's own use
    EXPECT_GT(st.misses, 0u);
    EXPECT_GT(st.hits, 0u);
    if (c.cold == ColdMode::cpu) {
      EXPECT_GT(st.cpu_experts, 0u);
    }
    if (c.cold == ColdMode::mapped) {
      EXPECT_GT(st.mapped, 0u);  // the pinned uring store is mapped into the device's address space
    }
    if (c.cold == ColdMode::copy) {
      EXPECT_GT(st.streamed, 0u);
      EXPECT_EQ(st.cpu_experts, 0u);
      if (!c.table) {
        EXPECT_GT(st.copy_now, 0u);
      }
    }
    if (c.mapped_wins) {
      // The cost model's choice for decode misses (prefill groups of one token may still be
      // copied now: reading in place is a decode choice).
      EXPECT_GT(st.mapped, 0u);
      EXPECT_EQ(st.cpu_experts, 0u);
    }
    const CudaGraphStats gs = cuda_ops_graph_stats(g);
    if (c.table) {
      // Every decode token ran from the tables, all but the warm-up step as one recorded graph;
      // the misses were read in place and admitted behind, which rewrote table entries.
      std::printf("[gpu-info] offload %s: %llu table tokens, %llu graph launches, %llu entries rewritten, %llu "
                  "read in place, %llu admitted\n",
                  name.c_str(), static_cast<unsigned long long>(st.table_tokens),
                  static_cast<unsigned long long>(gs.launches), static_cast<unsigned long long>(st.table_updates),
                  static_cast<unsigned long long>(st.mapped), static_cast<unsigned long long>(st.prefetch.admitted));
      EXPECT_EQ(st.table_tokens, next.size());
      EXPECT_EQ(gs.launches, next.size() - 1);
      EXPECT_GT(st.mapped, 0u);
      EXPECT_GT(st.prefetch.admitted, 0u);
    } else {
      EXPECT_EQ(gs.launches, 0u);  // host-routed MoE steps are not recorded (without segments)
    }
    for (int32_t sl = 0; sl < ex->cache().n_slots(); ++sl) EXPECT_EQ(ex->cache().pins(sl), 0) << "slot " << sl;
  }
  const size_t V = resident.prefill.size() / prompt.size();
  // Slot and streamed experts run the resident kernels; CPU experts follow ggml's numerics
  // (Q8_K activations for quantized weights), amplified through flipped expert choices as in
  // GpuE2e's "vs cpu(ggml)" comparison.
  // Decode from the device tables reads every expert (slot or mapped host copy) with them too.
  const bool exact_kernels = c.cold == ColdMode::copy || c.quant == synth::QuantMix::f32 || c.mapped_wins;

  compare("offload " + name + " vs resident", resident, offloaded, V, exact_kernels ? 1e-4 : 5e-2,
          exact_kernels ? 0.99 : 0.75);
}

INSTANTIATE_TEST_SUITE_P(
    Models, GpuOffload,
    ::testing::Values(OffloadCase{synth::Arch::qwen3moe, synth::QuantMix::f32, ColdMode::cpu},
                      OffloadCase{synth::Arch::qwen3moe, synth::QuantMix::f32, ColdMode::copy},
                      OffloadCase{synth::Arch::qwen3moe, synth::QuantMix::f32, ColdMode::mapped},
                      OffloadCase{synth::Arch::qwen3moe, synth::QuantMix::q4_k_m, ColdMode::auto_},
                      OffloadCase{synth::Arch::qwen3moe, synth::QuantMix::q4_k_m, ColdMode::copy},
                      OffloadCase{synth::Arch::qwen35moe, synth::QuantMix::q4_k_m, ColdMode::cpu},
                      OffloadCase{synth::Arch::qwen35moe, synth::QuantMix::q4_k_m, ColdMode::copy},
                      OffloadCase{synth::Arch::qwen3moe, synth::QuantMix::q4_k_m, ColdMode::copy, true},
                      OffloadCase{synth::Arch::qwen35moe, synth::QuantMix::q4_k_m, ColdMode::cpu, true},
                      OffloadCase{synth::Arch::qwen3moe, synth::QuantMix::q4_k_m, ColdMode::auto_, false, true}),
    [](const ::testing::TestParamInfo<OffloadCase>& i) {
      return std::string(synth::arch_name(i.param.arch)) + "_" + std::string(synth::quant_mix_name(i.param.quant)) +
             (i.param.cold == ColdMode::cpu      ? "_cpu"
              : i.param.cold == ColdMode::copy   ? "_copy"
              : i.param.cold == ColdMode::mapped ? "_mapped"
                                                 : "_auto") +
             (i.param.table ? "_table" : "") + (i.param.mapped_wins ? "_mapped_wins" : "");
    });

}  // namespace
}  // namespace ferry::gputest
