#include "runtime/cli/common_args.hpp"

#include <unistd.h>

#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "runtime/backend/device_size.hpp"
#include "runtime/backend/ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::cli {

void add_model_args(CLI::App& app, ModelArgs& a, bool with_run) {
  app.add_option("-m,--model", a.model, "GGUF model file");
  app.add_option("-t,--threads", a.threads, "CPU threads (default: physical cores)");
  app.add_option("-c,--ctx-size", a.ctx, "context size in tokens (default: min(model context, 4096))");
  app.add_option("-b,--batch-size", a.batch, "tokens per forward step when evaluating a prompt")
      ->check(CLI::Range(1, 65536));
  app.add_option("--cache-type-k", a.cache_type_k, "KV cache type for K: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 or q5_1 (-ctk)");
  app.add_option("--cache-type-v", a.cache_type_v, "KV cache type for V: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 or q5_1 (-ctv)");
  if (with_run) a.run.add_all(app);
}

void add_sampling_args(CLI::App& app, SamplingParams& p) {
  app.add_option("-s,--seed", p.seed, "RNG seed (default: random)");
  app.add_option("--temp", p.temp, "temperature; <= 0 is greedy")->capture_default_str();
  app.add_option("--top-k", p.top_k, "top-k sampling (0 = off)")->capture_default_str();
  app.add_option("--top-p", p.top_p, "top-p sampling (1.0 = off)")->capture_default_str();
  app.add_option("--min-p", p.min_p, "min-p sampling (0.0 = off)")->capture_default_str();
  app.add_option("--repeat-penalty", p.repeat_penalty, "penalty for repeated tokens (1.0 = off)")->capture_default_str();
  app.add_option("--repeat-last-n", p.repeat_last_n, "tokens the repeat penalty looks back on")->capture_default_str();
  app.add_option("--presence-penalty", p.presence_penalty, "presence penalty, as llama.cpp (0 = off)")
      ->capture_default_str();
  app.add_option("--frequency-penalty", p.frequency_penalty, "frequency penalty, as llama.cpp (0 = off)")
      ->capture_default_str();
}

std::vector<std::string> normalize_args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-ctk") a = "--cache-type-k";
    else if (a == "-ctv") a = "--cache-type-v";
    else if (a == "-sys") a = "--system-prompt";
    else if (a == "-fit") a = "--fit";
    else if (a == "-fitt") a = "--fit-target";
    else if (a == "-fitc") a = "--fit-ctx";
    out.push_back(std::move(a));
  }
  return out;
}

int parse(CLI::App& app, int argc, char** argv, bool& stop) {
  std::vector<std::string> args = normalize_args(argc, argv);
  std::vector<char*> ptrs;
  for (auto& s : args) ptrs.push_back(s.data());
  stop = false;
  try {
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::ParseError& e) {
    stop = true;
    return app.exit(e) == 0 ? 0 : 2;  // --help → 0; usage errors → 2, as every ferry command
  }
  return 0;
}

GgmlType parse_cache_type(const std::string& s, const char* flag) {
  if (const auto t = type_from_name(s); t && kv_cache_type_supported(*t)) return *t;
  fail(ErrorKind::invalid_arg, "{} {}: unsupported KV cache type (use one of {})", flag, s, kv_cache_type_names());
}

SessionOptions session_options(const ModelArgs& a) {
  if (a.ctx < 0) fail(ErrorKind::invalid_arg, "-c {}: the context size must be >= 0", a.ctx);
  SessionOptions o;
  o.n_ctx = a.ctx;
  o.n_batch = a.batch;
  o.type_k = parse_cache_type(a.cache_type_k, "-ctk");
  o.type_v = parse_cache_type(a.cache_type_v, "-ctv");
  return o;
}

