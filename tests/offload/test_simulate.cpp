// The offload simulator: deterministic (same flags, same output and trace bytes); with --cold copy
// and no prefetch — where no decision depends on time — its hits, misses and bytes copied equal
// the sim device's on the same routing and budget; llama.cpp's placements follow the rules
// offload/simulate_llamacpp.hpp states.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <nlohmann/json.hpp>
#include <regex>

#include "offload/simulate_cache.hpp"
#include "offload/simulate_llamacpp.hpp"
#include "offload/simulate_routing.hpp"
#include "runtime/moe/placement_profile.hpp"
#include "runtime/moe/routing_trace.hpp"
#include "offload_test_util.hpp"
#include "runtime/plan/plan_model.hpp"
#include "tests/offload/run_command.hpp"

namespace ferry {
namespace {

const std::string kProfiles = std::string(FERRY_SOURCE_DIR) + "/profiles/hardware";
std::string ferry_binary() { return std::string(FERRY_BINARY_DIR) + "/ferry"; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string run_ok(const std::string& cmd) {
  std::string out;
  EXPECT_EQ(test::run_command(cmd, out), 0) << cmd << "\n" << out;
  return out;
}

// The first number after `label` in `text` ("" when absent).
std::string number_after(const std::string& text, const std::string& label) {
  std::smatch m;
  const std::regex re(label + "([0-9]+(\\.[0-9]+)?)");
  return std::regex_search(text, m, re) ? m[1].str() : "";
}

class Simulate : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(ferry_binary())) GTEST_SKIP() << ferry_binary() << " not built";
    dir_ = test::scratch_dir();
  }
  static void TearDownTestSuite() { test::remove_scratch(); }
  std::string dir_;
};

TEST_F(Simulate, SameInputsSameBytes) {
  const std::string cmd = ferry_binary() +
                          " simulate --arch qwen35moe --preset 35b-a3b --quant q4_k_m --gpu "
                          "rtx4060ti-16g --host ddr5-6000-2ch-8c --prefetch 2 -p 128 -n 24 --trace ";
  const std::string a = run_ok(cmd + dir_ + "/a.json");
  const std::string b = run_ok(cmd + dir_ + "/b.json");
  EXPECT_EQ(a, b);
  const std::string ta = slurp(dir_ + "/a.json");
  EXPECT_GT(ta.size(), 1000u);
  EXPECT_EQ(ta, slurp(dir_ + "/b.json"));
  const auto trace = nlohmann::json::parse(ta);
  EXPECT_GT(trace["traceEvents"].size(), 100u);
  // A different seed changes the routing, hence the output: the comparison can fail.
  EXPECT_NE(run_ok(cmd + dir_ + "/c.json --routing-seed 7"), a);
}

// ferry run on the sim device and ferry simulate replaying that run's routing, half the experts
// resident, --cold copy: every decision is the cache's and decide()'s, none the clock's.
TEST_F(Simulate, ColdCopyCountsEqualTheSimDevice) {
  synth::Options o;
  o.quant = synth::QuantMix::q4_k_m;
  o.n_expert = 32;
  o.n_expert_used = 4;
  o.seed = 4;
  o.router_skew = 1.0f;
  const std::string model = test::write_model(o, "sim-equal-q4km-32x4");
  const std::string base = ferry_binary() + " run -m " + model + " -c 64 -t 2 --device sim -s 3 ";
  run_ok(base + "-p 'a probe' -n 1 --plan-json " + dir_ + "/all.json");
  const auto all = nlohmann::json::parse(slurp(dir_ + "/all.json"));
  const uint64_t fixed = all["total_bytes"].get<uint64_t>() - all["slots_bytes"].get<uint64_t>();
  const std::string vram = std::to_string(fixed + all["slots_bytes"].get<uint64_t>() / 2);
  const std::string trace = dir_ + "/routing.frrt";
  const std::string ran =
      run_ok(base + "--vram " + vram + " --cold copy --offload-stats --record-routing " + trace +
             " -p 'the quick brown fox jumps over the lazy dog again and again' -n 24");
  const std::string sim = run_ok(ferry_binary() + " simulate -m " + model +
                                 " -c 64 --gpu h200 --host h200-host-16c --strategy ferry --vram " +
                                 vram + " --cold copy --routing trace:" + trace);
  for (const char* label : {"hits ", "misses ", "cpu ", "copy-now ", "streamed ",
                            "demand\\+stream ", "prefetch\\+admit "}) {
    const std::string a = number_after(ran, label), b = number_after(sim, label);
    EXPECT_FALSE(a.empty()) << label << "\n" << ran;
    EXPECT_EQ(a, b) << label << "\nrun:\n" << ran << "\nsimulate:\n" << sim;
  }
  // Something was really missed and copied (the comparison is not of zeros).
  EXPECT_NE(number_after(sim, "copy-now "), "0") << sim;
  EXPECT_NE(number_after(sim, "misses "), "0") << sim;
}

