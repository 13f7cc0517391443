// `ferry perplexity`: llama-perplexity's perplexity and KL-divergence runs. The text is tokenized
// (BOS when the vocabulary asks for it), cut into chunks of -c tokens, and each chunk is evaluated
// from an empty state (the first token replaced by BOS where the vocabulary has add_bos) in steps
// of -b tokens; positions n_ctx/2 .. n_ctx-2 are scored on the token that follows them
// (runtime/engine/perplexity.hpp has the rules and the base-file layout).
//   ferry perplexity -m M.gguf -f text.txt [-c 512] [--chunks N]
//   ferry perplexity -m BASE.gguf -f text.txt --kl-divergence-base base.kld   (writes the base file)
//   ferry perplexity -m Q.gguf --kl-divergence-base base.kld --kl-divergence  (reads it, no -f)
// Results go to stdout, progress to stderr.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "runtime/cli/command.hpp"
#include "runtime/cli/common_args.hpp"
#include "runtime/cli/offload_report.hpp"
#include "runtime/cli/observe_args.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/perplexity.hpp"
#include "runtime/engine/threads.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/config.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry::cli {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::io, "cannot read the text file {}", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Evaluates one chunk from an empty state in steps of n_batch and returns the logits of the
// scored positions (n_ctx/2 .. n_ctx-2): (scored_per_chunk(n_ctx), n_vocab).
std::vector<float> chunk_logits(Session& s, std::vector<int32_t> chunk, int32_t bos, int32_t n_batch,
                                std::vector<float>& step_logits) {
  const int64_t n_ctx = static_cast<int64_t>(chunk.size());
  const int64_t V = s.n_vocab(), first = n_ctx / 2, scored = scored_per_chunk(static_cast<int32_t>(n_ctx));
  if (bos >= 0) chunk[0] = bos;
  s.reset();
  std::vector<float> out(static_cast<size_t>(scored * V));
  for (int64_t b = 0; b < n_ctx; b += n_batch) {
    const int64_t n = std::min<int64_t>(n_batch, n_ctx - b);
    step_logits.resize(static_cast<size_t>(n * V));
    s.eval_all(std::span<const int32_t>(chunk).subspan(static_cast<size_t>(b), static_cast<size_t>(n)),
               step_logits.data());
    for (int64_t i = std::max(b, first); i < std::min(b + n, first + scored); ++i)
      std::copy_n(step_logits.data() + (i - b) * V, V, out.data() + (i - first) * V);
  }
  return out;
}

