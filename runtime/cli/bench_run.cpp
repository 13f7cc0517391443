#include "runtime/cli/bench_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include "offload/offload_executor.hpp"
#include "runtime/moe/stats_routing.hpp"
#include "runtime/backend/cuda_ops.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/threads.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/weights.hpp"

namespace ferry::cli {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown";
}

// llama.cpp's llama_model_ftype_name for the file types Ferry reads.
std::string ftype_name(std::optional<uint32_t> ft) {
  if (!ft) return "?";
  switch (*ft) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 12: return "Q3_K - Medium";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 30: return "IQ4_XS - 4.25 bpw";
    case 32: return "BF16";
    case 38: return "MXFP4 MoE";
    default: return fmt::format("ftype {}", *ft);
  }
}

// Tokens evaluated before a depth made by copying (BenchTestSpec::depth_by_copy).
constexpr int32_t kDepthSeedTokens = 256;

// Bytes one position takes in the KV caches of all attention layers (whole blocks per head row).
double kv_bytes_per_token(const ModelConfig& c, GgmlType tk, GgmlType tv) {
  const int64_t n_attn = std::count(c.layer_kind.begin(), c.layer_kind.end(), LayerKind::attention);
  return static_cast<double>(n_attn) * c.n_head_kv *
         static_cast<double>(row_bytes(tk, static_cast<uint64_t>(c.head_dim_k)) +
                             row_bytes(tv, static_cast<uint64_t>(c.head_dim_v)));
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%FT%TZ", &tm);
  return buf;
}

// CPU time of the calling thread so far: its own work, not the worker threads' it waits for.
uint64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    fail(ErrorKind::internal, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

bool beyond_layers(const std::string& name, int32_t n_layer) {
  return name.rfind("blk.", 0) == 0 && std::atoi(name.c_str() + 4) >= n_layer;
}

}  // namespace

// Counts the distinct experts of every step, and the steps and tokens, from the routing the
// executor reports (under the routing override: the ids actually computed).
class WeightTrafficObserver final : public MoeObserver {
 public:
  WeightTrafficObserver(const std::vector<uint64_t>& expert_bytes, int32_t n_expert)
      : expert_bytes_(expert_bytes), seen_(static_cast<size_t>(n_expert)) {}
  void on_routing(const RoutingView& r) override {
    std::fill(seen_.begin(), seen_.end(), 0);
    uint64_t distinct = 0;
    const int64_t n = static_cast<int64_t>(r.n_tokens) * r.top_k;
    for (int64_t i = 0; i < n; ++i) {
      const auto id = static_cast<size_t>(r.ids[i]);
      if (id < seen_.size() && !seen_[id]) {
        seen_[id] = 1;
        ++distinct;
      }
    }
    if (r.layer == 0) {
      ++counts.steps;
      counts.tokens += static_cast<uint64_t>(r.n_tokens);
    }
    if (static_cast<size_t>(r.layer) < expert_bytes_.size())
      counts.expert_bytes += distinct * expert_bytes_[static_cast<size_t>(r.layer)];
  }
  WeightTraffic counts;

 private:
  const std::vector<uint64_t>& expert_bytes_;
  std::vector<uint8_t> seen_;
};

BenchModel::BenchModel(const BenchLoadSpec& s) : spec_(s) {
  obs_ = std::make_unique<Observability>(s.run.observe);
  const bool cuda = s.run.device == DeviceKind::cuda;
  int32_t n_expert = 0;

  // The weight sizes come from the GGUF before the executors are built (the tap reads them).
  {
    const gguf::File f = gguf::File::open(s.model);
    const ModelConfig c = read_config(f);
    n_expert = c.n_expert;
    for (int32_t l = 0; l < c.n_layer; ++l) {
      uint64_t b = 0;
      for (const char* m : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) b += f.tensor(layer_tensor(l, m)).nb[2];
      expert_bytes_.push_back(b);
    }
    const bool tied = f.find_tensor("output.weight") == nullptr;
    for (const gguf::TensorInfo& t : f.tensors()) {
      model_size_ += t.n_bytes;
      model_n_params_ += t.n_elements();
      if (beyond_layers(t.name, c.n_layer) || t.name.find("_exps.") != std::string::npos) continue;
      if (t.name == "token_embd.weight") {
        embd_row_bytes_ = t.nb[1];
        if (!tied) continue;  // only the looked-up rows are read; tied: it is also the lm_head
      }
      dense_bytes_per_step_ += t.n_bytes;
    }
    model_type_ = fmt::format("{} {} {}", arch_name(c.arch), f.get_string_opt("general.size_label").value_or("?B"),
                              ftype_name(f.get_u32_opt("general.file_type")));
  }
  cpu_info_ = cpu_model_name();
  SessionOptions so;
  so.n_ctx = s.plan_ctx;
  so.type_k = s.plan_type_k;
  so.type_v = s.plan_type_v;
  so.n_batch = s.n_batch;
  RunOptions ro = run_options(s.run, *obs_, so);
  if (!cuda) {
    tap_ = std::make_unique<WeightTrafficObserver>(expert_bytes_, n_expert);
    traffic_ = &tap_->counts;
    ro.observers.push_back(tap_.get());
  }
  model_ = load_model_verbose(s.model, /*allow_default=*/false, ro);
}