class LlamaPlacements : public ::testing::Test {
 protected:
  void SetUp() override {
    synth::Options o;
    o.arch = synth::Arch::qwen35moe;
    o.preset = synth::Preset::real;
    o.quant = synth::QuantMix::q4_k_m;
    const synth::ModelPlan plan = synth::make_plan(o);
    std::vector<gguf::File::TensorDecl> decls;
    for (const synth::TensorPlan& t : plan.tensors) decls.push_back({t.name, t.type, t.ne});
    const gguf::File f = gguf::File::describe("35b", plan.metadata, decls);
    PlanRequest req;
    req.n_ctx = 8192;
    sizes_ = model_sizes(f, req);
    const HardwareProfile p = load_hardware_profile(kProfiles + "/simulator.json");
    rates_ = sim_rates(find_hardware_profile(kProfiles, ProfileKind::gpu, "rtx4060ti-16g"),
                       find_hardware_profile(kProfiles, ProfileKind::host, "ddr5-6000-2ch-8c"), p);
  }
  ModelSizes sizes_;
  SimRates rates_;
};

// Each insert into the expert cache costs the host a scan of its size class (model revision 8):
// with --cold copy and no prediction (no decision depends on time) every decode miss is one
// copy-now insert, so the scans' time per token is the misses × a class's slots × the per-slot
// cost, and the same decisions at another per-slot cost move the token's time by exactly that.
using SimulateCacheScan = LlamaPlacements;

TEST_F(SimulateCacheScan, EachInsertScansItsSizeClass) {
  SimOptions o;
  o.budget_bytes = 16ull << 30;
  o.n_prompt = 0;
  o.n_decode = 16;
  o.cold = ColdMode::copy;
  o.routing.mode = SimRoutingMode::uniform;
  const SimModel& m = sizes_.sim;
  const Plan plan = sim_plan(m, o.budget_bytes);
  ASSERT_EQ(plan.classes.size(), 2u);  // 35b-a3b Q4_K_M: Q6_K and Q4_K down projections
  const double lo_slots = std::min(plan.classes[0].n_slots, plan.classes[1].n_slots);
  const double hi_slots = std::max(plan.classes[0].n_slots, plan.classes[1].n_slots);
  const SimResult a = simulate_ferry(m, rates_, o);
  ASSERT_GT(a.copy_now, 0u);
  EXPECT_EQ(a.copy_now, a.misses);  // every miss copied, nothing admitted or prefetched
  const double per_insert_us = a.token.cache_scan_us * double(a.decode_tokens) / double(a.copy_now);
  EXPECT_GE(per_insert_us, lo_slots * rates_.scan_lrfu_ns_per_slot / 1e3 - 1e-6);
  EXPECT_LE(per_insert_us, hi_slots * rates_.scan_lrfu_ns_per_slot / 1e3 + 1e-6);
  SimRates twice = rates_;
  twice.scan_lrfu_ns_per_slot *= 2;
  const SimResult b = simulate_ferry(m, twice, o);
  EXPECT_EQ(b.copy_now, a.copy_now);
  EXPECT_NEAR(b.token.cache_scan_us, 2 * a.token.cache_scan_us, 1e-6 * a.token.cache_scan_us);
  EXPECT_NEAR(b.token.total_us - a.token.total_us, a.token.cache_scan_us, 1e-6 * a.token.total_us);
  // LRU compares last uses only: its own per-slot cost.
  o.policy = EvictionPolicy::lru;
  const SimResult c = simulate_ferry(m, rates_, o);
  EXPECT_NEAR(c.token.cache_scan_us * double(c.decode_tokens) / double(c.copy_now) / per_insert_us,
              rates_.scan_lru_ns_per_slot / rates_.scan_lrfu_ns_per_slot, 0.01);
}