int perplexity_main(int argc, char** argv) {
  CLI::App app{"Perplexity of a text, or the KL divergence against a base model's log-probabilities (llama-perplexity)",
               "ferry perplexity"};
  ModelArgs ma;
  ma.ctx = 512;  // llama-perplexity's default
  std::string text_file, base_file;
  int32_t n_chunks = -1;
  bool kl_divergence = false;
  add_model_args(app, ma);
  app.add_option("-f,--file", text_file, "text to score (not with --kl-divergence: the base file holds the tokens)");
  app.add_option("--chunks", n_chunks, "score at most this many chunks of -c tokens (default: all)");
  app.add_option("--kl-divergence-base", base_file,
                 "the base model's log-probabilities: written with -f, read with --kl-divergence "
                 "(llama-perplexity's file format)");
  app.add_flag("--kl-divergence", kl_divergence,
               "compare this model with the --kl-divergence-base file: perplexity, KL divergence and token "
               "probability statistics");
  bool stop = false;
  const int rc = parse(app, argc, argv, stop);
  if (stop) return rc;
  if (ma.model.empty()) fail(ErrorKind::invalid_arg, "no model given (-m FILE)");
  if (kl_divergence && base_file.empty()) fail(ErrorKind::invalid_arg, "--kl-divergence needs --kl-divergence-base FILE");
  if (kl_divergence && !text_file.empty())
    fail(ErrorKind::invalid_arg, "--kl-divergence reads its tokens from the base file: drop -f");
  if (!kl_divergence && text_file.empty()) fail(ErrorKind::invalid_arg, "no text given (-f FILE)");
  if (ma.batch < 1) fail(ErrorKind::invalid_arg, "-b {}: must be at least 1", ma.batch);

  ThreadLimit threads(ma.threads);
  Observability obs(ma.run.options.observe);
  // The tokens and the chunk size first: from the base file, or the text and -c.
  std::optional<LogProbReader> base_in;
  LogProbFileHeader h;
  int32_t bos = -1;
  {
    const gguf::File f = gguf::File::open(ma.model);
    const Tokenizer tok = Tokenizer::from_gguf(f);
    if (tok.add_bos_token()) bos = tok.bos();
    if (kl_divergence) {
      base_in.emplace(base_file);
      h = base_in->header();
      if (h.n_vocab != tok.n_vocab())
        fail(ErrorKind::invalid_arg, "{} was written for a vocabulary of {} tokens; {} has {}", base_file, h.n_vocab,
             ma.model, tok.n_vocab());
    } else {
      if (ma.ctx < 4) fail(ErrorKind::invalid_arg, "-c {}: perplexity needs a context of at least 4 tokens", ma.ctx);
      h.n_ctx = static_cast<int32_t>(ma.ctx);
      h.n_vocab = tok.n_vocab();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<int32_t> tokens = tok.encode(read_text(text_file), true, false);
      std::fprintf(stderr, "perplexity: tokenized %zu tokens in %.1f ms\n", tokens.size(),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (static_cast<int64_t>(tokens.size()) < 2 * ma.ctx)
        fail(ErrorKind::invalid_arg,
             "{} tokenizes to only {} tokens; perplexity with a context of {} needs at least {}", text_file,
             tokens.size(), ma.ctx, 2 * ma.ctx);
      const int64_t max_chunks = static_cast<int64_t>(tokens.size()) / ma.ctx;
      h.n_chunk = static_cast<int32_t>(n_chunks < 0 ? max_chunks : std::min<int64_t>(n_chunks, max_chunks));
      tokens.resize(static_cast<size_t>(h.n_chunk) * static_cast<size_t>(h.n_ctx));
      h.tokens = std::move(tokens);
    }
  }
  if (kl_divergence && n_chunks >= 0) h.n_chunk = std::min(h.n_chunk, n_chunks);
  SessionOptions so = session_options(ma);
  so.n_ctx = h.n_ctx;
  so.n_batch = std::min(ma.batch, h.n_ctx);
  auto model = LoadedModel::load(ma.model, {}, run_options(ma.run.options, obs, so));
  Session session(*model, so);
  obs.attach(*model, {});

  std::optional<LogProbWriter> base_out;
  if (!kl_divergence && !base_file.empty()) base_out.emplace(base_file, h);
  const int64_t V = h.n_vocab, scored = scored_per_chunk(h.n_ctx), rec = logprob_record_u16(h.n_vocab);
  std::fprintf(stderr, "perplexity: %s over %d chunks, n_ctx=%d, batch_size=%d, %d threads\n",
               kl_divergence ? "KL divergence" : "perplexity", h.n_chunk, h.n_ctx, so.n_batch, threads.threads());

  NllSums nll;
  KldSums kld;
  std::vector<float> kld_values, p_diff_values, step_logits;
  std::vector<uint16_t> records(static_cast<size_t>(scored * rec), 0);
  const auto t_start = std::chrono::steady_clock::now();
  for (int32_t c = 0; c < h.n_chunk; ++c) {
    const auto* first_token = h.tokens.data() + static_cast<size_t>(c) * static_cast<size_t>(h.n_ctx);
    const std::vector<float> logits =
        chunk_logits(session, std::vector<int32_t>(first_token, first_token + h.n_ctx), bos, so.n_batch, step_logits);
    const int32_t* next = first_token + h.n_ctx / 2 + 1;  // the token each scored position predicts
    if (c == 0) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
      std::fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", s, s * h.n_chunk / 60.0);
      if (kl_divergence) std::fputs(kld_table_header().c_str(), stdout);
    }
    if (kl_divergence) {
      base_in->read_chunk(records);
      for (int64_t i = 0; i < scored; ++i) {
        const auto [k, dp] = token_kld(std::span<const float>(logits).subspan(static_cast<size_t>(i * V), V),
                                       records.data() + i * rec, next[i], kld);
        kld_values.push_back(static_cast<float>(k));
        p_diff_values.push_back(dp);
      }
      std::fputs(kld_chunk_line(c + 1, kld).c_str(), stdout);
    } else {
      for (int64_t i = 0; i < scored; ++i) {
        const std::span<const float> l = std::span<const float>(logits).subspan(static_cast<size_t>(i * V), V);
        const double v = base_out ? token_nll_packed(l, next[i], records.data() + i * rec) : token_nll(l, next[i]);
        nll.nll += v;
        nll.nll2 += v * v;
        ++nll.count;
      }
      if (base_out) base_out->write_chunk(records);
      std::printf("[%d]%.4lf,", c + 1, std::exp(nll.nll / static_cast<double>(nll.count)));
    }
    std::fflush(stdout);
  }
  std::printf("\n");
  if (kl_divergence) {
    const std::string report = kld_report(kld, std::move(kld_values), std::move(p_diff_values));
    if (report.empty()) std::fprintf(stderr, "perplexity: fewer than 100 scored tokens: no statistics (as llama-perplexity)\n");
    std::fputs(report.c_str(), stdout);
  } else {
    if (base_out) base_out->finish();
    const PplEstimate e = ppl_estimate(nll);
    if (e.err > 0)
      std::printf("Final estimate: PPL = %.4lf +/- %.5lf\n", e.ppl, e.err);
    else
      std::printf("Final estimate: PPL = %.4lf (no error estimate: the log-probabilities do not vary)\n", e.ppl);
  }
  print_offload_stats(*model);
  obs.finish();
  return 0;
}

}  // namespace

FERRY_COMMAND("perplexity", "perplexity of a text, or KL divergence against a base model (llama-perplexity)",
              perplexity_main);

}  // namespace ferry::cli
