#pragma once
// Results of `ferry bench` and their output formats. Column names follow llama-bench's where the
// meaning is the same (model_filename … stddev_ts, samples_ns, samples_ts), so its tooling reads
// them; Ferry's own columns follow (device, vram_budget, routing, hit_rate, …). Fields that do not
// apply to a test (offload counters on the cpu device) are null in JSON, empty in CSV, "-" in md.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace ferry::cli {

// `ferry bench --kernel-times`: GPU time per kernel over the timed part of one test
// (kernels/cuda/kernel_times.hpp), per token of the test (n_prompt + n_gen, all repetitions).
struct BenchKernelTimes {
  struct Row {
    std::string kernel;
    double launches_per_token = 0, us_per_token = 0, us_per_launch = 0;
  };
  std::vector<Row> rows;  // by us_per_token, largest first
  double sum_us_per_token = 0;   // over all rows
  double wall_us_per_token = 0;  // the timed wall time: what the sum leaves is GPU idle time
  // CPU time of the thread that ran the timed evals (BenchResult::host_cpu_ms_per_token); unset
  // where the caller did not measure it (bench_gpu_e2e).
  std::optional<double> host_cpu_us_per_token;
  uint64_t untimed_launches = 0;  // launches into a CUDA graph capture (none with graphs off)
  bool emulated = false;          // the CUDA emulator: CPU times, not GPU timings
};

struct BenchResult {
  std::string cpu_info, gpu_info, backends;
  std::string model_filename, model_type;
  uint64_t model_size = 0;      // bytes of all tensors
  uint64_t model_n_params = 0;  // elements of all tensors
  int32_t n_batch = 0, n_ubatch = 0, n_threads = 0;
  std::string type_k, type_v;
  int32_t n_prompt = 0, n_gen = 0, n_depth = 0;
  std::string test_time;             // ISO 8601 UTC, when the test started
  std::vector<uint64_t> samples_ns;  // (reps) wall time of the timed part of each repetition

  std::string device;         // cpu | sim | cuda
  uint64_t vram_budget = 0;   // bytes; 0: no budget (every expert resident)
  std::string routing;        // --routing
  std::string offload_decode;  // --offload-decode of an offloaded cuda load (host | table), else ""
  // Over the timed parts only: fraction of expert uses served from a resident slot; host→device
  // bytes (demand, streaming and prefetch copies) per token; time the host blocked waiting for
  // the device's copies, as a percentage of the timed wall time.
  std::optional<double> hit_rate, h2d_bytes_per_token, gpu_wait_pct;
  // Weight bytes the forward read per token (dense tensors once per forward step, the distinct
  // experts each step used), the measured bandwidth of the memory they were read from, and
  // weight_bytes_per_token × avg_ts / mem_bw: 1.0 would be a pure weight stream at full speed.
  std::optional<double> weight_bytes_per_token, mem_bw_gbps, speed_of_light_fraction;
  // CUDA kernels run per generated token, over the timed single-token steps (cuda only; graph
  // nodes counted, runtime/backend/cuda_ops.hpp cuda_kernels_launched): what fusing lowers.
  std::optional<double> launches_per_token;
  // CPU time (CLOCK_THREAD_CPUTIME_ID) of the one thread that ran the timed evals, per token of
  // the test (n_prompt + n_gen, all repetitions): the host's own work per token (graph building,
  // launches, the CPU backend's share on that thread; not its worker threads). At most the wall
  // time per token, the thread being one. On a GPU the CUDA runtime spins while this thread waits
  // for the device (its default schedule with fewer contexts than cores), so that wait counts too.
  std::optional<double> host_cpu_ms_per_token;
  std::optional<BenchKernelTimes> kernel_times;  // --kernel-times on a cuda load

  uint64_t avg_ns() const;
  uint64_t stddev_ns() const;
  std::vector<double> samples_ts() const;  // (n_prompt + n_gen) tokens per second of each sample
  double avg_ts() const;
  double stddev_ts() const;
  std::string test_name() const;  // pp512, tg128, pp512+tg128, "… @ d4096"
};

enum class BenchFormat { md, csv, json, jsonl };
BenchFormat parse_bench_format(const std::string& s);  // ErrorKind::invalid_arg on junk

// Writes results as they finish (csv, json, jsonl stream; md needs every row for its column
// widths and prints them at the end).
class BenchPrinter {
 public:
  BenchPrinter(BenchFormat f, std::FILE* out) : f_(f), out_(out) {}
  void header();
  void add(const BenchResult& r);
  void footer();

 private:
  void print_md();
  BenchFormat f_;
  std::FILE* out_;
  bool first_ = true;
  std::vector<BenchResult> rows_;
};

// llama-bench's sample statistics: mean and the sample standard deviation (n − 1), 0 for one sample.
double mean_of(const std::vector<double>& v);
double stddev_of(const std::vector<double>& v);
// The text of a JSON string (without its quotes): quotes, backslashes and control characters escaped.
std::string escape_json(const std::string& v);

// --kernel-times (bench_kernel_times.cpp): a result's table in markdown (a heading naming the
// test, the rows, the sum against the wall time), and as a JSON object.
std::string kernel_times_md(const BenchResult& r);
std::string kernel_times_table(const BenchKernelTimes& k);  // the rows and the sum line, no heading
// "kernel times, WHAT:" and, on the emulator, that these are not GPU timings.
std::string kernel_times_heading(const std::string& what, bool emulated);
std::string kernel_times_json(const BenchKernelTimes& k);
// The timer on around each repetition's timed part (ErrorKind::unsupported without CUDA), then the
// times recorded since the last take, divided by `tokens`, with the timed wall time.
void kernel_times_timing(bool on);
BenchKernelTimes kernel_times_take(double tokens, double wall_us);

}  // namespace ferry::cli
