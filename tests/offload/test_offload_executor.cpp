// The offload executor on the sim device against the CPU executor: with budgets that leave about
// half of the experts off the device, every cold path (CPU, copy-now, prefill streaming, waited
// prefetch) and every host-store mode must give bit-identical logits, and device memory must stay
// inside the budget.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/moe/cpu_executor.hpp"
#include "runtime/moe/observers.hpp"
#include "offload_test_util.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

// Predicts, for layer l+1, the experts layer l+1 used at the previous step plus a few random ones:
// enough to exercise issue / wait / waste / stale paths with a deterministic schedule.
class TestPredictor final : public ExpertPredictor {
 public:
  TestPredictor(int32_t n_layer, int32_t n_expert)
      : last_(static_cast<size_t>(n_layer)), n_expert_(n_expert) {}
  void predict(int32_t layer, const float*, int32_t n_tokens, const int32_t* ids, int32_t top_k,
               std::vector<PredictedExpert>& out) override {
    last_[static_cast<size_t>(layer)].assign(ids + (n_tokens - 1) * top_k, ids + n_tokens * top_k);
    if (static_cast<size_t>(layer + 1) < last_.size())
      for (int32_t e : last_[static_cast<size_t>(layer + 1)]) out.push_back({layer + 1, e, 1.0f});
    for (int i = 0; i < 2; ++i)
      out.push_back(
          {layer + 1 + i, static_cast<int32_t>(rng_() % static_cast<uint32_t>(n_expert_)), 0.5f});
    out.push_back({layer, 0, 2.0f});  // stale: must be dropped
  }

 private:
  std::vector<std::vector<int32_t>> last_;
  int32_t n_expert_;
  std::mt19937 rng_{3};
};

struct Variant {
  HostLoad load = HostLoad::alias;
  ColdMode cold = ColdMode::auto_;
  bool predictor = false;
  double resident = 0.5;
  EvictionPolicy policy = EvictionPolicy::lrfu;
  Tracer* tracer = nullptr;
  bool table = false;  // decode from the device tables
  ExpertProfile* record = nullptr;
  // Forward steps (token counts) after the prefill, e.g. decode, a second prompt, decode again;
  // empty: one token at a time to the end.
  std::vector<size_t> turns;
};

class OffloadExecutorTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { test::remove_scratch(); }

  static std::vector<float> reference(const std::string& path, const std::vector<int32_t>& toks,
                                      size_t prefill, const std::vector<size_t>& turns = {}) {
    const gguf::File f = gguf::File::open(path);
    CpuOps ops;
    auto m = load_model(f, ops, [](const std::vector<MoeLayerWeights>& l) {
      return std::make_unique<MoeCpuExecutor>(l);
    });
    return run_steps(*m, toks, prefill, turns);
  }

  // Every token's logits, the tokens fed as `prefill`, then `turns` (or one at a time).
  static std::vector<float> run_steps(Model& m, const std::vector<int32_t>& toks, size_t prefill,
                                      const std::vector<size_t>& turns) {
    if (turns.empty()) return test::run_logits(m, toks, prefill);
    StateOptions so;
    so.n_ctx = 256;
    auto st = m.new_state(so);
    const auto V = static_cast<size_t>(m.config().n_vocab);
    std::vector<float> out(toks.size() * V);
    size_t at = 0;
    for (size_t n : [&] {
           std::vector<size_t> all{prefill};
           all.insert(all.end(), turns.begin(), turns.end());
           return all;
         }()) {
      m.forward(*st, std::span<const int32_t>(toks.data() + at, n), LogitsMode::all, out.data() + at * V);
      at += n;
    }
    EXPECT_EQ(at, toks.size());
    return out;
  }

  // Runs with the offload executor; returns logits and leaves its stats in `stats`.
  static std::vector<float> offloaded(const std::string& path, const std::vector<int32_t>& toks,
                                      size_t prefill, const Variant& v, OffloadStats& stats) {
    const gguf::File f = gguf::File::open(path);
    CpuOps ops;
    OffloadExecutor* ex = nullptr;
    std::unique_ptr<TestPredictor> pred;
    // --record-profile's observer: the profile is recorded from the routing the executor reports.
    std::unique_ptr<ProfileRecorder> recorder;
    ObserverSet observers;
    if (v.record) {
      recorder = std::make_unique<ProfileRecorder>(v.record->n_layer(), v.record->n_expert());
      observers.add(recorder.get());
    }
    auto m = load_model(f, ops, [&](const std::vector<MoeLayerWeights>& layers) {
      const int32_t top_k =
          static_cast<int32_t>(f.get_u32(f.architecture() + ".expert_used_count"));
      const int64_t total = int64_t{layers[0].n_expert} * static_cast<int64_t>(layers.size());
      const auto slots = static_cast<int64_t>(static_cast<double>(total) * v.resident);
      OffloadOptions o;
      const uint64_t step = device_step_bytes(64, expert_shape(layers[0]), top_k, layers[0].n_expert);
      o.plan = make_plan(test::input_for_slots(layers, top_k, slots, 1 << 20, step));
      o.max_batch = 64;
      EXPECT_EQ(o.plan.n_slots, slots);
      o.gguf_path = path;
      o.file_offsets = test::expert_file_offsets(f, static_cast<int32_t>(layers.size()));
      o.host_load = v.load;
      o.cold = v.cold;
      o.policy = v.policy;
      o.prefetch_in_flight = 4;
      o.tracer = v.tracer;
      o.decode_table = v.table;
      if (v.table) o.plan = make_plan(test::input_for_slots(layers, top_k, slots, 1 << 20,
                                                        step + decode_table_bytes(static_cast<int32_t>(layers.size()),
                                                                                  layers[0].n_expert, top_k,
                                                                                  layers[0].gate.n_in)));
      if (v.predictor) {
        pred = std::make_unique<TestPredictor>(static_cast<int32_t>(layers.size()),
                                               layers[0].n_expert);
        o.predictor = pred.get();
      }
      DeviceOptions d;
      d.budget_bytes = o.plan.in.budget_bytes;
      d.sim_link = SimLinkModel{20.0, 20.0, 5.0};
      auto e = std::make_unique<OffloadExecutor>(make_sim_device(d), layers, std::move(o));
      ex = e.get();
      e->set_observers(&observers);
      return std::unique_ptr<MoeExecutor>(std::move(e));
    });
    auto out = run_steps(*m, toks, prefill, v.turns);
    ex->drain();
    stats = ex->stats();
    if (recorder) *v.record = recorder->profile();
    EXPECT_LE(stats.memory.peak_bytes, stats.memory.budget_bytes);
    for (int32_t s = 0; s < ex->cache().n_slots(); ++s) {
      EXPECT_EQ(ex->cache().pins(s), 0) << "slot " << s;
      // A slot only ever holds an expert of its size class.
      if (const int32_t l = ex->cache().layer_of(s); l >= 0) {
        EXPECT_EQ(ex->plan().class_of_slot(s), ex->plan().class_of_layer[static_cast<size_t>(l)])
            << "slot " << s;
      }
    }
    return out;
  }

  static void expect_identical(const std::vector<float>& a, const std::vector<float>& b,
                               const char* what) {
    ASSERT_EQ(a.size(), b.size());
    size_t first = a.size();
    for (size_t i = 0; i < a.size() && first == a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) first = i;
    EXPECT_EQ(first, a.size()) << what << ": first difference at " << first << ": " << a[first]
                               << " vs " << b[first];
  }
};

synth::Options tiny(synth::QuantMix q) {
  synth::Options o;
  o.arch = synth::Arch::qwen3moe;
  o.preset = synth::Preset::tiny;
  o.quant = q;
  o.seed = 11;
  return o;
}