BenchModel::~BenchModel() = default;

void BenchModel::fill_identity(BenchResult& r) const {
  r.cpu_info = cpu_info_;
  const bool cuda = spec_.run.device == DeviceKind::cuda;
  r.backends = cuda ? "CUDA" : "CPU";
  if (cuda && model_->device()) r.gpu_info = model_->device()->name();
  r.model_filename = spec_.model;
  r.model_type = model_type_;
  r.model_size = model_size_;
  r.model_n_params = model_n_params_;
  r.n_batch = r.n_ubatch = spec_.n_batch;
  r.device = device_kind_name(spec_.run.device);
  r.vram_budget = spec_.run.vram_bytes.value_or(0);
  r.routing = spec_.routing;
  // The decode flow of an offload executor's device flow (a budget that holds every expert on
  // cuda has none).
  if (const OffloadExecutor* ox = model_->moe().offload(); ox) r.offload_decode = name_of(kDecodeModes, spec_.run.offload.decode);
}

double BenchModel::weight_bytes(const WeightTraffic& w) const {
  return static_cast<double>(w.steps) * static_cast<double>(dense_bytes_per_step_) +
         static_cast<double>(w.tokens) * static_cast<double>(embd_row_bytes_) + static_cast<double>(w.expert_bytes);
}

WeightTraffic BenchModel::estimate_traffic(const BenchTestSpec& t) const {
  // Uniform routing: a step of B tokens uses n·(1 − (1 − k/n)^B) distinct experts on average.
  const ModelConfig& c = model_->config();
  WeightTraffic w;
  auto add_step = [&](int64_t b) {
    ++w.steps;
    w.tokens += static_cast<uint64_t>(b);
    const double n = c.n_expert, k = c.n_expert_used;
    const double distinct = n * (1.0 - std::pow(1.0 - k / n, static_cast<double>(b)));
    for (uint64_t eb : expert_bytes_) w.expert_bytes += static_cast<uint64_t>(distinct * static_cast<double>(eb));
  };
  for (int32_t done = 0; done < t.n_prompt; done += spec_.n_batch) add_step(std::min(spec_.n_batch, t.n_prompt - done));
  for (int32_t i = 0; i < t.n_gen; ++i) add_step(1);
  return w;
}

void BenchModel::eval_random(Session& s, int32_t n_tokens, int32_t n_batch) {
  std::uniform_int_distribution<int32_t> id(0, s.n_vocab() - 1);
  std::vector<int32_t> batch;
  for (int32_t done = 0; done < n_tokens; done += n_batch) {
    batch.resize(static_cast<size_t>(std::min(n_batch, n_tokens - done)));
    for (int32_t& v : batch) v = id(rng_);
    s.eval(batch);
  }
}

