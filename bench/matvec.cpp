// CPU matvec throughput per weight type and thread count, as GB/s of weights read, next to the
// machine's streaming read bandwidth measured in the same run (a multithreaded sum over a buffer
// of the same size, best of four access patterns). Matrices are cols × rows with `--mb` MiB of
// weights, far beyond the caches.
//
//   bench_matvec [--mb 512] [--cols 4096] [--threads 1,2,4] [--reps 7] [--batch 1,8,32] [--expert]
//                [--rows16] [--types f16,q8_0,q4_k,q5_k,q6_k,q4_0,iq4_nl,mxfp4]
//
// --expert times the batched products as expert products (the orders of matmul_q with dense =
// false). --rows16 times Q4_0, IQ4_NL and MXFP4 also on the interleaved layout the CPU engine
// gives them at load (kernels/cpu/rows16.hpp), as a second row "TYPE rows16". Prints markdown tables (the source for bench/results/*matvec*.md).
#include <emmintrin.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>
#include <xmmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/rows16.hpp"
#include "runtime/core/types.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using ferry::GgmlType;

struct Options {
  int64_t mb = 512;
  int64_t cols = 4096;
  std::vector<int> threads;
  std::vector<int64_t> batches{1, 8, 32};
  int reps = 7;
  bool expert = false;  // batched products as expert products (matmul_q, dense = false)
  bool rows16 = false;  // also time the 32-value 4-bit formats on the interleaved layout
  std::vector<GgmlType> types{GgmlType::F16,  GgmlType::Q8_0, GgmlType::Q4_K,   GgmlType::Q5_K,
                              GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::MXFP4};
};

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  for (const char* p = s; *p;) {
    char* end;
    out.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--expert" || a == "--rows16") {  // the flags without a value
      (a == "--expert" ? o.expert : o.rows16) = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", a.c_str());
      std::exit(2);
    }
    if (a == "--mb")
      o.mb = std::atoll(argv[i + 1]);
    else if (a == "--cols")
      o.cols = std::atoll(argv[i + 1]);
    else if (a == "--reps")
      o.reps = std::atoi(argv[i + 1]);
    else if (a == "--batch")
      o.batches = parse_list(argv[i + 1]);
    else if (a == "--types") {
      o.types.clear();
      for (const char* p = argv[i + 1]; *p;) {
        const char* end = std::strchr(p, ',');
        const std::string name(p, end ? static_cast<size_t>(end - p) : std::strlen(p));
        const auto t = ferry::type_from_name(name);
        if (!t) {
          std::fprintf(stderr, "unknown type %s\n", name.c_str());
          std::exit(2);
        }
        o.types.push_back(*t);
        p = end ? end + 1 : p + name.size();
      }
    } else if (a == "--threads")
      for (int64_t t : parse_list(argv[i + 1])) o.threads.push_back(static_cast<int>(t));
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.threads.empty()) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int t = 1; t < hw; t *= 2) o.threads.push_back(t);
    o.threads.push_back(hw);
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of the median of `reps` runs of fn inside an arena of `threads` threads (one warm-up).
template <typename Fn>
double time_in_arena(int threads, int reps, Fn&& fn) {
  tbb::task_arena arena(threads);
  std::vector<double> s;
  arena.execute([&] {
    fn();
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      fn();
      s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  });
  return median(s);
}

// Sums `len` bytes (a multiple of 64·streams) read as `streams` interleaved sequential streams,
// with a software prefetch `pf` bytes ahead of each (0: none).
uint64_t sum_bytes(const uint8_t* p, size_t len, int streams, size_t pf) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  const size_t sub = len / static_cast<size_t>(streams) / 64 * 64;
  for (size_t off = 0; off < sub; off += 64) {
    for (int s = 0; s < streams; ++s) {
      const uint8_t* q = p + static_cast<size_t>(s) * sub + off;
      if (pf) _mm_prefetch(reinterpret_cast<const char*>(q + pf), _MM_HINT_T0);
      a0 = _mm_add_epi64(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(q)));
      a1 = _mm_add_epi64(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(q + 16)));
      a2 = _mm_add_epi64(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(q + 32)));
      a3 = _mm_add_epi64(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(q + 48)));
    }
  }
  const __m128i t = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(t)) +
         static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(t, t)));
}