TEST_F(OffloadExecutorTest, TinyF32EveryColdPathIsBitIdentical) {
  const std::string path = test::write_model(tiny(synth::QuantMix::f32), "tiny-f32");
  const auto toks = test::random_tokens(24, 768, 5);
  const auto ref = reference(path, toks, 8);
  expect_identical(reference(path, toks, 8), ref, "reference twice");
  {
    OffloadStats st;
    expect_identical(
        offloaded(path, toks, 8, Variant{HostLoad::alias, ColdMode::cpu, false, 1.0}, st), ref,
        "all resident");
  }
  for (ColdMode cold : {ColdMode::cpu, ColdMode::copy, ColdMode::auto_}) {
    for (bool pred : {false, true}) {
      OffloadStats st;
      const auto got = offloaded(path, toks, 8, Variant{HostLoad::alias, cold, pred}, st);
      const std::string what = fmt::format("cold {} predictor {}", static_cast<int>(cold), pred);
      expect_identical(got, ref, what.c_str());
      EXPECT_EQ(st.hits + st.inflight + st.misses, st.uses) << what;
      EXPECT_GT(st.misses, 0u) << what;  // half the experts are off-device: some must miss
      EXPECT_GT(st.hits, 0u) << what;
      if (cold == ColdMode::cpu) {
        EXPECT_EQ(st.cpu_experts, st.misses + st.inflight) << what;
        EXPECT_GT(st.prefetch.admitted, 0u) << what;  // decode misses were brought in behind
      }
      if (cold == ColdMode::copy) {
        EXPECT_GT(st.copy_now, 0u) << what;
        EXPECT_GT(st.streamed, 0u) << what;  // the 8-token prefill streamed its cold experts
        EXPECT_EQ(st.cpu_experts, 0u) << what;
      }
      if (pred) {
        EXPECT_GT(st.prefetch.issued, 0u) << what;
        EXPECT_GT(st.prefetch.dropped_stale, 0u) << what;
      }
    }
  }
}

