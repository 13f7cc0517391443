#include "runtime/cli/bench_report.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "runtime/core/error.hpp"

namespace ferry::cli {
namespace {

enum class Kind { string, integer, real };

struct Field {
  std::string name;
  Kind kind;
  std::optional<std::string> value;  // nullopt: does not apply to this test
};

std::string real(double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string("0"); }
std::optional<std::string> opt_real(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return real(*v);
}

std::vector<Field> fields_of(const BenchResult& r) {
  auto s = [](const char* n, std::string v) { return Field{n, Kind::string, std::move(v)}; };
  auto i = [](const char* n, uint64_t v) { return Field{n, Kind::integer, std::to_string(v)}; };
  auto ii = [](const char* n, int64_t v) { return Field{n, Kind::integer, std::to_string(v)}; };
  return {s("cpu_info", r.cpu_info),
          s("gpu_info", r.gpu_info),
          s("backends", r.backends),
          s("model_filename", r.model_filename),
          s("model_type", r.model_type),
          i("model_size", r.model_size),
          i("model_n_params", r.model_n_params),
          ii("n_batch", r.n_batch),
          ii("n_ubatch", r.n_ubatch),
          ii("n_threads", r.n_threads),
          s("type_k", r.type_k),
          s("type_v", r.type_v),
          ii("n_prompt", r.n_prompt),
          ii("n_gen", r.n_gen),
          ii("n_depth", r.n_depth),
          s("test_time", r.test_time),
          i("avg_ns", r.avg_ns()),
          i("stddev_ns", r.stddev_ns()),
          // llama-bench prints these with std::to_string (six decimals)
          Field{"avg_ts", Kind::real, fmt::format("{:.6f}", r.avg_ts())},
          Field{"stddev_ts", Kind::real, fmt::format("{:.6f}", r.stddev_ts())},
          s("device", r.device),
          i("vram_budget", r.vram_budget),
          s("routing", r.routing),
          s("offload_decode", r.offload_decode),
          Field{"hit_rate", Kind::real, opt_real(r.hit_rate)},
          Field{"h2d_bytes_per_token", Kind::real, opt_real(r.h2d_bytes_per_token)},
          Field{"gpu_wait_pct", Kind::real, opt_real(r.gpu_wait_pct)},
          Field{"weight_bytes_per_token", Kind::real, opt_real(r.weight_bytes_per_token)},
          Field{"mem_bw_gbps", Kind::real, opt_real(r.mem_bw_gbps)},
          Field{"speed_of_light_fraction", Kind::real, opt_real(r.speed_of_light_fraction)},
          Field{"launches_per_token", Kind::real, opt_real(r.launches_per_token)},
          Field{"host_cpu_ms_per_token", Kind::real, opt_real(r.host_cpu_ms_per_token)}};
}

std::string escape_csv(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string json_value(const Field& f) {
  if (!f.value) return "null";
  return f.kind == Kind::string ? fmt::format("\"{}\"", escape_json(*f.value)) : *f.value;
}

template <typename T>
std::string join(const std::vector<T>& v, const char* sep) {
  std::string out;
  for (size_t k = 0; k < v.size(); ++k) {
    if (k) out += sep;
    out += fmt::format("{}", v[k]);
  }
  return out;
}

std::string bytes_text(double b) {
  if (b >= 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024.0 * 1024.0));
  if (b >= 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024.0));
  return fmt::format("{:.2f} KiB", b / 1024.0);
}

}  // namespace

std::string escape_json(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<int>(c));
    else out += c;
  }
  return out;
}

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double stddev_of(const std::vector<double>& v) {
  if (v.size() <= 1) return 0.0;
  const double m = mean_of(v);
  double sq = 0.0;
  for (double x : v) sq += (x - m) * (x - m);
  return std::sqrt(sq / static_cast<double>(v.size() - 1));
}

uint64_t BenchResult::avg_ns() const {
  if (samples_ns.empty()) return 0;
  return std::accumulate(samples_ns.begin(), samples_ns.end(), uint64_t{0}) / samples_ns.size();
}

uint64_t BenchResult::stddev_ns() const {
  std::vector<double> d(samples_ns.begin(), samples_ns.end());
  return static_cast<uint64_t>(std::llround(stddev_of(d)));
}

std::vector<double> BenchResult::samples_ts() const {
  std::vector<double> ts;
  const double n = static_cast<double>(n_prompt + n_gen);
  for (uint64_t t : samples_ns) ts.push_back(t > 0 ? 1e9 * n / static_cast<double>(t) : 0.0);
  return ts;
}

