// The offload flags end to end through the built `ferry` binary: `ferry logits --device sim --vram`
// with ~50% of the experts resident writes the same bytes as `--device cpu` (prefill and decode,
// every cold path), --print-plan / --plan-json describe the plan, a budget below the dense part is
// a clear error, and --record-profile writes a profile that --profile accepts.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/offload/run_command.hpp"
#include "offload_test_util.hpp"
#include "runtime/backend/cuda_device.hpp"

namespace ferry {
namespace {

std::string ferry_binary() {
  return std::string(FERRY_BINARY_DIR) + "/ferry";
}

// Runs a command; returns its exit status and (stdout + stderr) in `out`.
int run(const std::string& cmd, std::string& out) { return test::run_command(cmd, out); }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class OffloadCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(ferry_binary())) GTEST_SKIP() << ferry_binary() << " not built";
    synth::Options o;
    o.preset = synth::Preset::tiny;
    o.quant = synth::QuantMix::q4_k_m;
    o.n_expert = 32;
    o.n_expert_used = 4;
    o.seed = 4;
    model_ = test::write_model(o, "cli-q4km-32x4");
    dir_ = test::scratch_dir();
    const auto toks = test::random_tokens(16, 768, 13);
    for (int32_t t : toks) {
      if (!tokens_.empty()) tokens_ += ',';
      tokens_ += std::to_string(t);
    }
  }
  static void TearDownTestSuite() { test::remove_scratch(); }

  std::string logits(const std::string& flags, const std::string& name, int expect_rc = 0) {
    std::string out;
    const std::string path = dir_ + "/" + name + ".npy";
    const int rc = run(ferry_binary() + " logits -t 2 -c 64 -m " + model_ + " --tokens " + tokens_ +
                           " -o " + path + " " + flags,
                       out);
    EXPECT_EQ(rc, expect_rc) << flags << "\n" << out;
    last_output_ = out;
    return rc == 0 ? slurp(path) : std::string();
  }

  std::string vram_for(const std::string& flags, uint64_t slots);

  std::string model_, dir_, tokens_, last_output_;
};

// --vram that leaves `slots` expert slots after the fixed part of the plan `flags` make (the plan
// without a budget tells the slot size and the fixed part, which depends on the session's batch:
// one prefill batch of all tokens, or 512-token batches with --decode).
std::string OffloadCli::vram_for(const std::string& flags, uint64_t slots) {
  const std::string plan_path = dir_ + "/plan-probe.json";
  EXPECT_FALSE(logits(flags + " --plan-json " + plan_path, "probe").empty());
  const auto all = nlohmann::json::parse(slurp(plan_path));
  EXPECT_EQ(all["n_slots"].get<uint64_t>(), 4u * 32u);
  const uint64_t fixed = all["total_bytes"].get<uint64_t>() - all["slots_bytes"].get<uint64_t>();
  // Uniform placement: slots / n_layer per layer, one more for the first slots % n_layer layers,
  // each slot its layer's expert bytes (the Q4_K_M model has two size classes).
  std::map<uint64_t, uint64_t> layer_bytes;
  for (const auto& c : all["classes"])
    for (const auto& l : c["layers"])
      layer_bytes[l.get<uint64_t>()] = c["expert_bytes"].get<uint64_t>();
  const uint64_t n_layer = layer_bytes.size();
  uint64_t bytes = 0;
  for (const auto& [l, b] : layer_bytes)
    bytes += b * (slots / n_layer + (l < slots % n_layer ? 1 : 0));
  return std::to_string(fixed + (bytes + 255) / 256 * 256);
}