// --trace: every expert copy appears as an "h2d" span on a copy-stream track (with the expert's
// bytes), host waits and expert compute as spans on the calling threads; tracing leaves the logits
// bit-identical.
TEST_F(OffloadExecutorTest, TraceShowsCopiesWaitsAndExpertCompute) {
  const std::string path = test::write_model(tiny(synth::QuantMix::q8_0), "tiny-q8-trace");
  const auto toks = test::random_tokens(24, 768, 6);
  const auto ref = reference(path, toks, 8);
  const std::string trace_path = path + ".trace.json";
  for (ColdMode cold : {ColdMode::copy, ColdMode::cpu}) {
    Tracer t(trace_path);
    OffloadStats st;
    Variant v{HostLoad::alias, cold, true};
    v.tracer = &t;
    expect_identical(offloaded(path, toks, 8, v, st), ref, "traced");
    t.write();
    std::ifstream in(trace_path);
    const auto j = nlohmann::json::parse(in);
    std::map<std::string, int> n;  // per name
    std::set<int> copy_tracks;
    uint64_t copied = 0;
    for (const auto& e : j["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const std::string name = e["name"];
      ++n[name];
      EXPECT_GE(e["dur"].get<double>(), 0.0) << name;
      if (name == "h2d") {
        EXPECT_EQ(e["cat"], "copy");
        EXPECT_GE(e["tid"].get<int>(), Tracer::kTrackBase);
        copy_tracks.insert(e["tid"].get<int>());
        copied += e["args"]["bytes"].get<uint64_t>();
        EXPECT_GE(e["args"]["layer"].get<int>(), 0);
      }
    }
    const std::string what = cold == ColdMode::copy ? "copy" : "cpu";
    // Every copy the executor counted (demand, staging, prefetch, the initial fill) is a span.
    EXPECT_EQ(copied, st.h2d_bytes + st.prefetch.bytes + st.init_bytes) << what;
    EXPECT_GE(copy_tracks.size(), 2u) << what;  // the demand stream and a prefetch stream
    EXPECT_GT(n["experts"], 0) << what;         // decode steps
    if (cold == ColdMode::copy) {
      EXPECT_GT(st.streamed, 0u) << what;    // the prefill streamed its cold experts (device work:
      EXPECT_GT(n["wait copy"], 0) << what;  // their copies are h2d spans), decode copied misses now
    } else {
      EXPECT_GT(n["cpu expert"], 0) << what;     // prefill misses computed on the CPU
    }
  }
}

TEST_F(OffloadExecutorTest, QuantizedWiderModelWithUringAndMmapStores) {
  synth::Options o = tiny(synth::QuantMix::q4_k_m);
  o.n_expert = 32;
  o.n_expert_used = 4;
  const std::string path = test::write_model(o, "tiny-q4km-32x4");
  const auto toks = test::random_tokens(20, 768, 9);
  const auto ref = reference(path, toks, 12);
  for (HostLoad load : {HostLoad::uring, HostLoad::mmap, HostLoad::registered, HostLoad::alias}) {
    for (ColdMode cold : {ColdMode::copy, ColdMode::cpu}) {
      OffloadStats st;
      const auto got =
          offloaded(path, toks, 12, Variant{load, cold, true, 0.5, EvictionPolicy::lru}, st);
      const std::string what =
          fmt::format("load {} cold {}", host_load_name(load), static_cast<int>(cold));
      expect_identical(got, ref, what.c_str());
      EXPECT_EQ(st.store.mode, load);
      if (load == HostLoad::uring || load == HostLoad::mmap) {
        EXPECT_GT(st.store.load_gbps, 0.0) << what;
      }
    }
  }
}

TEST_F(OffloadExecutorTest, Qwen35MoeHybridModel) {
  synth::Options o = tiny(synth::QuantMix::q4_k_m);
  o.arch = synth::Arch::qwen35moe;
  const std::string path = test::write_model(o, "tiny-qwen35moe-q4km");
  const auto toks = test::random_tokens(16, 512, 17);
  const auto ref = reference(path, toks, 6);
  for (ColdMode cold : {ColdMode::auto_, ColdMode::copy}) {
    OffloadStats st;
    const auto got = offloaded(path, toks, 6, Variant{HostLoad::uring, cold, true}, st);
    expect_identical(got, ref, cold == ColdMode::copy ? "qwen35moe copy" : "qwen35moe auto");
    EXPECT_GT(st.misses, 0u);
  }
}

TEST_F(OffloadExecutorTest, MinimalSlotsStillCorrect) {
  // top_k slots only: nearly every use misses and copy-now must evict constantly.
  const std::string path = test::write_model(tiny(synth::QuantMix::q8_0), "tiny-q8");
  const auto toks = test::random_tokens(12, 768, 21);
  const auto ref = reference(path, toks, 4);
  OffloadStats st;
  const auto got =
      offloaded(path, toks, 4, Variant{HostLoad::alias, ColdMode::copy, true, 2.0 / 32.0}, st);
  expect_identical(got, ref, "2 slots");
  EXPECT_GT(st.cache.evictions, 0u);
}

// The smallest and largest routed expert (gate + up + down bytes) over the layers of a model
// (Q4_K_M mixes give some layers Q6_K down matrices).
std::pair<uint64_t, uint64_t> expert_bytes_range(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int l = 0; f.find_tensor("blk." + std::to_string(l) + ".ffn_up_exps.weight"); ++l) {
    uint64_t b = 0;
    for (const char* m : {"gate", "up", "down"})
      b += f.tensor("blk." + std::to_string(l) + ".ffn_" + m + "_exps.weight").nb[2];
    lo = std::min(lo, b);
    hi = std::max(hi, b);
  }
  return {lo, hi};
}