double BenchResult::avg_ts() const { return mean_of(samples_ts()); }
double BenchResult::stddev_ts() const { return stddev_of(samples_ts()); }

std::string BenchResult::test_name() const {
  std::string s;
  if (n_prompt > 0 && n_gen == 0) s = fmt::format("pp{}", n_prompt);
  else if (n_gen > 0 && n_prompt == 0) s = fmt::format("tg{}", n_gen);
  else s = fmt::format("pp{}+tg{}", n_prompt, n_gen);
  if (n_depth > 0) s += fmt::format(" @ d{}", n_depth);
  return s;
}

BenchFormat parse_bench_format(const std::string& s) {
  if (s == "md") return BenchFormat::md;
  if (s == "csv") return BenchFormat::csv;
  if (s == "json") return BenchFormat::json;
  if (s == "jsonl") return BenchFormat::jsonl;
  fail(ErrorKind::invalid_arg, "-o {}: expected md, csv, json or jsonl", s);
}

void BenchPrinter::header() {
  if (f_ == BenchFormat::csv) {
    std::string line;
    for (const Field& f : fields_of(BenchResult{})) {
      if (!line.empty()) line += ',';
      line += f.name;
    }
    std::fprintf(out_, "%s\n", line.c_str());
  } else if (f_ == BenchFormat::json) {
    std::fprintf(out_, "[\n");
  }
  std::fflush(out_);
}

void BenchPrinter::add(const BenchResult& r) {
  const std::vector<Field> fs = fields_of(r);
  const std::string ns = join(r.samples_ns, ", "), ts = join(r.samples_ts(), ", ");
  switch (f_) {
    case BenchFormat::md: rows_.push_back(r); return;
    case BenchFormat::csv: {
      std::string line;
      for (const Field& f : fs) {
        if (!line.empty()) line += ",";
        if (f.value) line += escape_csv(*f.value);
      }
      std::fprintf(out_, "%s\n", line.c_str());
      break;
    }
    case BenchFormat::json: {
      std::string s = first_ ? "  {\n" : ",\n  {\n";
      for (const Field& f : fs) s += fmt::format("    \"{}\": {},\n", f.name, json_value(f));
      if (r.kernel_times) s += fmt::format("    \"kernel_times\": {},\n", kernel_times_json(*r.kernel_times));
      s += fmt::format("    \"samples_ns\": [ {} ],\n    \"samples_ts\": [ {} ]\n  }}", ns, ts);
      std::fputs(s.c_str(), out_);
      break;
    }
    case BenchFormat::jsonl: {
      std::string s = "{";
      for (const Field& f : fs) s += fmt::format("\"{}\": {}, ", f.name, json_value(f));
      if (r.kernel_times) s += fmt::format("\"kernel_times\": {}, ", kernel_times_json(*r.kernel_times));
      s += fmt::format("\"samples_ns\": [ {} ], \"samples_ts\": [ {} ]}}\n", ns, ts);
      std::fputs(s.c_str(), out_);
      break;
    }
  }
  first_ = false;
  std::fflush(out_);
}

void BenchPrinter::footer() {
  if (f_ == BenchFormat::json) std::fprintf(out_, "\n]\n");
  if (f_ == BenchFormat::md) print_md();
  std::fflush(out_);
}