TEST_F(OffloadCli, SimWithHalfTheExpertsGivesTheCpuBytes) {
  ASSERT_FALSE(logits("--device sim --plan-json " + dir_ + "/plan-all.json", "all").empty());
  const std::string vram = vram_for("--device sim", 64), vram_decode = vram_for("--device sim --decode", 64);

  const std::string cpu = logits("", "cpu");
  const std::string cpu_decode = logits("--decode", "cpu-decode");
  ASSERT_FALSE(cpu.empty());
  EXPECT_EQ(cpu, slurp(dir_ + "/all.npy"));
  for (const char* cold : {"auto", "cpu", "copy"}) {
    EXPECT_EQ(logits(std::string("--device sim --vram ") + vram + " --cold " + cold,
                     std::string("sim-") + cold),
              cpu)
        << cold;
    EXPECT_EQ(logits(std::string("--device sim --vram ") + vram_decode +
                         " --decode --offload-stats --cold " + cold,
                     std::string("simd-") + cold),
              cpu_decode)
        << cold;
    EXPECT_NE(last_output_.find("offload: 64 slots"), std::string::npos) << last_output_;
  }
  EXPECT_EQ(
      logits("--device sim --vram " + vram_decode + " --decode --prefetch 2 --host-load uring", "simd-pf"),
      cpu_decode);

  ASSERT_FALSE(
      logits("--device sim --vram " + vram + " --print-plan --plan-json " + dir_ + "/half.json",
             "half")
          .empty());
  EXPECT_NE(last_output_.find("experts resident: 64 of 128 (50.0%)"), std::string::npos)
      << last_output_;
  const auto half = nlohmann::json::parse(slurp(dir_ + "/half.json"));
  EXPECT_EQ(half["n_slots"].get<int>(), 64);
  EXPECT_LE(half["total_bytes"].get<uint64_t>(), std::stoull(vram));
}

// --stats and --offload-stats read one counters sink (StatsCounters): on the same run their
// figures agree — expert uses, misses (the table's include prefetches still in flight), CPU
// experts, tokens and H2D bytes — with the cost model deciding (--cold auto) and with prefetch on.
TEST_F(OffloadCli, StatsAndOffloadStatsReadOneSink) {
  const std::string vram = vram_for("--device sim --decode", 64);
  for (const char* extra : {"--cold cpu", "--cold auto --prefetch 2", "--cold copy"}) {
    ASSERT_FALSE(logits("--device sim --decode --stats --offload-stats --vram " + vram + " " + extra,
                        "one-sink")
                     .empty());
    const std::string& o = last_output_;
    unsigned long long slots = 0, steps = 0, tokens = 0, uses = 0, hits = 0, inflight = 0, waited = 0,
                       misses = 0, cpu = 0;
    double hit_pct = 0;
    const size_t a = o.find("offload: ");
    ASSERT_NE(a, std::string::npos) << o;
    ASSERT_EQ(std::sscanf(o.c_str() + a,
                          "offload: %llu slots, %llu steps, %llu tokens; expert uses %llu: hits %llu (%lf%%), "
                          "prefetch in flight %llu (waited %llu), misses %llu \xe2\x86\x92 cpu %llu",
                          &slots, &steps, &tokens, &uses, &hits, &hit_pct, &inflight, &waited, &misses, &cpu),
              10)
        << o.substr(a, 300);
    double demand_mb = 0, prefetch_mb = 0;
    const size_t h = o.find("(demand+stream ");
    ASSERT_NE(h, std::string::npos) << o;
    ASSERT_EQ(std::sscanf(o.c_str() + h, "(demand+stream %lf MB, prefetch+admit %lf MB", &demand_mb, &prefetch_mb), 2);
    // --stats: the "all" row (uses, hit%, misses, cpu_exp) and the tokens / H2D line.
    const size_t r = o.find("\n  all ", o.find("pf_wasteMiB"));
    ASSERT_NE(r, std::string::npos) << o;
    unsigned long long t_uses = 0, t_misses = 0, t_cpu = 0, t_tokens = 0;
    double t_hit = 0, t_h2d_mib = 0, t_h2d_tok = 0, wall = 0;
    ASSERT_EQ(std::sscanf(o.c_str() + r + 1, "  all %llu %lf %llu %llu", &t_uses, &t_hit, &t_misses, &t_cpu), 4);
    const size_t t = o.find("tokens ", r);
    ASSERT_EQ(std::sscanf(o.c_str() + t, "tokens %llu  wall %lf ms  H2D %lf MiB/token (%lf MiB total)", &t_tokens,
                          &wall, &t_h2d_tok, &t_h2d_mib),
              4);
    EXPECT_EQ(slots, 64u) << extra;
    EXPECT_GT(uses, 0u) << extra;
    EXPECT_EQ(t_uses, uses) << extra;
    EXPECT_EQ(hits + inflight + misses, uses) << extra;
    EXPECT_EQ(t_misses, misses + inflight) << extra;
    EXPECT_EQ(t_cpu, cpu) << extra;
    EXPECT_EQ(t_tokens, tokens) << extra;
    EXPECT_NEAR(t_hit, hit_pct, 0.051) << extra;
    // Both print every H2D byte after the initial hot set, rounded to 0.1 MB / 0.1 MiB.
    EXPECT_NEAR(t_h2d_mib * 1.048576, demand_mb + prefetch_mb, 0.1 + 0.06) << extra;
  }
}