// Model revision 12: on a host where the engine's decode-miss decision was measured (its
// profile's offload_decode_cold) the simulated engine copies its decode misses as the measured one
// did, where the calibration it would derive there computes them on the CPU; --cold overrides both.
TEST_F(SimulateCacheScan, MeasuredDecodeDecisionOfItsHost) {
  const HardwareProfile p = load_hardware_profile(kProfiles + "/simulator.json");
  const HardwareProfile h200 = find_hardware_profile(kProfiles, ProfileKind::gpu, "h200");
  const SimRates measured = sim_rates(h200, find_hardware_profile(kProfiles, ProfileKind::host, "h200-host-16c"), p);
  ASSERT_EQ(measured.measured_decode_cold, ColdMode::copy);
  EXPECT_FALSE(rates_.measured_decode_cold.has_value());  // a desktop host: nothing measured
  SimRates derived = measured;
  derived.measured_decode_cold.reset();
  SimOptions o;
  o.budget_bytes = 12ull << 30;
  o.n_prompt = 0;
  o.n_decode = 16;
  o.routing.mode = SimRoutingMode::uniform;
  const SimModel& m = sizes_.sim;
  const SimResult copied = simulate_ferry(m, measured, o);
  ASSERT_GT(copied.misses, 0u);
  EXPECT_EQ(copied.copy_now, copied.misses);
  EXPECT_EQ(copied.cpu_experts, 0u);
  EXPECT_NE(copied.note.find("decode misses: copy"), std::string::npos) << copied.note;
  const SimResult computed = simulate_ferry(m, derived, o);
  EXPECT_EQ(computed.copy_now, 0u);
  EXPECT_GT(computed.cpu_experts, 0u);
  o.cold = ColdMode::cpu;
  EXPECT_EQ(simulate_ferry(m, measured, o).copy_now, 0u);
  // Only cpu or copy is a decision the profile can state.
  const std::string bad = R"({"format": "ferry-hardware-profile", "version": 1, "kind": "host", "id": "x",
    "name": "x", "figures": {"dram_bandwidth_gbps": {"value": 50, "label": "spec", "source": "s"},
    "cores": {"value": 8, "label": "spec", "source": "s"}, "threads": {"value": 8, "label": "spec", "source": "s"},
    "isa": {"value": "avx2", "label": "spec", "source": "s"},
    "offload_decode_cold": {"value": "mapped", "label": "measured", "source": "s"}}})";
  EXPECT_THROW(sim_rates(h200, parse_hardware_profile(bad, "bad.json"), p), Error);
}