std::string default_model_path() {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = fs::path(x) / "ferry";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = fs::path(h) / ".cache" / "ferry";
  else dir = fs::temp_directory_path() / "ferry-cache";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(ErrorKind::io, "cannot create the cache directory {}: {}", dir.string(), ec.message());
  synth::Options o;
  o.arch = synth::Arch::qwen3moe;
  o.preset = synth::Preset::tiny;
  o.quant = synth::QuantMix::q8_0;
  o.seed = 1;
  const fs::path path = dir / "synth-qwen3moe-tiny-q8_0-seed1.gguf";
  if (fs::exists(path)) {
    std::fprintf(stderr, "ferry: no -m given: using the built-in synthetic model %s (random weights)\n",
                 path.c_str());
    return path.string();
  }
  std::fprintf(stderr, "ferry: no -m given: writing a synthetic qwen3moe (tiny, q8_0, random weights) to %s\n",
               path.c_str());
  synth::write_model(synth::make_plan(o), path.string());
  return path.string();
}

std::unique_ptr<LoadedModel> load_model_verbose(std::string path, bool allow_default, const RunOptions& run) {
  if (path.empty()) {
    if (!allow_default) fail(ErrorKind::invalid_arg, "no model given (-m FILE)");
    path = default_model_path();
  }
  const bool tty = isatty(STDERR_FILENO);
  int last_pct = -1;
  auto progress = [&](float f) {
    const int pct = static_cast<int>(f * 100.0f);
    if (pct == last_pct || (!tty && pct != 100)) return;
    last_pct = pct;
    std::fprintf(stderr, "%sferry: loading %s %3d%%%s", tty ? "\r" : "", path.c_str(), pct,
                 pct == 100 ? "\n" : "");
    std::fflush(stderr);
  };
  auto m = LoadedModel::load(path, progress, run);
  const ModelConfig& c = m->config();
  std::fprintf(stderr,
               "ferry: %s: %d layers, n_embd %d, %d heads (%d kv), %d experts (top %d), vocab %d, "
               "trained context %lld; loaded in %.1f ms\n",
               std::string(arch_name(c.arch)).c_str(), c.n_layer, c.n_embd, c.n_head, c.n_head_kv,
               c.n_expert, c.n_expert_used, c.n_vocab, static_cast<long long>(c.n_ctx_train), m->load_ms());
  if (Device* d = m->device()) {
    const MemoryStats ms = d->memory();
    std::fprintf(stderr, "ferry: %s: %.2f GiB of device memory in use, budget %.2f GiB\n", d->name().c_str(),
                 static_cast<double>(ms.used_bytes) / (1ull << 30), static_cast<double>(ms.budget_bytes) / (1ull << 30));
  }
  return m;
}

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ',' || s[i] == ' ')) ++i;
    if (i >= s.size()) break;
    int32_t v = 0;
    const auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
    if (ec != std::errc() || v < 0)
      fail(ErrorKind::invalid_arg, "token list '{}': expected non-negative integers separated by commas", s);
    i = static_cast<size_t>(p - s.data());
    if (i < s.size() && s[i] != ',' && s[i] != ' ')
      fail(ErrorKind::invalid_arg, "token list '{}': unexpected '{}'", s, s[i]);
    ids.push_back(v);
  }
  if (ids.empty()) fail(ErrorKind::invalid_arg, "token list '{}' is empty", s);
  return ids;
}

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t count = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ",";
    if (shape.size() > 1) dims += " ";
    count *= d;
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(a, b)" rather than "(a, b, )"
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic(6) + version(2) + header length(2) + header, padded with spaces to a multiple of 64, "\n"
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(ErrorKind::io, "cannot write {}", tmp);
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                 static_cast<unsigned char>(header.size() & 0xff),
                                 static_cast<unsigned char>(header.size() >> 8)};
  bool ok = std::fwrite(pre, 1, 10, f) == 10 && std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(data, sizeof(float), static_cast<size_t>(count), f) == static_cast<size_t>(count);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(ErrorKind::io, "cannot write {} (disk full?)", path);
  }
}

namespace {

// The one piece of process-global state here: a signal handler can reach nothing else.
std::atomic<bool> g_sigint{false};  // async-signal-safe: lock-free atomic
struct sigaction g_previous {};

void on_sigint(int) {
  if (g_sigint.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

}  // namespace

SigintFlag::SigintFlag() {
  g_sigint = false;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, &g_previous);
}

SigintFlag::~SigintFlag() { sigaction(SIGINT, &g_previous, nullptr); }

const std::atomic<bool>& SigintFlag::flag() const { return g_sigint; }

void SigintFlag::clear() { g_sigint = false; }

}  // namespace ferry::cli