// The float32 payload of a .npy file written by `ferry logits` (format version 1).
std::vector<float> npy_floats(const std::string& bytes) {
  if (bytes.size() < 10 || bytes.compare(1, 5, "NUMPY") != 0) return {};
  const size_t header = static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
  const size_t off = 10 + header;
  std::vector<float> v((bytes.size() - off) / sizeof(float));
  std::memcpy(v.data(), bytes.data() + off, v.size() * sizeof(float));
  return v;
}

// The one flow cuda runs (slot experts as device kernels on a compute stream, CPU experts beside
// them, per-slot outputs and one ordered sum) on the sim device through the whole CLI, with half
// the experts resident: the CPU's logits bit for bit for every cold path, and the plan counts the
// step buffers.
TEST_F(OffloadCli, SimDeviceFlowIsTheCpuBytes) {
  const std::string plan_path = dir_ + "/plan-flow.json";
  ASSERT_FALSE(logits("--device sim --plan-json " + plan_path, "flow-all").empty());
  EXPECT_GT(nlohmann::json::parse(slurp(plan_path))["step_bytes"].get<uint64_t>(), 0u);
  const std::vector<float> cpu_prefill = npy_floats(logits("", "cpu")), cpu_decode = npy_floats(logits("--decode", "cpu-decode"));
  ASSERT_FALSE(cpu_prefill.empty());
  for (const char* cold : {"auto", "cpu", "copy"}) {
    for (const char* mode : {"", "--decode "}) {
      const std::vector<float>& cpu = *mode ? cpu_decode : cpu_prefill;
      const std::string vram = vram_for(std::string("--device sim ") + mode, 64);
      const std::vector<float> got = npy_floats(logits(std::string("--device sim --offload-stats ") +
                                                           mode + "--vram " + vram + " --cold " + cold,
                                                       std::string("flow-") + cold + (*mode ? "-d" : "")));
      ASSERT_EQ(got.size(), cpu.size()) << cold << " " << mode;
      EXPECT_EQ(std::memcmp(got.data(), cpu.data(), got.size() * sizeof(float)), 0) << cold << " " << mode;
      EXPECT_NE(last_output_.find("offload: 64 slots"), std::string::npos) << last_output_;
    }
  }
}

// "offload: device memory peak X MiB of Y MiB budget" from --offload-stats, as {X, Y}.
std::pair<double, double> peak_and_budget_mib(const std::string& out) {
  const size_t at = out.find("device memory peak ");
  double peak = -1, budget = -1;
  if (at != std::string::npos) std::sscanf(out.c_str() + at, "device memory peak %lf MiB of %lf MiB", &peak, &budget);
  return {peak, budget};
}

