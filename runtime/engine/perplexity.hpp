#pragma once
// llama-perplexity's scoring rules, so that `ferry perplexity` gives the numbers that tool gives:
// perplexity over the second half of each n_ctx chunk (positions n_ctx/2 .. n_ctx-2 predict the
// next token), the base model's log-probability file (--kl-divergence-base) and the KL divergence
// of another model against it (--kl-divergence). Pure functions over logits; the chunk loop that
// produces the logits is in runtime/cli/cmd_perplexity.cpp.
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ferry {

// The log-probability file, byte for byte as llama-perplexity writes and reads it (little-endian):
//   char[8] "_logits_" | int32 n_ctx | int32 n_vocab | int32 n_chunk | int32 tokens[n_chunk·n_ctx]
//   then for each chunk, for each scored position (n_ctx − 1 − n_ctx/2 of them), one record of
//   logprob_record_u16(n_vocab) uint16 words:
//     float scale, float min_log_prob (the first 4 words),
//     q[i] for i < n_vocab: round((logit_i − min_logit) / scale), 0 at or below min_logit,
//     then zero padding to an even count.
//   min_logit = max(min logit, max logit − 16); scale = (max_logit − min_logit) / 65535;
//   log p_i ≈ scale·q[i] + min_log_prob. The tokens are the input before any BOS substitution.
struct LogProbFileHeader {
  int32_t n_ctx = 0;
  int32_t n_vocab = 0;
  int32_t n_chunk = 0;
  std::vector<int32_t> tokens;  // (n_chunk · n_ctx)
};
inline constexpr char kLogProbMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
int64_t logprob_record_u16(int32_t n_vocab);  // 2·⌈n_vocab/2⌉ + 4
int64_t scored_per_chunk(int32_t n_ctx);      // n_ctx − 1 − n_ctx/2
uint64_t logprob_file_bytes(int32_t n_ctx, int32_t n_vocab, int32_t n_chunk);
// Reads a log-probability file: the constructor checks the header and that the file's size is
// exactly what the header implies (ErrorKind::io when it cannot be read, ErrorKind::format naming
// the file and the figures when it is not such a file, truncated or too long), so a bad file
// fails before any model work.
class LogProbReader {
 public:
  explicit LogProbReader(const std::string& path);
  ~LogProbReader();
  LogProbReader(const LogProbReader&) = delete;
  LogProbReader& operator=(const LogProbReader&) = delete;
  const LogProbFileHeader& header() const { return header_; }
  // The next chunk's records: (scored_per_chunk(n_ctx), logprob_record_u16(n_vocab)) words.
  void read_chunk(std::vector<uint16_t>& out);

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  LogProbFileHeader header_;
};

// Writes one: to PATH.tmp, renamed to PATH by finish() once every chunk is written; a writer
// destroyed before that removes the temporary file, so no half-written file is left behind.
class LogProbWriter {
 public:
  LogProbWriter(const std::string& path, const LogProbFileHeader& header);
  ~LogProbWriter();
  LogProbWriter(const LogProbWriter&) = delete;
  LogProbWriter& operator=(const LogProbWriter&) = delete;
  void write_chunk(std::span<const uint16_t> records);
  void finish();

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  int32_t chunks_left_ = 0;
};

// Sums of the negative log-likelihood over scored positions.
struct NllSums {
  double nll = 0;
  double nll2 = 0;
  int64_t count = 0;
};
// −log p(tok) as llama-perplexity's plain run computes it (float max, double Σ expf, double log).
double token_nll(std::span<const float> logits, int32_t tok);
// The same as its --kl-divergence-base run computes it (log Σ rounded to float), packing the
// position's record into `record` (logprob_record_u16 words; the padding is left as it is).
double token_nll_packed(std::span<const float> logits, int32_t tok, uint16_t* record);

struct PplEstimate {
  double ppl = 0;  // exp(mean nll)
  double err = 0;  // ppl · sqrt(var(nll) / (count − 1)); 0 when the variance is not positive
};
PplEstimate ppl_estimate(const NllSums& s);

// llama-perplexity's kl_divergence_result: what the KLD report is made of.
struct KldSums {
  double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0, sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
  float max_p_diff = 0;
  int64_t n_same_top = 0;
  int64_t count = 0;
};
// One scored position against the base record: adds to `s`, returns (KL divergence, p − p_base).
std::pair<double, float> token_kld(std::span<const float> logits, const uint16_t* record, int32_t tok, KldSums& s);
// The per-chunk line of llama-perplexity's KLD table (PPL, ln ratio, KLD, Δp RMS, same top p).
std::string kld_chunk_line(int chunk, const KldSums& s);
std::string kld_table_header();
// The three closing blocks (perplexity, KL divergence, token probability statistics); the value
// lists are the per-position KLDs and Δp (sorted here). Empty when fewer than 100 positions were
// scored (llama-perplexity prints nothing then either).
std::string kld_report(const KldSums& s, std::vector<float> kld_values, std::vector<float> p_diff_values);

}  // namespace ferry