void BenchPrinter::print_md() {
  if (rows_.empty()) return;
  const bool kv = std::any_of(rows_.begin(), rows_.end(), [](const BenchResult& r) {
    return r.type_k != "f16" || r.type_v != "f16";
  });
  const bool offload = std::any_of(rows_.begin(), rows_.end(), [](const BenchResult& r) {
    return r.device != "cpu" || r.vram_budget != 0 || r.routing != "model";
  });
  // (name, right-aligned, value of a row)
  struct Col {
    std::string name;
    bool right;
    std::function<std::string(const BenchResult&)> value;
  };
  auto opt = [](const std::optional<double>& v, const char* f) -> std::string {
    return v && std::isfinite(*v) ? fmt::format(fmt::runtime(f), *v) : "-";
  };
  std::vector<Col> cols = {
      {"model", false, [](const BenchResult& r) { return r.model_type; }},
      {"size", true, [](const BenchResult& r) { return bytes_text(static_cast<double>(r.model_size)); }},
      {"params", true,
       [](const BenchResult& r) {
         const double p = static_cast<double>(r.model_n_params);
         return p < 1e9 ? fmt::format("{:.2f} M", p / 1e6) : fmt::format("{:.2f} B", p / 1e9);
       }},
      {"backend", false, [](const BenchResult& r) { return r.backends; }},
      {"threads", true, [](const BenchResult& r) { return std::to_string(r.n_threads); }},
  };
  if (kv) {
    cols.push_back({"type_k", false, [](const BenchResult& r) { return r.type_k; }});
    cols.push_back({"type_v", false, [](const BenchResult& r) { return r.type_v; }});
  }
  cols.push_back({"device", false, [](const BenchResult& r) { return r.device; }});
  if (offload) {
    cols.push_back({"vram", true, [](const BenchResult& r) {
                      return r.vram_budget ? bytes_text(static_cast<double>(r.vram_budget)) : std::string("-");
                    }});
    cols.push_back({"routing", false, [](const BenchResult& r) { return r.routing; }});
    if (std::any_of(rows_.begin(), rows_.end(), [](const BenchResult& r) { return r.offload_decode == "table"; }))
      cols.push_back({"decode", false, [](const BenchResult& r) {
                        return r.offload_decode.empty() ? std::string("-") : r.offload_decode;
                      }});
  }
  cols.push_back({"test", true, [](const BenchResult& r) { return r.test_name(); }});
  cols.push_back({"t/s", true, [](const BenchResult& r) { return fmt::format("{:.2f} ± {:.2f}", r.avg_ts(), r.stddev_ts()); }});
  if (offload) {
    cols.push_back({"hit", true, [](const BenchResult& r) {
                      return r.hit_rate ? fmt::format("{:.1f}%", 100.0 * *r.hit_rate) : std::string("-");
                    }});
    cols.push_back({"H2D/tok", true, [](const BenchResult& r) {
                      return r.h2d_bytes_per_token ? bytes_text(*r.h2d_bytes_per_token) : std::string("-");
                    }});
    cols.push_back({"wait", true, [opt](const BenchResult& r) { return opt(r.gpu_wait_pct, "{:.1f}%"); }});
  }
  cols.push_back({"SoL", true, [opt](const BenchResult& r) { return opt(r.speed_of_light_fraction, "{:.3f}"); }});
  const bool cuda = std::any_of(rows_.begin(), rows_.end(), [](const BenchResult& r) { return r.device == "cuda"; });
  if (cuda)
    cols.push_back({"launches/tok", true, [opt](const BenchResult& r) { return opt(r.launches_per_token, "{:.1f}"); }});
  // Host CPU per token where the question is host- against device-bound (cuda, --kernel-times);
  // the cpu device's table stays llama-bench's shape (its CPU time is the wall's, less the
  // worker threads').
  if (cuda || std::any_of(rows_.begin(), rows_.end(), [](const BenchResult& r) { return r.kernel_times.has_value(); }))
    cols.push_back({"host ms/tok", true, [opt](const BenchResult& r) { return opt(r.host_cpu_ms_per_token, "{:.3f}"); }});

  // Display width counts code points, so "±" is one column wide.
  auto width_of = [](const std::string& s) {
    size_t w = 0;
    for (unsigned char c : s) w += (c & 0xC0) != 0x80;
    return w;
  };
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> w(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) w[c] = width_of(cols[c].name);
  for (const BenchResult& r : rows_) {
    cells.emplace_back();
    for (size_t c = 0; c < cols.size(); ++c) {
      cells.back().push_back(cols[c].value(r));
      w[c] = std::max(w[c], width_of(cells.back().back()));
    }
  }
  auto pad = [&](const std::string& s, size_t c) {
    const std::string fill(w[c] - width_of(s), ' ');
    return cols[c].right ? fill + s : s + fill;
  };
  std::string out = "|";
  for (size_t c = 0; c < cols.size(); ++c) out += fmt::format(" {} |", pad(cols[c].name, c));
  out += "\n|";
  for (size_t c = 0; c < cols.size(); ++c)
    out += fmt::format(" {}{} |", std::string(w[c] - 1, '-'), cols[c].right ? ":" : "-");
  out += "\n";
  for (const auto& row : cells) {
    out += "|";
    for (size_t c = 0; c < cols.size(); ++c) out += fmt::format(" {} |", pad(row[c], c));
    out += "\n";
  }
  // --kernel-times: one table per test after the llama-bench table.
  for (const BenchResult& r : rows_)
    if (r.kernel_times) {
      out += '\n';
      out += kernel_times_md(r);
    }
  std::fputs(out.c_str(), out_);
}

}  // namespace ferry::cli