// --device cuda --vram with half the experts resident, through the whole CLI (plan, pinned host
// store, device flow, host bridge), prefill and decode, every cold path. `copy` runs the resident
// kernels on every expert: the resident run's logits up to the order experts are summed in
// (measured on the emulator: 6e-11 prefill, 0 decode). `cpu`, `auto` and `mapped` (whose prefill
// misses go to the CPU) include CPU experts, which quantize activations as ggml does (Q8_K) where
// the GPU kernels read floats: close, not equal (measured ~1.4e-5). The pool peak stays inside
// the budget. Runs where a CUDA device is: the GPU machine, or the CUDA emulator build
// (tests/cuda_emu).
TEST_F(OffloadCli, CudaOffloadIsCloseToCudaResident) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<float> resident = npy_floats(logits("--device cuda", "cuda-all"));
  const std::vector<float> resident_decode = npy_floats(logits("--device cuda --decode", "cuda-all-d"));
  ASSERT_FALSE(resident.empty());
  ASSERT_EQ(resident.size(), resident_decode.size());
  for (const char* mode : {"", "--decode "}) {
    const std::string vram = vram_for(std::string("--device cuda ") + mode, 64);
    for (const char* cold : {"copy", "cpu", "auto", "mapped"}) {
      const std::string host = std::string(cold) == "mapped" ? " --host-load registered" : "";
      const std::vector<float> got = npy_floats(logits(std::string("--device cuda --offload-stats ") + mode + "--vram " +
                                                           vram + " --cold " + cold + host,
                                                       std::string("cuda-") + cold + (*mode ? "-d" : "")));
      const std::vector<float>& want = *mode ? resident_decode : resident;
      ASSERT_EQ(got.size(), want.size()) << cold << " " << mode << last_output_;
      const double bound = std::string(cold) == "copy" ? 1e-9 : 1e-4;
      EXPECT_LE(test::diff(got, want).nmse, bound) << cold << " " << mode;
      EXPECT_NE(last_output_.find("offload: 64 slots"), std::string::npos) << last_output_;
      const auto [peak, budget] = peak_and_budget_mib(last_output_);
      EXPECT_GT(peak, 0) << last_output_;
      EXPECT_LE(peak, budget) << cold << " " << mode;
    }
  }
  // Decode steps recorded as graph segments around the offload executor's MoE steps (opt-in):
  // the same bytes as kernel by kernel.
  {
    const std::string vram = vram_for("--device cuda --decode ", 64);
    const std::string flags = "--device cuda --decode --cold copy --offload-stats --vram " + vram;
    const std::string eager = logits(flags, "cuda-eager-d");  // graphs are off by default
    EXPECT_NE(last_output_.find("cuda graphs off: 0 launched"), std::string::npos) << last_output_;
    const std::string segmented = logits(flags + " --cuda-graphs segments", "cuda-segments-d");
    // 16 tokens one at a time: the first eagerly, then 5 segments (4 layers + 1) per token.
    EXPECT_NE(last_output_.find("cuda graphs on: 75 launched, 5 instantiated"), std::string::npos) << last_output_;
    ASSERT_FALSE(eager.empty());
    EXPECT_EQ(segmented, eager);
    // Decode from the device tables: no host routing, each token one whole graph (the first one
    // eager); slot and mapped experts run the same kernels as copy-now: the same bytes.
    const std::string table = logits(flags + " --cuda-graphs on --offload-decode table", "cuda-table-d");
    EXPECT_NE(last_output_.find("cuda graphs on: 15 launched, 1 instantiated"), std::string::npos) << last_output_;
    EXPECT_NE(last_output_.find("offload: 16 decode tokens from the device tables"), std::string::npos)
        << last_output_;
    EXPECT_EQ(table, eager);
    const auto [peak, budget] = peak_and_budget_mib(last_output_);
    EXPECT_LE(peak, budget);
    // A routing override is uploaded in the recorded step (ids out of range would fail the log).
    ASSERT_FALSE(
        logits(flags + " --cuda-graphs on --offload-decode table --routing locality", "cuda-table-loc-d").empty());
    EXPECT_NE(last_output_.find("cuda graphs on: 15 launched"), std::string::npos) << last_output_;
    EXPECT_NE(last_output_.find("offload: 16 decode tokens from the device tables"), std::string::npos)
        << last_output_;
    // --stats observes the routing from the tables' log: decode stays on the tables, one graph a
    // token, and the same logits.
    const std::vector<float> observed =
        npy_floats(logits(flags + " --cuda-graphs on --offload-decode table --stats", "cuda-table-stats-d"));
    EXPECT_NE(last_output_.find("cuda graphs on: 15 launched"), std::string::npos) << last_output_;
    EXPECT_NE(last_output_.find("offload: 16 decode tokens from the device tables"), std::string::npos)
        << last_output_;
    EXPECT_NE(last_output_.find("routing locality"), std::string::npos) << last_output_;
    EXPECT_EQ(observed, npy_floats(table));
  }
  // A budget that cannot hold the backend's own workspaces is refused with the budget named.
  logits("--device cuda --vram 8M", "cuda-small", 1);
  EXPECT_NE(last_output_.find("--vram"), std::string::npos) << last_output_;
}