TEST_F(LlamaPlacements, NcmoeFirstLayersFitLastLayers) {
  const SimModel& m = sizes_.sim;
  const LlamaPlacement nc = llamacpp_ncmoe(m, rates_, 14, rates_.vram_bytes);
  for (int32_t l = 0; l < m.n_layer; ++l) EXPECT_EQ(nc.cpu_fraction[l], l < 14 ? 1.0 : 0.0) << l;
  const LlamaPlacement best = llamacpp_best_ncmoe(m, rates_, rates_.vram_bytes);
  ASSERT_TRUE(best.fits);
  EXPECT_FALSE(llamacpp_ncmoe(m, rates_, best.n_cpu_moe - 1, rates_.vram_bytes).fits);
  EXPECT_LE(best.device_bytes + rates_.fit_margin_bytes, rates_.vram_bytes);
  const LlamaPlacement fit = llamacpp_fit(m, rates_, rates_.vram_bytes, true);
  ASSERT_TRUE(fit.fits);
  EXPECT_EQ(fit.n_ctx, 8192);
  // Full layers in front, host experts behind, at most one layer split.
  int32_t split = 0;
  for (int32_t l = 1; l < m.n_layer; ++l) EXPECT_GE(fit.cpu_fraction[l], fit.cpu_fraction[l - 1]) << l;
  for (double f : fit.cpu_fraction) split += f > 0 && f < 1 ? 1 : 0;
  EXPECT_LE(split, 1);
  EXPECT_EQ(fit.cpu_fraction[0], 0.0);
  EXPECT_EQ(fit.cpu_fraction[m.n_layer - 1], 1.0);
  // On a card that holds it all, nothing moves; the estimates are finite and positive.
  const LlamaPlacement big = llamacpp_fit(m, rates_, 64ull << 30, true);
  for (double f : big.cpu_fraction) EXPECT_EQ(f, 0.0);
  SimOptions so;
  so.n_prompt = 512;
  so.n_decode = 16;
  const SimResult r = simulate_llamacpp(m, rates_, fit, so, SimStrategy::llamacpp_fit);
  EXPECT_GT(r.tg_tps, 1.0);
  EXPECT_GT(r.pp_tps, 1.0);
  EXPECT_LT(simulate_llamacpp(m, rates_, nc, so, SimStrategy::llamacpp_ncmoe).tg_tps,
            simulate_llamacpp(m, rates_, llamacpp_ncmoe(m, rates_, 0, 64ull << 30), so, SimStrategy::llamacpp_ncmoe).tg_tps);
}

// Model revision 10: a layer whose experts are in host memory runs its CPU split's nodes on the
// CPU (they leave the GPU's graph) and pays its split boundaries (copies, waits, a graph launch);
// a resident layer pays neither.
TEST_F(LlamaPlacements, HostExpertLayersPayTheirSplits) {
  const SimModel& m = sizes_.sim;
  SimOptions so;
  so.n_prompt = 0;
  so.n_decode = 8;
  const int32_t n_host = 14;
  const SimResult all = simulate_llamacpp(m, rates_, llamacpp_ncmoe(m, rates_, 0, 64ull << 30), so,
                                          SimStrategy::llamacpp_ncmoe);
  const SimResult nc = simulate_llamacpp(m, rates_, llamacpp_ncmoe(m, rates_, n_host, 64ull << 30), so,
                                         SimStrategy::llamacpp_ncmoe);
  const double nodes = rates_.llama_nodes("qwen35moe");
  const size_t sync = static_cast<size_t>(WaitCause::sync);
  ASSERT_GT(rates_.llama_cpu_nodes, 0.0);
  EXPECT_NEAR(all.token.launch_us, m.n_layer * nodes * rates_.llama_graph_node_us, 1e-6);
  EXPECT_NEAR(nc.token.launch_us,
              (m.n_layer * nodes - n_host * rates_.llama_cpu_nodes) * rates_.llama_graph_node_us, 1e-6);
  EXPECT_NEAR(nc.token.gpu_wait_us[sync] - all.token.gpu_wait_us[sync], n_host * rates_.llama_split_us(), 1e-6);
  EXPECT_NEAR(rates_.llama_split_us(),
              rates_.llama_split_copies * rates_.sync_us +
                  rates_.llama_split_waits * (rates_.sync_us - rates_.launch_us) + rates_.launch_us, 1e-9);
  double host_bytes = 0;
  for (int32_t l = 0; l < n_host; ++l) host_bytes += double(m.layers[static_cast<size_t>(l)].expert.expert_bytes());
  EXPECT_NEAR(nc.token.cpu_expert_us,
              double(m.top_k) * host_bytes / (rates_.llama_cpu_gbps * 1e3) +
                  n_host * rates_.llama_cpu_nodes * rates_.llama_cpu_node_us, 1e-6);
  EXPECT_EQ(all.token.cpu_expert_us, 0.0);
}