// Streaming read bandwidth: every thread sums its contiguous share of the buffer. The best of
// four access patterns (1 or 4 interleaved streams per thread, with or without software
// prefetch), since which one the memory system rewards differs between machines.
double stream_read_gbps(const uint8_t* buf, size_t bytes, int threads, int reps) {
  const size_t chunk = bytes / static_cast<size_t>(threads) / 256 * 256;
  std::vector<uint64_t> sink(static_cast<size_t>(threads));
  double best = 0;
  for (int streams : {1, 4}) {
    for (size_t pf : {size_t{0}, size_t{2048}}) {
      const double s = time_in_arena(threads, reps, [&] {
        tbb::parallel_for(
            0, threads,
            [&](int i) {
              sink[static_cast<size_t>(i)] += sum_bytes(buf + i * chunk, chunk, streams, pf);
            },
            tbb::static_partitioner());
      });
      best = std::max(best, static_cast<double>(chunk * static_cast<size_t>(threads)) / s / 1e9);
    }
  }
  return best;
}

std::string cpu_model() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "?";
  char line[512];
  std::string model = "?";
  while (std::fgets(line, sizeof line, f)) {
    if (!std::strncmp(line, "model name", 10)) {
      const char* c = std::strchr(line, ':');
      if (c) model = std::string(c + 2, std::strlen(c + 2) - 1);
      break;
    }
  }
  std::fclose(f);
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // FERRY_ISA caps the kernels' ISA, as for the ferry binary (docs/options.md).
  if (const char* v = std::getenv("FERRY_ISA"); v && *v) {
    const auto isa = ferry::cpu::isa_from_name(v);
    if (!isa) {
      std::fprintf(stderr, "FERRY_ISA=%s: expected scalar, avx2, avx512 or avx512vnni\n", v);
      return 2;
    }
    ferry::cpu::set_isa(*isa);
  }
  const int64_t target_bytes = o.mb << 20;

  std::printf("# matvec, %lld MiB of weights per matrix, cols %lld\n\n",
              static_cast<long long>(o.mb), static_cast<long long>(o.cols));
  std::printf("cpu: %s, %u hardware threads, ISA path: %s\n\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), ferry::cpu::isa_name(ferry::cpu::active_isa()));

  // Stream bandwidth over a buffer of the matrix size, once per thread count.
  std::vector<double> stream(o.threads.size());
  {
    // 64-byte aligned, every page written (so it is backed before timing)
    std::unique_ptr<uint8_t[]> storage(new uint8_t[static_cast<size_t>(target_bytes) + 64]);
    uint8_t* aligned = storage.get() + (64 - reinterpret_cast<uintptr_t>(storage.get()) % 64) % 64;
    std::memset(aligned, 1, static_cast<size_t>(target_bytes));
    for (size_t k = 0; k < o.threads.size(); ++k)
      stream[k] =
          stream_read_gbps(aligned, static_cast<size_t>(target_bytes), o.threads[k], o.reps);
  }

  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> row(static_cast<size_t>(o.cols));
  const int64_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  std::vector<float> x(static_cast<size_t>(o.cols * max_batch));
  for (auto& v : x) v = nd(rng);

  std::printf("| type | threads | ms / matvec | weights GB/s | stream GB/s | %% of stream |\n");
  std::printf("|---|---|---|---|---|---|\n");
  struct Batched {
    GgmlType t;
    std::string name;
    int64_t batch;
    double ms;
    double gbps;
  };
  std::vector<Batched> batched;
  for (GgmlType t : o.types) {
    const auto rb = static_cast<int64_t>(ferry::row_bytes(t, static_cast<uint64_t>(o.cols)));
    // A multiple of 16 rows, as model matrices have (ggml repacks the 32-value formats when rows %
    // 8 == 0).
    const int64_t rows = std::max<int64_t>(16, target_bytes / rb / 16 * 16);
    // Distinct random rows are costly to quantize; 64 are enough for realistic bit patterns and
    // are repeated through the matrix (every byte is still read from DRAM).
    const int64_t distinct = 64;
    std::vector<uint8_t> seed_rows(static_cast<size_t>(distinct * rb));
    for (int64_t r = 0; r < distinct; ++r) {
      for (auto& v : row) v = nd(rng);
      uint8_t* dst = seed_rows.data() + r * rb;
      // No quantizer here for these: random levels, sane scales (the F16 scale fields' high byte
      // set to 0x2c, ~0.06; MXFP4's exponent near 1).
      const std::vector<int> f16_scales = t == GgmlType::IQ4_NL   ? std::vector<int>{0}
                                          : t == GgmlType::IQ4_XS ? std::vector<int>{0}
                                          : t == GgmlType::Q2_K   ? std::vector<int>{80, 82}
                                          : t == GgmlType::Q3_K   ? std::vector<int>{108}
                                                                  : std::vector<int>{};
      if (t == GgmlType::MXFP4 || !f16_scales.empty()) {
        for (int64_t k = 0; k < rb; ++k) dst[k] = static_cast<uint8_t>(rng());
        const auto& ti = ferry::type_info(t);
        for (int64_t b = 0; b < rb; b += ti.block_bytes) {
          if (t == GgmlType::MXFP4) dst[b] = static_cast<uint8_t>(120 + rng() % 8);
          for (int off : f16_scales) dst[b + off + 1] = 0x2c;
        }
      } else {
        ferry::cpu::quantize_row_ref(t, row.data(), dst, o.cols);
      }
    }
    std::unique_ptr<uint8_t[]> W(new uint8_t[static_cast<size_t>(rows * rb)]);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(W.get() + r * rb, seed_rows.data() + (r % distinct) * rb,
                  static_cast<size_t>(rb));
    std::vector<float> y(static_cast<size_t>(rows * max_batch));
    const double gb = static_cast<double>(rows * rb) / 1e9;
    std::unique_ptr<uint8_t[]> packed;
    if (o.rows16 && ferry::cpu::rows16_type(t)) {
      packed.reset(new uint8_t[static_cast<size_t>(rows * rb)]);
      ferry::cpu::repack_rows16(t, W.get(), rows, o.cols, packed.get());
    }
    for (const bool interleaved : {false, true}) {
      if (interleaved && !packed) break;
      const uint8_t* Wl = interleaved ? packed.get() : W.get();
      const ferry::WeightLayout layout =
          interleaved ? ferry::WeightLayout::rows16 : ferry::WeightLayout::file;
      const std::string name = std::string(ferry::type_name(t)) + (interleaved ? " rows16" : "");
      for (size_t k = 0; k < o.threads.size(); ++k) {
        const double s = time_in_arena(o.threads[k], o.reps, [&] {
          ferry::cpu::matmul(t, Wl, rows, o.cols, x.data(), o.cols, 1, y.data(), rows, true,
                             layout);
        });
        std::printf("| %s | %d | %.2f | %.1f | %.1f | %.0f%% |\n", name.c_str(), o.threads[k],
                    s * 1e3, gb / s, stream[k], 100.0 * gb / s / stream[k]);
        std::fflush(stdout);
      }
      for (int64_t b : o.batches) {
        if (b == 1) continue;
        const auto xrb =
            static_cast<int64_t>(ferry::row_bytes(ferry::cpu::vec_dot_type(t), o.cols));
        std::vector<uint8_t> xq(static_cast<size_t>(xrb * b));
        if (o.expert)
          for (int64_t j = 0; j < b; ++j)
            ferry::cpu::quantize_activation(t, x.data() + j * o.cols, xq.data() + j * xrb, o.cols);
        const double s = time_in_arena(o.threads.back(), std::max(3, o.reps / 2), [&] {
          if (o.expert)
            ferry::cpu::matmul_q(t, Wl, rows, o.cols, xq.data(), xrb, b, y.data(), rows, true,
                                 false, layout);
          else
            ferry::cpu::matmul(t, Wl, rows, o.cols, x.data(), o.cols, b, y.data(), rows, true,
                               layout);
        });
        batched.push_back({t, name, b, s * 1e3, gb / s});
      }
    }
  }
  if (!batched.empty()) {
    std::printf(
        "\nBatched (prefill-style) matmul, %d threads: each weight byte read once per call.\n\n",
        o.threads.back());
    std::printf(
        "| type | n_batch | ms / call | ms / token | weights GB/s | GMAC/s "
        "|\n|---|---|---|---|---|---|\n");
    for (const Batched& r : batched) {
      const double macs =
          static_cast<double>(target_bytes) / ferry::row_bytes(r.t, o.cols) * o.cols * r.batch;
      std::printf("| %s | %lld | %.1f | %.2f | %.1f | %.1f |\n",
                  r.name.c_str(), static_cast<long long>(r.batch), r.ms,
                  r.ms / r.batch, r.gbps, macs / (r.ms * 1e-3) / 1e9);
    }
  }
  return 0;
}
