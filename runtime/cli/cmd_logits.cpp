// `ferry logits`: the logits at every position of a token sequence as float32 .npy
// (n_tokens, n_vocab) — one prefill batch, or with --decode one token at a time through the cache.
// Tests and outside checks depend on exactly this interface.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "runtime/cli/command.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/cli/offload_report.hpp"
#include "runtime/cli/observe_args.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/threads.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/config.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry::cli {
namespace {

int logits_main(int argc, char** argv) {
  CLI::App app{"Write the logits of every position of a token sequence to a .npy file", "ferry logits"};
  ModelArgs ma;
  std::string token_list, prompt, out, dump_names, dump_dir;
  bool decode = false;
  add_model_args(app, ma);
  app.add_option("--tokens", token_list, "token ids, e.g. 1,2,3");
  app.add_option("-p,--prompt", prompt, "text to tokenize instead of --tokens");
  app.add_flag("--decode", decode, "evaluate one token at a time through the KV cache");
  app.add_option("-o,--output", out, "output .npy (float32, shape (n_tokens, n_vocab))")->required();
  app.add_option("--dump", dump_names,
                 "intermediates to save, by llama.cpp name (e.g. attn_norm,ffn_moe_out,l_out; 'all' for every one)");
  app.add_option("--dump-dir", dump_dir, "where --dump writes NAME-LAYER.npy (rows: tokens of the step)");
  bool stop = false;
  const int rc = parse(app, argc, argv, stop);
  if (stop) return rc;
  if (token_list.empty() == prompt.empty()) fail(ErrorKind::invalid_arg, "give exactly one of --tokens and -p");
  if (ma.model.empty()) fail(ErrorKind::invalid_arg, "no model given (-m FILE)");

  ThreadLimit threads(ma.threads);
  Observability obs(ma.run.options.observe);
  // The tokens and the session's shape first (from the GGUF alone), so that an offload plan holds
  // exactly the state the session will allocate (a long prompt is one large batch).
  std::vector<int32_t> tokens;
  SessionOptions so = session_options(ma);
  {
    const gguf::File f = gguf::File::open(ma.model);
    tokens = !token_list.empty() ? parse_token_list(token_list) : Tokenizer::from_gguf(f).encode(prompt, true, true);
    if (so.n_ctx == 0) so.n_ctx = std::max<int64_t>(static_cast<int64_t>(tokens.size()), default_context(read_config(f)));
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (!decode) so.n_batch = static_cast<int32_t>(std::max<int64_t>(n, 1));  // ONE prefill batch
  auto model = LoadedModel::load(ma.model, {}, run_options(ma.run.options, obs, so));
  Session session(*model, so);
  DebugHook dump;
  if (!dump_names.empty()) {
    if (dump_dir.empty()) fail(ErrorKind::invalid_arg, "--dump needs --dump-dir");
    std::filesystem::create_directories(dump_dir);
    // One file per (name, layer, forward step): NAME-LAYER[-sSTEP].npy; steps only with --decode.
    dump = [&, step = std::make_shared<std::map<std::string, int>>()](
               std::string_view name, int32_t layer, const float* data, int64_t rows, int64_t cols) {
      const std::string key = std::string(name) + "-" + std::to_string(layer);
      if (dump_names != "all" && ("," + dump_names + ",").find("," + std::string(name) + ",") == std::string::npos) return;
      const int k = (*step)[key]++;
      const std::string file = dump_dir + "/" + key + (k ? "-s" + std::to_string(k) : "") + ".npy";
      // Backend memory (device memory on cuda): copied out after the ops queued before it.
      std::vector<float> host(static_cast<size_t>(rows * cols));
      model->ops().to_host(host.data(), data, host.size() * sizeof(float));
      write_npy_f32(file, host.data(), {rows, cols});
    };
    model->model().set_debug_hook(dump);
  }
  obs.attach(*model, dump);  // --trace: op spans, then the dump hook
  if (n > session.n_ctx())
    fail(ErrorKind::context, "{} tokens do not fit in the context of {} (-c)", n, session.n_ctx());

  const int64_t V = model->config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n * V));
  const auto t0 = std::chrono::steady_clock::now();
  if (decode) {
    for (int64_t i = 0; i < n; ++i) {
      const auto l = session.eval(std::span<const int32_t>(tokens).subspan(static_cast<size_t>(i), 1));
      std::copy(l.begin(), l.end(), logits.begin() + i * V);
    }
  } else {
    session.eval_all(tokens, logits.data());
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  write_npy_f32(out, logits.data(), {n, V});
  std::fprintf(stderr, "ferry logits: %lld tokens (%s) in %.1f ms, %d threads -> %s (%lld x %lld)\n",
               static_cast<long long>(n), decode ? "decode" : "one prefill batch", ms, threads.threads(),
               out.c_str(), static_cast<long long>(n), static_cast<long long>(V));
  print_offload_stats(*model);
  obs.finish();
  return 0;
}

}  // namespace

FERRY_COMMAND("logits", "write per-position logits of a token sequence to .npy", logits_main);

}  // namespace ferry::cli
