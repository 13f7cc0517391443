#pragma once
// One model load of `ferry bench` (a model file on one device, VRAM budget and routing) and the
// timed tests run on it, llama-bench's way: random token ids (no tokenizer), a warm-up run, then
// `reps` repetitions of [depth prefill (untimed)] → prompt in n_batch steps → n_gen single-token
// steps, each repetition timed as a whole.
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/cli/bench_report.hpp"
#include "runtime/cli/observe_args.hpp"
#include "runtime/engine/engine.hpp"

namespace ferry::cli {

struct BenchLoadSpec {
  std::string model;
  // The load's run options: this point of the sweep (device, budget, routing, decode flow) over
  // the flags given once (run_args.hpp).
  RunOptions run;
  std::string routing;  // --routing as given, for the report
  // The session the placement plan must hold: the largest test's context and KV types.
  int64_t plan_ctx = 0;
  GgmlType plan_type_k = GgmlType::F16, plan_type_v = GgmlType::F16;
  int32_t n_batch = 512;
};

struct BenchTestSpec {
  int32_t n_prompt = 0, n_gen = 0, n_depth = 0;
  int32_t n_threads = 0;
  std::string type_k = "f16", type_v = "f16";
  int32_t reps = 5;
  bool warmup = true;
  // How the depth is made: evaluated (llama-bench's way), or by evaluating min(depth, 256) tokens
  // and copying their KV rows up to the depth (Session::extend_by_copy: the same attention work
  // per generated token without the quadratic prefill; the recurrent state is that of the
  // evaluated tokens).
  bool depth_by_copy = false;
  // --kernel-times: per-kernel GPU times over the timed parts (cuda loads; the load's CUDA graphs
  // are off, cmd_bench.cpp).
  bool kernel_times = false;
};

// Counts what the forward reads, from the MoE steps' routing (an observer; host-side executors).
struct WeightTraffic {
  uint64_t steps = 0, tokens = 0, expert_bytes = 0;
};
class WeightTrafficObserver;

class BenchModel {
 public:
  explicit BenchModel(const BenchLoadSpec& s);  // loads; ferry::Error when it cannot
  ~BenchModel();
  // Runs one test; `progress` prefixes the stderr lines. mem_bw_gbps: the bandwidth of the memory
  // the weights stream from (nullopt: no speed-of-light column).
  BenchResult run(const BenchTestSpec& t, std::optional<double> mem_bw_gbps, const std::string& progress);
  LoadedModel& loaded() { return *model_; }

 private:
  void fill_identity(BenchResult& r) const;
  double weight_bytes(const WeightTraffic& w) const;
  WeightTraffic estimate_traffic(const BenchTestSpec& t) const;  // when the requests cannot be read
  void eval_random(Session& s, int32_t n_tokens, int32_t n_batch);

  BenchLoadSpec spec_;
  std::unique_ptr<Observability> obs_;
  std::unique_ptr<WeightTrafficObserver> tap_;  // null on cuda (estimated there: no routing log)
  const WeightTraffic* traffic_ = nullptr;      // the tap's counts
  std::unique_ptr<LoadedModel> model_;
  std::vector<uint64_t> expert_bytes_;      // (n_layer) bytes of one expert (gate + up + down)
  uint64_t dense_bytes_per_step_ = 0;       // non-expert weights one forward step reads
  uint64_t embd_row_bytes_ = 0;             // token_embd bytes per token (a row lookup)
  uint64_t model_size_ = 0, model_n_params_ = 0;
  std::string model_type_, cpu_info_;
  std::mt19937 rng_{1234};
};

}  // namespace ferry::cli