// Model revision 9: llama.cpp's decode counts its own graph's kernels per layer (by architecture),
// and Ferry's decoded attention is its own kernel whose time grows with the context.
TEST_F(LlamaPlacements, DecodeCountsLlamaCppsKernelsAndFerrysAttention) {
  SimModel m = sizes_.sim;
  SimOptions so;
  so.n_prompt = 0;
  so.n_decode = 8;
  const LlamaPlacement all = llamacpp_ncmoe(m, rates_, 0, 64ull << 30);
  const SimResult r = simulate_llamacpp(m, rates_, all, so, SimStrategy::llamacpp_ncmoe);
  EXPECT_NEAR(r.token.launch_us, m.n_layer * rates_.llama_nodes("qwen35moe") * rates_.llama_graph_node_us, 1e-6);
  m.arch = "llama";  // no count for it: an error naming it, not a silent default
  try {
    simulate_llamacpp(m, rates_, all, so, SimStrategy::llamacpp_ncmoe);
    ADD_FAILURE() << "an architecture without a count was simulated";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("'llama'"), std::string::npos) << e.what();
  }
  // Resident Ferry: decoding after a long prompt reads K and V of every position at the attention
  // kernel's measured share of the memory rate, over the fixed part.
  SimOptions deep = so;
  deep.n_prompt = 8192;
  const SimResult shallow = simulate_ferry(sizes_.sim, rates_, so);
  const SimResult far = simulate_ferry(sizes_.sim, rates_, deep);
  double attn_layers = 0;
  for (const SimLayer& L : m.layers) attn_layers += L.attention ? 1 : 0;
  ASSERT_GT(attn_layers, 0);
  // Every attention layer reads its share of K and V for 8192 more positions.
  const double added_us = double(m.kv_bytes_per_position) * 8192 / (rates_.mem_gbps * rates_.attention_mem_fraction * 1e3);
  EXPECT_NEAR(far.token.gpu_dense_us - shallow.token.gpu_dense_us, added_us, 0.01 * added_us);
}

// Model revision 11: the cache of thecodacus/llama.cpp#5 is the static set of each layer's
// most-routed experts in a routing profile. On a known routing distribution (an activation
// profile, one expert per token, so each expert is drawn at its weight) the set is the top N of
// every layer and its decode hit rate is their routing mass; the cached share of the expert bytes
// leaves the CPU, and each layer keeps its CPU split and adds the merge's GPU nodes.
using SimulateCaches = LlamaPlacements;