// The one flow (what cuda runs: slot experts as device kernels on a compute stream, streamed
// prefill experts through the staging slots ordered by events, CPU experts beside them, per-slot
// outputs and one ordered sum) on the sim device: the CPU executor's logits bit for bit, for every
// cold path.
TEST_F(OffloadExecutorTest, DeviceFlowMatchesTheCpuExecutor) {
  struct Case {
    synth::Options model;
    const char* name;
    size_t n_tok, prefill;
  };
  synth::Options q35 = tiny(synth::QuantMix::q4_k_m);
  q35.arch = synth::Arch::qwen35moe;
  const Case cases[] = {{tiny(synth::QuantMix::f32), "tiny-f32", 24, 8},
                        {tiny(synth::QuantMix::q8_0), "tiny-q8", 24, 8},
                        {q35, "tiny-qwen35moe-q4km", 16, 6}};
  for (const Case& c : cases) {
    const std::string path = test::write_model(c.model, c.name);
    const int32_t n_vocab = c.model.arch == synth::Arch::qwen35moe ? 512 : 768;
    const auto toks = test::random_tokens(c.n_tok, n_vocab, 31);
    const auto ref = reference(path, toks, c.prefill);
    for (ColdMode cold : {ColdMode::cpu, ColdMode::copy, ColdMode::auto_, ColdMode::mapped}) {
      for (bool pred : {false, true}) {
        Variant v{HostLoad::alias, cold, pred};
        OffloadStats st;
        const auto t_run = std::chrono::steady_clock::now();
        const auto got = offloaded(path, toks, c.prefill, v, st);
        const double run_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_run).count();
        const std::string what = fmt::format("{} cold {} predictor {}", c.name, static_cast<int>(cold), pred);
        ASSERT_EQ(got.size(), ref.size());
        expect_identical(got, ref, what.c_str());
        EXPECT_GT(st.misses, 0u) << what;
        EXPECT_GT(st.hits, 0u) << what;
        EXPECT_EQ(st.hits + st.inflight + st.misses, st.uses) << what;
        if (cold == ColdMode::cpu) {
          EXPECT_EQ(st.cpu_experts, st.misses + st.inflight) << what;
          EXPECT_GT(st.cpu_ms, 0.0) << what;
        }
        if (cold == ColdMode::mapped) {
          EXPECT_GT(st.mapped, 0u) << what;  // decode misses read in place
          const auto [lo, hi] = expert_bytes_range(path);
          EXPECT_GE(st.mapped_bytes, st.mapped * lo) << what;
          EXPECT_LE(st.mapped_bytes, st.mapped * hi) << what;
        } else {
          EXPECT_EQ(st.mapped, 0u) << what;
        }
        if (cold == ColdMode::copy) {
          EXPECT_GT(st.streamed, 0u) << what;  // the prefill's cold experts went through staging
          EXPECT_GT(st.copy_now, 0u) << what;
          EXPECT_EQ(st.cpu_experts, 0u) << what;
          // Streaming measured on the compute stream by events: bytes and a positive device time.
          EXPECT_GT(st.stream_bytes, 0u) << what;
          EXPECT_GT(st.stream_gpu_ms, 0.0) << what;
        }
        for (double w : st.device_wait_ms) EXPECT_TRUE(std::isfinite(w) && w >= 0) << what;
        if (cold == ColdMode::cpu) {
          // The sim "kernels" take about as long as the CPU experts beside them on this machine;
          // whichever finished first, the idle time is measured and cannot exceed the run's wall
          // time (not the host's enqueue time, compute_ms: the sim stream runs behind the host,
          // and on a loaded machine its events land after run() has returned).
          EXPECT_GT(st.compute_ms, 0.0) << what;
          EXPECT_LE(st.device_wait_ms[static_cast<int>(WaitCause::cpu_expert)], run_ms) << what;
        }
      }
    }
  }
}