// Zero flags on a card (runtime/engine/fit.hpp): with no --device, an emulator build whose card
// (FERRY_CUDA_EMU_MEMORY) is smaller than the model plus the 1 GiB margin picks cuda, fits the
// budget to free − margin, offloads, and the emulator's real device high-water mark stays within
// free − margin; the same binary without a card runs on the CPU, byte for byte as --device cpu.
TEST_F(OffloadCli, CudaAutoFitsTheCard) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
#if !defined(FERRY_CUDA_EMU)
  GTEST_SKIP() << "sets the emulated card's memory (FERRY_CUDA_EMU_MEMORY)";
#endif
  // A card of 1 GiB + what the fixed part and half the expert slots take.
  const uint64_t half = std::stoull(vram_for("--device cuda ", 64));
  const uint64_t card_mib = 1024 + (half + (1u << 20) - 1) / (1u << 20);
  const std::string cmd = ferry_binary() + " logits -t 2 -c 64 -m " + model_ + " --tokens " + tokens_ + " -o ";
  std::string out;
  ASSERT_EQ(run("FERRY_CUDA_EMU_MEMORY=" + std::to_string(card_mib) + " FERRY_CUDA_EMU_REPORT=1 " + cmd + dir_ +
                    "/auto-card.npy --offload-stats --cold copy",
                out),
            0)
      << out;
  EXPECT_NE(out.find("fit: "), std::string::npos) << out;
  EXPECT_NE(out.find(": offloading"), std::string::npos) << out;
  int slots = -1;  // from --offload-stats' "offload: N slots, ..."
  for (size_t at = out.find("offload: "); at != std::string::npos; at = out.find("offload: ", at + 1))
    if (std::isdigit(static_cast<unsigned char>(out[at + 9])) && out.find(" slots", at) < out.find('\n', at))
      slots = std::atoi(out.c_str() + at + 9);
  EXPECT_GT(slots, 0) << out;
  EXPECT_LT(slots, 4 * 32) << out;
  const size_t peak_at = out.find("device memory peak ");
  ASSERT_NE(peak_at, std::string::npos) << out;
  const uint64_t peak = std::stoull(out.substr(peak_at + 19));
  EXPECT_GT(peak, 0u);
  EXPECT_LE(peak, (card_mib - 1024) << 20) << out;
  // Copied cold experts run the resident kernels: the resident GPU run's logits (the CPU's cold
  // experts would differ within rounding, enough to flip a later layer's routing on this model).
  const std::vector<float> resident = npy_floats(logits("--device cuda", "auto-cuda-ref"));
  ASSERT_FALSE(resident.empty());
  EXPECT_LE(test::diff(npy_floats(slurp(dir_ + "/auto-card.npy")), resident).nmse, 1e-9) << out;
  EXPECT_NE(last_output_.find("every expert resident"), std::string::npos) << last_output_;  // 8 GiB card
  ASSERT_FALSE(logits("--device cpu", "auto-cpu-ref").empty());
  // Without a card the emulator build's auto is the CPU: no fit, the CPU's bytes.
  ASSERT_EQ(run(cmd + dir_ + "/auto-none.npy", out), 0) << out;
  EXPECT_EQ(out.find("fit: "), std::string::npos) << out;
  EXPECT_EQ(slurp(dir_ + "/auto-none.npy"), slurp(dir_ + "/auto-cpu-ref.npy"));
}