TEST_F(SimulateCaches, StaticCacheHitRateIsTheTopNRoutingMass) {
  SimModel m = sizes_.sim;
  m.top_k = 1;
  const int32_t n_hot = 32;
  // Layer l's hot experts: (7·l + 5·j) mod E for j < n_hot, 101 routings each; the others 1.
  ExpertProfile prof(m.n_layer, m.n_expert);
  std::vector<std::vector<uint8_t>> hot(static_cast<size_t>(m.n_layer), std::vector<uint8_t>(static_cast<size_t>(m.n_expert), 0));
  for (int32_t l = 0; l < m.n_layer; ++l) {
    std::vector<int32_t> all(static_cast<size_t>(m.n_expert));
    std::iota(all.begin(), all.end(), 0);
    prof.add(l, all.data(), m.n_expert, 1);
    for (int32_t j = 0; j < n_hot; ++j) {
      const int32_t e = (7 * l + 5 * j) % m.n_expert;
      hot[static_cast<size_t>(l)][static_cast<size_t>(e)] = 1;
      const std::vector<int32_t> ids(100, e);
      prof.add(l, ids.data(), 100, 1);
    }
  }
  const std::string path = test::scratch_dir() + "/cache-profile.json";
  prof.write(path);
  SimOptions so;
  so.n_prompt = 0;
  so.n_decode = 2000;
  so.routing = parse_sim_routing("profile:" + path);
  // The profile routing weighs each expert 1 + its count: 102 for a hot one, 2 for the others.
  const double mass = n_hot * 102.0 / (n_hot * 102.0 + (m.n_expert - n_hot) * 2.0);
  SimRouter router(so.routing, m.n_layer, m.n_expert, m.top_k);
  EXPECT_EQ(static_cache_sets(router, m.n_layer, m.n_expert, m.top_k, n_hot, 4000), hot);

  LlamaPlacement host = llamacpp_ncmoe(m, rates_, m.n_layer, 64ull << 30);
  const SimResult plain = simulate_llamacpp(m, rates_, host, so, SimStrategy::llamacpp_ncmoe);
  host.cache_slots = n_hot;
  const SimResult cached = simulate_llamacpp(m, rates_, host, so, SimStrategy::llamacpp_ncmoe);
  EXPECT_EQ(cached.decode_uses, uint64_t(so.n_decode) * uint64_t(m.n_layer));
  EXPECT_NEAR(cached.decode_hit_rate(), mass, 0.01);
  const double nodes = rates_.llama_nodes("qwen35moe");
  EXPECT_NEAR(cached.token.launch_us, m.n_layer * (nodes + rates_.llama_cache_merge_nodes) * rates_.llama_graph_node_us, 1e-6);
  const double cpu_nodes_us = m.n_layer * rates_.llama_cpu_nodes * rates_.llama_cpu_node_us;
  EXPECT_NEAR(cached.token.cpu_expert_us - cpu_nodes_us,
              (1 - cached.decode_hit_rate()) * (plain.token.cpu_expert_us - cpu_nodes_us),
              0.02 * (plain.token.cpu_expert_us - cpu_nodes_us));
  const size_t sync = static_cast<size_t>(WaitCause::sync);
  EXPECT_NEAR(cached.token.gpu_wait_us[sync], plain.token.gpu_wait_us[sync], 1e-6);
  EXPECT_GT(cached.tg_tps, plain.tg_tps);
}

// kekzl/imp#1374's cache: a cold per-layer LRU of projection slots (gate, up, down: 3 per expert).
// With room for every projection only first uses miss, and a use the prompt made is no decode
// miss: the decode hit rate is exactly 1 − 3 · (experts first routed while decoding) / uses.
TEST_F(SimulateCaches, ProjectionLruIsColdPerLayerAndCountsTheDecode) {
  const SimModel& m = sizes_.sim;
  SimRouting routing;
  routing.mode = SimRoutingMode::locality;
  const int64_t n_prompt = 8, n_decode = 32;
  SimRouter router(routing, m.n_layer, m.n_expert, m.top_k);
  std::vector<std::vector<uint8_t>> seen(static_cast<size_t>(m.n_layer), std::vector<uint8_t>(static_cast<size_t>(m.n_expert), 0));
  std::vector<int32_t> ids(static_cast<size_t>(m.top_k));
  uint64_t first_in_decode = 0;
  for (int32_t l = 0; l < m.n_layer; ++l)
    for (int64_t t = 0; t < n_prompt; ++t) {
      router.next(l, ids.data());
      for (int32_t e : ids) seen[static_cast<size_t>(l)][static_cast<size_t>(e)] = 1;
    }
  for (int64_t t = 0; t < n_decode; ++t)
    for (int32_t l = 0; l < m.n_layer; ++l) {
      router.next(l, ids.data());
      for (int32_t e : ids) {
        uint8_t& s = seen[static_cast<size_t>(l)][static_cast<size_t>(e)];
        first_in_decode += s ? 0 : 1;
        s = 1;
      }
    }
  const ProjectionLruResult all = projection_lru_hit_rate(m, routing, 3 * m.n_expert, n_prompt, n_decode);
  const uint64_t uses = uint64_t(n_decode) * uint64_t(m.n_layer) * uint64_t(m.top_k) * 3;
  ASSERT_EQ(all.decode_uses, uses);
  EXPECT_DOUBLE_EQ(all.decode_hit_rate, 1.0 - 3.0 * double(first_in_decode) / double(uses));
  EXPECT_LT(all.all_hit_rate, all.decode_hit_rate);  // the prompt's first uses all miss
  // Fewer slots, fewer hits; one token's projections fill 3·top_k slots, so with fewer a token
  // evicts its own first projections before it ends.
  const double mid = projection_lru_hit_rate(m, routing, 3 * m.top_k, n_prompt, n_decode).decode_hit_rate;
  EXPECT_LT(mid, all.decode_hit_rate);
  EXPECT_EQ(projection_lru_hit_rate(m, routing, 2, n_prompt, n_decode).decode_hit_rate, 0.0);
  EXPECT_THROW(projection_lru_hit_rate(m, routing, 0, n_prompt, n_decode), Error);
}