// Decode from the device tables on sim (the CUDA flow's bookkeeping with sim kernels): the CPU's
// logits, every decode token through the tables, misses read in place and admitted behind — also
// across a second prompt (host-routed prefill steps, with prefetches and copy-now evicting slots
// the tables point at) and with the profile recorded from the routing log.
TEST_F(OffloadExecutorTest, DeviceFlowDecodesFromTables) {
  synth::Options q35 = tiny(synth::QuantMix::q4_k_m);
  q35.arch = synth::Arch::qwen35moe;
  for (const auto& [model, name] : {std::pair{tiny(synth::QuantMix::f32), "tiny-f32"},
                                    std::pair{tiny(synth::QuantMix::q8_0), "tiny-q8"},
                                    std::pair{q35, "tiny-qwen35moe-q4km"}}) {
    const std::string path = test::write_model(model, name);
    const auto toks = test::random_tokens(24, model.arch == synth::Arch::qwen35moe ? 512 : 768, 37);
    const auto ref = reference(path, toks, 8);
    const std::vector<size_t> turns{1, 1, 1, 1, 1, 6, 1, 1, 1, 1, 1};  // 24 tokens: decode, prompt, decode
    const auto ref_turns = reference(path, toks, 8, turns);
    const gguf::File f = gguf::File::open(path);
    const auto n_layer = static_cast<int32_t>(f.get_u32(f.architecture() + ".block_count"));
    const auto n_expert = static_cast<int32_t>(f.get_u32(f.architecture() + ".expert_count"));
    const auto top_k = static_cast<int32_t>(f.get_u32(f.architecture() + ".expert_used_count"));
    for (ColdMode cold : {ColdMode::cpu, ColdMode::copy}) {  // the prefill's host-routed steps
      for (const bool two_prompts : {false, true}) {
        Variant v{HostLoad::alias, cold, /*predictor=*/two_prompts, 0.5};
        v.table = true;
        if (two_prompts) v.turns = turns;
        ExpertProfile profile(n_layer, n_expert);
        v.record = &profile;
        OffloadStats st;
        const auto got = offloaded(path, toks, 8, v, st);
        const std::string what =
            fmt::format("{} cold {}{}", name, static_cast<int>(cold), two_prompts ? ", two prompts, predictor" : "");
        ASSERT_EQ(got.size(), ref.size());
        expect_identical(got, two_prompts ? ref_turns : ref, what.c_str());
        EXPECT_EQ(st.table_tokens, two_prompts ? 10u : 16u) << what;
        EXPECT_GT(st.mapped, 0u) << what;
        EXPECT_GT(st.prefetch.admitted, 0u) << what;
        EXPECT_GT(st.table_updates, 0u) << what;
        EXPECT_GT(st.hits, 0u) << what;
        EXPECT_EQ(st.hits + st.inflight + st.misses, st.uses) << what;
        // The profile holds every token's routing, the table steps' from the log.
        uint64_t sum = 0;
        for (int32_t l = 0; l < n_layer; ++l)
          for (int32_t e = 0; e < n_expert; ++e) sum += profile.count(l, e);
        EXPECT_EQ(profile.tokens(), toks.size()) << what;
        EXPECT_EQ(sum, toks.size() * static_cast<uint64_t>(n_layer * top_k)) << what;
      }
    }
  }
}