// ferry serve's default context (what host memory holds, here the model's trained 4096) is not a
// -c: on a card whose budget holds the fixed part at 2048 tokens (or less) but not at 4096, the fit
// shrinks it and the slots share what is left, where a -c 4096 is refused, naming -c.
TEST_F(OffloadCli, CudaAutoFitsServeContext) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
#if !defined(FERRY_CUDA_EMU)
  GTEST_SKIP() << "sets the emulated card's memory (FERRY_CUDA_EMU_MEMORY)";
#endif
  // The server's fixed part at each context, from the fit's refusal of a -c on a card its
  // workspaces just fit (each run bounded: a load cannot outlive the test).
  const std::string serve_cmd = "timeout -k 5 120 " + ferry_binary() + " serve -t 2 --port 0 -m " + model_;
  const auto fixed_mib = [&](int ctx) {
    std::string out;
    EXPECT_NE(run("FERRY_CUDA_EMU_MEMORY=1110 " + serve_cmd + " -c " + std::to_string(ctx), out), 0);
    const size_t at = out.find("cannot hold the fixed part of ");
    EXPECT_NE(at, std::string::npos) << out;
    const size_t open = out.find(" (", out.find(" at -c ", at));
    return at == std::string::npos ? 0.0 : std::atof(out.c_str() + open + 2);  // "129.21 MiB: ..."
  };
  const double f4096 = fixed_mib(4096), f2048 = fixed_mib(2048);
  ASSERT_GT(f4096, f2048 + 1) << f4096 << " " << f2048;
  const std::string card = "FERRY_CUDA_EMU_MEMORY=" + std::to_string(1024 + static_cast<int>((f4096 + f2048) / 2));
  // Without -c: the server starts; stopped once ready (or failed).
  const std::string log = dir_ + "/serve-default.log";
  std::string fitted;
  run(card + " " + serve_cmd + " > " + log + " 2>&1 & p=$!; for i in $(seq 900); do grep -q 'ready:\\|error' " + log +
          " && break; sleep 0.1; done; kill $p; wait $p; cat " + log,
      fitted);
  const size_t shrunk = fitted.find(" (shrunk from 4096 to fit)");
  ASSERT_NE(shrunk, std::string::npos) << fitted;
  const size_t c_at = fitted.rfind("-c ", shrunk) + 3;
  const std::string ctx = fitted.substr(c_at, shrunk - c_at);
  EXPECT_EQ(ctx, "2048") << fitted;
  EXPECT_NE(fitted.find("ready: 1 slots of 2048 tokens (-c 2048)"), std::string::npos) << fitted;
  // The same card with -c 4096: refused, naming -c.
  std::string given;
  EXPECT_NE(run(card + " " + serve_cmd + " -c 4096", given), 0);
  EXPECT_NE(given.find("use a smaller -c"), std::string::npos) << given;
}

// `ferry bench` sweeps the offloaded cuda decode flows: a row each, the table row with its hit
// rate and link bytes but no host-wait figure (its stalls are inside the kernels).
TEST_F(OffloadCli, CudaBenchSweepsTheDecodeFlows) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string vram = vram_for("--device cuda --decode ", 64);
  std::string out;
  const int rc = run(ferry_binary() + " bench -m " + model_ + " -t 2 -p 0 -n 4 -r 1 --no-warmup -o jsonl --device cuda --vram " +
                         vram + " --offload-decode host,table",
                     out);
  ASSERT_EQ(rc, 0) << out;
  std::vector<nlohmann::json> rows;
  size_t at = 0;
  while (at < out.size()) {
    const size_t end = std::min(out.find('\n', at), out.size());
    if (out[at] == '{') rows.push_back(nlohmann::json::parse(out.substr(at, end - at)));
    at = end + 1;
  }
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_EQ(rows[0]["offload_decode"], "host");
  EXPECT_EQ(rows[1]["offload_decode"], "table");
  for (const auto& r : rows) {
    EXPECT_GT(r["avg_ts"].get<double>(), 0.0);
    ASSERT_FALSE(r["hit_rate"].is_null()) << r.dump();
    EXPECT_GT(r["hit_rate"].get<double>(), 0.0);
    EXPECT_LT(r["hit_rate"].get<double>(), 1.0);
    EXPECT_GT(r["h2d_bytes_per_token"].get<double>(), 0.0);
  }
  EXPECT_FALSE(rows[0]["gpu_wait_pct"].is_null());
  EXPECT_TRUE(rows[1]["gpu_wait_pct"].is_null());
}