BenchResult BenchModel::run(const BenchTestSpec& t, std::optional<double> mem_bw_gbps, const std::string& progress) {
  BenchResult r;
  fill_identity(r);
  r.n_threads = t.n_threads;
  r.type_k = t.type_k;
  r.type_v = t.type_v;
  r.n_prompt = t.n_prompt;
  r.n_gen = t.n_gen;
  r.n_depth = t.n_depth;
  r.test_time = utc_now_iso();

  SessionOptions so;
  // llama-bench's context: exactly what the test needs (the warm-up fits in it too).
  so.n_ctx = std::max<int64_t>(int64_t{t.n_depth} + t.n_prompt + t.n_gen, 1);
  so.n_batch = spec_.n_batch;
  so.type_k = parse_cache_type(t.type_k, "-ctk");
  so.type_v = parse_cache_type(t.type_v, "-ctv");
  Session session(*model_, so);
  std::fprintf(stderr, "%s: KV cache %s/%s: %.0f bytes per token\n", progress.c_str(),
               t.type_k.c_str(), t.type_v.c_str(),
               kv_bytes_per_token(model_->config(), so.type_k, so.type_v));

  if (t.warmup) {
    std::fprintf(stderr, "%s: warm-up\n", progress.c_str());
    // Timed too (then dropped), so the timer's event pool is filled before the timed part.
    if (t.kernel_times) kernel_times_timing(true);
    if (t.n_prompt > 0) eval_random(session, t.n_prompt, spec_.n_batch);
    if (t.n_gen > 0) eval_random(session, 1, 1);
    if (t.kernel_times) kernel_times_timing(false);
  }
  if (t.kernel_times) (void)kernel_times_take(1, 0);  // nothing of the warm-up or earlier tests

  OffloadExecutor* ox = model_->moe().offload();
  WeightTraffic traffic;
  uint64_t uses = 0, hits = 0, h2d = 0, table_tokens = 0, gen_kernels = 0;
  double wait_ms = 0, timed_ms = 0;
  uint64_t host_cpu_ns = 0;
  for (int32_t rep = 0; rep < t.reps; ++rep) {
    std::fprintf(stderr, "%s: repetition %d/%d\n", progress.c_str(), rep + 1, t.reps);
    if (t.depth_by_copy && t.n_depth > 0) {
      session.reset();
      eval_random(session, std::min(t.n_depth, kDepthSeedTokens), spec_.n_batch);
      if (t.n_depth > session.n_past()) session.extend_by_copy(t.n_depth);
    } else if (t.n_depth > 0 && session.n_past() >= t.n_depth) {
      session.keep_prefix(t.n_depth);  // KV: truncated; recurrent state: re-evaluated (untimed)
    } else {
      session.reset();
      if (t.n_depth > 0) eval_random(session, t.n_depth, spec_.n_batch);
    }
    if (ox) ox->drain();
    const WeightTraffic w0 = traffic_ ? *traffic_ : WeightTraffic{};
    const OffloadStats s0 = ox ? ox->stats() : OffloadStats{};

    if (t.kernel_times) kernel_times_timing(true);
    // The thread-CPU interval lies inside the wall interval, so it can never exceed the wall time.
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t cpu0 = thread_cpu_ns();
    if (t.n_prompt > 0) eval_random(session, t.n_prompt, spec_.n_batch);
    const uint64_t k0 = cuda_kernels_launched();  // each eval waits for its logits: all ran
    for (int32_t i = 0; i < t.n_gen; ++i) eval_random(session, 1, 1);
    gen_kernels += cuda_kernels_launched() - k0;
    host_cpu_ns += thread_cpu_ns() - cpu0;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    if (t.kernel_times) kernel_times_timing(false);
    r.samples_ns.push_back(static_cast<uint64_t>(ns));
    timed_ms += static_cast<double>(ns) * 1e-6;

    if (traffic_) {
      traffic.steps += traffic_->steps - w0.steps;
      traffic.tokens += traffic_->tokens - w0.tokens;
      traffic.expert_bytes += traffic_->expert_bytes - w0.expert_bytes;
    }
    if (ox) {
      ox->drain();  // settles the prefetches this repetition issued, so their bytes count here
      const OffloadStats s1 = ox->stats();
      uses += s1.uses - s0.uses;
      hits += s1.hits - s0.hits;
      // Copies, and the bytes misses read in place over the link.
      h2d += (s1.h2d_bytes - s0.h2d_bytes) + (s1.prefetch.bytes - s0.prefetch.bytes) +
             (s1.mapped_bytes - s0.mapped_bytes);
      table_tokens += s1.table_tokens - s0.table_tokens;
      wait_ms += s1.wait_ms - s0.wait_ms;
    }
  }

  const double tokens = static_cast<double>(t.n_prompt + t.n_gen) * t.reps;
  if (tokens > 0) r.host_cpu_ms_per_token = static_cast<double>(host_cpu_ns) * 1e-6 / tokens;
  if (t.kernel_times) {
    r.kernel_times = kernel_times_take(tokens, timed_ms * 1e3);
    if (r.host_cpu_ms_per_token) r.kernel_times->host_cpu_us_per_token = *r.host_cpu_ms_per_token * 1e3;
  }
  if (!traffic_) {
    const WeightTraffic one = estimate_traffic(t);
    traffic = {one.steps * static_cast<uint64_t>(t.reps), one.tokens * static_cast<uint64_t>(t.reps),
               one.expert_bytes * static_cast<uint64_t>(t.reps)};
  }
  if (tokens > 0) r.weight_bytes_per_token = weight_bytes(traffic) / tokens;
  if (ox) {
    if (uses > 0) r.hit_rate = static_cast<double>(hits) / static_cast<double>(uses);
    if (tokens > 0) r.h2d_bytes_per_token = static_cast<double>(h2d) / tokens;
    // Host waits on copies; a decode from the device tables stalls inside its kernels instead
    // (mapped reads), which only a GPU timeline shows: not reported for those.
    if (timed_ms > 0 && table_tokens == 0) r.gpu_wait_pct = 100.0 * wait_ms / timed_ms;
  } else if (spec_.run.device == DeviceKind::cuda) {
    r.hit_rate = 1.0;  // every expert resident: no copies by construction
    r.h2d_bytes_per_token = 0.0;
  }
  if (spec_.run.device == DeviceKind::cuda && t.n_gen > 0)
    r.launches_per_token = static_cast<double>(gen_kernels) / (static_cast<double>(t.n_gen) * t.reps);
  r.mem_bw_gbps = mem_bw_gbps;
  if (mem_bw_gbps && *mem_bw_gbps > 0 && timed_ms > 0)
    r.speed_of_light_fraction = weight_bytes(traffic) / (timed_ms * 1e-3) / (*mem_bw_gbps * 1e9);
  std::fprintf(stderr, "%s: %.2f ± %.2f t/s\n", progress.c_str(), r.avg_ts(), r.stddev_ts());
  return r;
}

}  // namespace ferry::cli