// Mixed expert types, three sizes (layer 0 all Q6_K, layers 1-2 Q4_K, layer 3 Q4_K gate/up with a
// Q8_0 down): the slots come in three size classes with no padding, and with half of the experts
// resident every cold path gives the CPU executor's logits bit for bit (prefill and decode).
TEST_F(OffloadExecutorTest, MixedExpertSizesUseSlotClasses) {
  synth::Options model = tiny(synth::QuantMix::q4_k_m);
  model.arch = synth::Arch::qwen35moe;
  model.expert_types = "0:q6_k,1-2:q4_k,3:gate_up=q4_k,down=q8_0";
  const std::string path = test::write_model(model, "tiny-qwen35moe-mixed");
  {
    const gguf::File f = gguf::File::open(path);
    CpuOps ops;
    std::vector<MoeLayerWeights> layers;
    auto m = load_model(f, ops, [&](const std::vector<MoeLayerWeights>& l) {
      layers = l;
      return std::make_unique<MoeCpuExecutor>(l);
    });
    const Plan p = make_plan(test::input_for_slots(layers, 2, 16));
    ASSERT_EQ(p.classes.size(), 3u);
    EXPECT_EQ(p.n_slots, 16);
    uint64_t exact = 0;
    for (size_t l = 0; l < layers.size(); ++l)
      exact += p.hot[l].size() * expert_shape(layers[l]).expert_bytes();
    EXPECT_EQ(p.slots_bytes(), exact);  // no padding
    EXPECT_EQ(p.classes[0].layers, std::vector<int32_t>{0});
    EXPECT_EQ(p.classes[2].layers, (std::vector<int32_t>{1, 2}));
  }
  const auto toks = test::random_tokens(16, 512, 37);
  const auto ref = reference(path, toks, 6);
  for (ColdMode cold : {ColdMode::cpu, ColdMode::copy, ColdMode::auto_}) {
    for (bool pred : {false, true}) {
      OffloadStats st;
      const auto got = offloaded(path, toks, 6, Variant{HostLoad::alias, cold, pred, 0.5}, st);
      expect_identical(got, ref, "mixed sizes");
      EXPECT_GT(st.hits, 0u);
      EXPECT_GT(st.misses, 0u);
      if (cold == ColdMode::copy) {
        EXPECT_GT(st.streamed, 0u);  // prefill through the staging slots (sized for layer 0)
        EXPECT_GT(st.cache.evictions, 0u);
      }
    }
  }
}

TEST_F(OffloadExecutorTest, BudgetIsChargedAndEnforced) {
  const std::string path = test::write_model(tiny(synth::QuantMix::f32), "tiny-f32");
  const gguf::File f = gguf::File::open(path);
  CpuOps ops;
  std::vector<MoeLayerWeights> layers;
  auto m = load_model(f, ops, [&](const std::vector<MoeLayerWeights>& l) {
    layers = l;
    return std::make_unique<MoeCpuExecutor>(l);
  });
  OffloadOptions o;
  const uint64_t step = device_step_bytes(64, expert_shape(layers[0]), 2, layers[0].n_expert);
  o.plan = make_plan(test::input_for_slots(layers, 2, 10, 1 << 20, step));
  o.max_batch = 64;
  o.rates = HardwareRates{};
  DeviceOptions d;
  d.budget_bytes = o.plan.in.budget_bytes;
  const uint64_t budget = d.budget_bytes;
  OffloadExecutor ex(make_sim_device(d), layers, o);
  const MemoryStats mem = ex.device().memory();
  // Dense reservation + staging + slots + the step buffers (the expert kernels' scratch, part of
  // the plan's step bytes, is allocated at the first step).
  EXPECT_LE(mem.used_bytes, o.plan.total_bytes());
  EXPECT_GE(mem.used_bytes, o.plan.total_bytes() - step);
  EXPECT_LE(mem.used_bytes, budget);
  // Beyond the budget any further device allocation is refused.
  EXPECT_THROW((void)ex.device().alloc(budget - mem.used_bytes + 256, "extra"), Error);
  // A device budget smaller than the plan: construction fails with a budget error.
  DeviceOptions small;
  small.budget_bytes = budget - o.plan.classes.back().expert_bytes;
  try {
    OffloadExecutor bad(make_sim_device(small), layers, o);
    FAIL() << "expected a budget error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::budget);
  }
}

}  // namespace
}  // namespace ferry