// `ferry logits --dump` on cuda: the intermediates are device memory, copied out after the ops
// that write them; they match the CPU's (the dump reads the host copy, never a device pointer).
TEST_F(OffloadCli, CudaDumpCopiesDeviceTensors) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const char* device : {"cpu", "cuda"}) {
    const std::string dir = dir_ + "/dump-" + device;
    ASSERT_FALSE(logits(std::string("--device ") + device + " --dump ffn_moe_out,l_out --dump-dir " + dir, std::string("dump-") + device).empty());
  }
  for (const char* name : {"ffn_moe_out-0", "l_out-3"}) {
    const std::vector<float> cpu = npy_floats(slurp(dir_ + "/dump-cpu/" + name + ".npy"));
    const std::vector<float> gpu = npy_floats(slurp(dir_ + "/dump-cuda/" + name + ".npy"));
    ASSERT_EQ(cpu.size(), 16u * 256u) << name;  // 16 tokens × n_embd
    ASSERT_EQ(gpu.size(), cpu.size()) << name;
    EXPECT_LE(test::diff(gpu, cpu).nmse, 1e-3) << name;
  }
}

TEST_F(OffloadCli, ErrorsAndProfiles) {
  logits("--device sim --vram 1M", "small", 1);
  EXPECT_NE(last_output_.find("too small"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("missing"), std::string::npos) << last_output_;
  logits("--vram 1G", "no-device", 1);  // --vram without an offload device
  logits("--device sim --vram lots", "junk", 2);  // a usage error, naming the flag
  EXPECT_NE(last_output_.find("--vram: invalid size 'lots'"), std::string::npos) << last_output_;
  logits("--device sim --sim-link 13:x", "junk-link", 2);
  EXPECT_NE(last_output_.find("--sim-link '13:x'"), std::string::npos) << last_output_;
  logits("--device sim --cold warm", "junk-cold", 2);
  EXPECT_NE(last_output_.find("--cold 'warm': expected auto, cpu, copy or mapped"), std::string::npos)
      << last_output_;
  logits("--device cpu --offload-decode table", "table-cpu", 1);
  EXPECT_NE(last_output_.find("--offload-decode table needs --device cuda or sim"), std::string::npos) << last_output_;
  logits("--device sim --offload-decode fast", "table-bad", 2);  // a usage error, as every bad flag value
  EXPECT_NE(last_output_.find("--offload-decode"), std::string::npos) << last_output_;

  const std::string prof = dir_ + "/profile.json";
  ASSERT_FALSE(logits("--device sim --record-profile " + prof, "rec").empty());
  const auto p = nlohmann::json::parse(slurp(prof));
  EXPECT_EQ(p["format"], "ferry-expert-profile");
  EXPECT_EQ(p["tokens"].get<int>(), 16);
  uint64_t sum = 0;
  for (const auto& row : p["counts"])
    for (const auto& c : row) sum += c.get<uint64_t>();
  EXPECT_EQ(sum, 16u * 4u * 4u);  // tokens × layers × top_k
  const std::string cpu = logits("", "cpu");
  EXPECT_EQ(logits("--device sim --vram 12M --print-plan --profile " + prof, "prof"), cpu);
  EXPECT_NE(last_output_.find("initial set: profile"), std::string::npos) << last_output_;
}

}  // namespace
}  // namespace ferry