// Model revision 12: kekzl/imp's order. A decoded token looks up every routed expert's gate, then
// every up, then every down (its run_moe_decode_fast); a prompt batch goes through the cache only
// when all its experts' projections fit the layer's slots, by expert id, gates and ups before the
// downs (its run_moe_legacy_fallback_). Hand-made routings whose counts differ from any other order.
TEST_F(SimulateCaches, ProjectionLruFollowsImpsOrder) {
  SimModel m = sizes_.sim;
  m.top_k = 2;
  const std::string path = test::scratch_dir() + "/imp-order.frrt";
  {
    RoutingTraceWriter w(path, RoutingTraceHeader{m.n_layer, m.n_expert, m.top_k});
    const std::vector<int32_t> ids = {0, 1, 0, 1, 2, 0};  // tokens (0,1) (0,1) (2,0)
    const std::vector<float> weights(ids.size(), 0.5f);
    for (int32_t l = 0; l < m.n_layer; ++l) w.append(l, 3, ids.data(), weights.data());
    w.finish();
  }
  const SimRouting trace = parse_sim_routing("trace:" + path);
  // 7 slots, no prompt: 9 of a layer's 18 uses hit (expert by expert, gate-up-down each, 6 would:
  // there the third token's first misses evict the gate and up of the expert it uses next).
  const ProjectionLruResult decode = projection_lru_hit_rate(m, trace, 7, 0, 3);
  ASSERT_EQ(decode.decode_uses, uint64_t(18) * uint64_t(m.n_layer));
  EXPECT_EQ(decode.prompt_uses, 0u);
  EXPECT_DOUBLE_EQ(decode.decode_hit_rate, 0.5);
  // A prompt of (0,1) (0,1) routes to 2 experts, 6 projections: with 5 slots the cache is not
  // touched and the third token (2,0) finds it empty; with 7 the prompt fills it (gate 0, up 0,
  // gate 1, up 1, down 0, down 1) and the third token hits gate 0 and down 0 (up 0 is evicted by
  // up 2 before it is looked up).
  const ProjectionLruResult bypass = projection_lru_hit_rate(m, trace, 5, 2, 1);
  EXPECT_EQ(bypass.prompt_uses, 0u);
  EXPECT_DOUBLE_EQ(bypass.decode_hit_rate, 0.0);
  const ProjectionLruResult filled = projection_lru_hit_rate(m, trace, 7, 2, 1);
  EXPECT_EQ(filled.prompt_uses, uint64_t(6) * uint64_t(m.n_layer));
  EXPECT_DOUBLE_EQ(filled.decode_hit_rate, 2.0 / 6.0);
}

}  // namespace
}  // namespace ferry
