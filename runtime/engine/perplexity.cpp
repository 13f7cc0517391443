// llama-perplexity's scoring, written from its rules (tools/perplexity/perplexity.cpp of the pinned
// llama.cpp): the same float/double mix in each sum, the same rounding of the packed log-probs,
// the same statistics and print formats, so that both tools print the same figures.
#include "runtime/engine/perplexity.hpp"

#include <fmt/format.h>
#include <fmt/printf.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/core/error.hpp"

namespace ferry {

int64_t logprob_record_u16(int32_t n_vocab) { return 2 * ((static_cast<int64_t>(n_vocab) + 1) / 2) + 4; }
int64_t scored_per_chunk(int32_t n_ctx) { return n_ctx - 1 - n_ctx / 2; }

uint64_t logprob_file_bytes(int32_t n_ctx, int32_t n_vocab, int32_t n_chunk) {
  const uint64_t chunks = static_cast<uint64_t>(n_chunk);
  return 8 + 3 * 4 + chunks * static_cast<uint64_t>(n_ctx) * 4 +
         chunks * static_cast<uint64_t>(scored_per_chunk(n_ctx)) * static_cast<uint64_t>(logprob_record_u16(n_vocab)) *
             2;
}

// ---- Files

LogProbReader::LogProbReader(const std::string& path) : path_(path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(ErrorKind::io, "cannot read the log-probability file {}: {}", path, ec.message());
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) fail(ErrorKind::io, "cannot open the log-probability file {}: {}", path, std::strerror(errno));
  char magic[8];
  int32_t dims[3];
  if (std::fread(magic, 1, 8, f_) != 8 || std::memcmp(magic, kLogProbMagic, 8) != 0)
    fail(ErrorKind::format, "{} is not a log-probability file (llama-perplexity --kl-divergence-base): no \"_logits_\" magic",
         path);
  if (std::fread(dims, 4, 3, f_) != 3) fail(ErrorKind::format, "{}: truncated header", path);
  header_.n_ctx = dims[0];
  header_.n_vocab = dims[1];
  header_.n_chunk = dims[2];
  if (header_.n_ctx < 4 || header_.n_ctx > (1 << 24) || header_.n_vocab < 1 || header_.n_vocab > (1 << 24) ||
      header_.n_chunk < 1 || header_.n_chunk > (1 << 24))
    fail(ErrorKind::format, "{}: implausible header (n_ctx {}, n_vocab {}, n_chunk {})", path, header_.n_ctx,
         header_.n_vocab, header_.n_chunk);
  const uint64_t want = logprob_file_bytes(header_.n_ctx, header_.n_vocab, header_.n_chunk);
  if (size != want)
    fail(ErrorKind::format,
         "{} has {} bytes, but its header (n_ctx {}, n_vocab {}, {} chunks) needs {}: the file is {}", path, size,
         header_.n_ctx, header_.n_vocab, header_.n_chunk, want, size < want ? "truncated" : "longer than its header says");
  header_.tokens.resize(static_cast<size_t>(header_.n_chunk) * static_cast<size_t>(header_.n_ctx));
  if (std::fread(header_.tokens.data(), 4, header_.tokens.size(), f_) != header_.tokens.size())
    fail(ErrorKind::io, "{}: reading the evaluation tokens failed", path);
}

LogProbReader::~LogProbReader() {
  if (f_) std::fclose(f_);
}

void LogProbReader::read_chunk(std::vector<uint16_t>& out) {
  out.resize(static_cast<size_t>(scored_per_chunk(header_.n_ctx) * logprob_record_u16(header_.n_vocab)));
  if (std::fread(out.data(), 2, out.size(), f_) != out.size())
    fail(ErrorKind::io, "{}: reading a chunk's log-probabilities failed", path_);
}

LogProbWriter::LogProbWriter(const std::string& path, const LogProbFileHeader& h)
    : path_(path), tmp_(path + ".tmp"), chunks_left_(h.n_chunk) {
  if (h.tokens.size() != static_cast<size_t>(h.n_chunk) * static_cast<size_t>(h.n_ctx))
    fail(ErrorKind::invalid_arg, "log-probability header: {} tokens for {} chunks of {}", h.tokens.size(), h.n_chunk,
         h.n_ctx);
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) fail(ErrorKind::io, "cannot write {}: {}", tmp_, std::strerror(errno));
  const int32_t dims[3] = {h.n_ctx, h.n_vocab, h.n_chunk};
  if (std::fwrite(kLogProbMagic, 1, 8, f_) != 8 || std::fwrite(dims, 4, 3, f_) != 3 ||
      std::fwrite(h.tokens.data(), 4, h.tokens.size(), f_) != h.tokens.size())
    fail(ErrorKind::io, "writing {} failed", tmp_);
}

LogProbWriter::~LogProbWriter() {
  if (f_) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void LogProbWriter::write_chunk(std::span<const uint16_t> records) {
  if (chunks_left_-- <= 0) fail(ErrorKind::internal, "{}: more chunks than the header names", path_);
  if (std::fwrite(records.data(), 2, records.size(), f_) != records.size()) fail(ErrorKind::io, "writing {} failed", tmp_);
}

void LogProbWriter::finish() {
  if (chunks_left_ != 0) fail(ErrorKind::internal, "{}: {} chunks still missing", path_, chunks_left_);
  const bool ok = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_.c_str());
    fail(ErrorKind::io, "writing {} failed", path_);
  }
}

// ---- Scoring

namespace {

// ggml's round-to-nearest through the float mantissa (valid below 2^22).
int nearest_int(float v) {
  const float x = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &x, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

std::pair<double, double> mean_and_uncertainty(double sum, double sum2, int64_t count) {
  if (count < 1) return {0., 0.};
  const double f = sum / static_cast<double>(count);
  double df = sum2 / static_cast<double>(count) - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / static_cast<double>(count - 1)) : 0.;
  return {f, df};
}

double covariance(double suma, double sumb, double sumab, int64_t count) {
  if (count < 10) return 0.0;
  const double n = static_cast<double>(count);
  return (sumab / n - (suma / n) * (sumb / n)) / (n - 1);
}

float percentile(const std::vector<float>& v, float fraction) {
  if (fraction <= 0) return v.front();
  if (fraction >= 1) return v.back();
  float p = fraction * static_cast<float>(v.size() - 1);
  const size_t ip = static_cast<size_t>(p);
  p -= static_cast<float>(ip);
  return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}

float median(const std::vector<float>& v) {
  const size_t n = v.size();
  return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

}  // namespace

double token_nll(std::span<const float> logits, int32_t tok) {
  float max_logit = logits[0];
  for (const float l : logits) max_logit = std::max(max_logit, l);
  double sum_exp = 0.0;
  for (const float l : logits) sum_exp += std::exp(l - max_logit);
  return -(static_cast<double>(logits[static_cast<size_t>(tok)] - max_logit) - std::log(sum_exp));
}

double token_nll_packed(std::span<const float> logits, int32_t tok, uint16_t* record) {
  float max_logit = logits[0], min_logit = logits[0];
  for (const float l : logits) {
    max_logit = std::max(max_logit, l);
    min_logit = std::min(min_logit, l);
  }
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (const float l : logits) sum_exp += std::exp(l - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(record, &scale, 4);
  std::memcpy(record + 2, &min_log_prob, 4);
  uint16_t* q = record + 4;
  if (scale != 0) {
    const float inv_scale = 1 / scale;
    for (size_t i = 0; i < logits.size(); ++i)
      q[i] = logits[i] > min_logit ? static_cast<uint16_t>(nearest_int(inv_scale * (logits[i] - min_logit))) : 0;
  } else {
    std::memset(q, 0, logits.size() * sizeof(uint16_t));
  }
  return max_logit + log_sum_exp - logits[static_cast<size_t>(tok)];
}

PplEstimate ppl_estimate(const NllSums& s) {
  const double n = static_cast<double>(s.count);
  const double nll = s.nll / n;
  double nll2 = s.nll2 / n - nll * nll;
  PplEstimate e;
  e.ppl = std::exp(nll);
  if (nll2 > 0) e.err = std::sqrt(nll2 / (n - 1)) * e.ppl;
  return e;
}

std::pair<double, float> token_kld(std::span<const float> logits, const uint16_t* record, int32_t tok, KldSums& k) {
  float max_logit = logits[0];
  size_t imax = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      imax = i;
    }
  double sum_exp = 0.0;
  for (const float l : logits) sum_exp += std::exp(l - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  float scale, min_log_prob;
  std::memcpy(&scale, record, 4);
  std::memcpy(&min_log_prob, record + 2, 4);
  const uint16_t* base = record + 4;
  const size_t t = static_cast<size_t>(tok);

  const float nll = max_logit + log_sum_exp - logits[t];
  k.sum_nll += nll;
  k.sum_nll2 += nll * nll;
  const float nll_base = -(scale * base[t] + min_log_prob);
  k.sum_nll_base += nll_base;
  k.sum_nll_base2 += nll_base * nll_base;
  k.sum_nll_nll_base += nll * nll_base;

  max_logit += log_sum_exp;
  double sum = 0;
  size_t imax_base = 0;
  float p_log_base_max = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float p_log_base = scale * base[i] + min_log_prob;
    if (i == 0 || p_log_base > p_log_base_max) {
      p_log_base_max = p_log_base;
      imax_base = i;
    }
    if (p_log_base > -16.f) {
      const float p_base = std::exp(p_log_base);
      sum += p_base * (p_log_base - logits[i] + max_logit);
    }
  }
  k.sum_kld += sum;
  k.sum_kld2 += sum * sum;
  ++k.count;
  if (imax == imax_base) ++k.n_same_top;

  const float p_base = std::exp(-nll_base);
  const float p = std::exp(-nll);
  const float p_diff = p - p_base;
  k.sum_p_diff += p_diff;
  const double p_diff2 = p_diff * p_diff;
  k.sum_p_diff2 += p_diff2;
  k.sum_p_diff4 += p_diff2 * p_diff2;
  k.max_p_diff = std::max(k.max_p_diff, std::fabs(p_diff));
  return {sum, p_diff};
}

// ---- Reports (llama-perplexity's formats)

std::string kld_table_header() {
  return "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS      "
         "      Same top p\n";
}

std::string kld_chunk_line(int chunk, const KldSums& k) {
  const auto log_ppl = mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count);
  const double ppl = std::exp(log_ppl.first);
  const auto log_base = mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count);
  const double cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count);
  const double ratio_unc = std::sqrt(log_ppl.second * log_ppl.second + log_base.second * log_base.second - 2.0 * cov);
  const auto kl = mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count);
  const auto mse = mean_and_uncertainty(k.sum_p_diff2, k.sum_p_diff4, k.count);
  const double rms = std::sqrt(mse.first);
  const double top = 1. * static_cast<double>(k.n_same_top) / static_cast<double>(k.count);
  const double top_unc = std::sqrt(top * (1 - top) / static_cast<double>(k.count - 1));
  return fmt::sprintf("%4d    %9.4lf ± %9.4lf    %10.5lf ± %10.5lf    %10.5lf ± %10.5lf    %6.3lf ± %6.3lf %%    %6.3lf ± %6.3lf %%\n",
                      chunk, ppl, ppl * log_ppl.second, log_ppl.first - log_base.first, ratio_unc, kl.first,
                      kl.second, 100.0 * rms, 100.0 * 0.5 / rms * mse.second, 100.0 * top, 100.0 * top_unc);
}

std::string kld_report(const KldSums& k, std::vector<float> kld_values, std::vector<float> p_diff_values) {
  if (k.count < 100 || kld_values.empty()) return {};
  std::sort(kld_values.begin(), kld_values.end());
  std::sort(p_diff_values.begin(), p_diff_values.end());
  std::string o = "====== Perplexity statistics ======\n";
  const auto log_ppl = mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count);
  const double ppl = std::exp(log_ppl.first), ppl_unc = ppl * log_ppl.second;
  o += fmt::sprintf("Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", ppl, ppl_unc);
  const auto log_base = mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count);
  const double base = std::exp(log_base.first), base_unc = base * log_base.second;
  o += fmt::sprintf("Mean PPL(base)                : %10.6lf ± %10.6lf\n", base, base_unc);
  const double cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count);
  o += fmt::sprintf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n", 100.0 * cov / (log_ppl.second * log_base.second));
  const double ratio = log_ppl.first - log_base.first;
  const double ratio_unc = std::sqrt(log_ppl.second * log_ppl.second + log_base.second * log_base.second - 2.0 * cov);
  o += fmt::sprintf("Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", ratio, ratio_unc);
  o += fmt::sprintf("Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", std::exp(ratio), std::exp(ratio) * ratio_unc);
  const double ppl_cov = ppl * base * cov;
  o += fmt::sprintf("Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n", ppl - base,
                    std::sqrt(ppl_unc * ppl_unc + base_unc * base_unc - 2.0 * ppl_cov));
  o += "\n====== KL divergence statistics ======\n";
  const auto kl = mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count);
  o += fmt::sprintf("Mean    KLD: %10.6lf ± %10.6lf\n", kl.first, kl.second);
  o += fmt::sprintf("Maximum KLD: %10.6f\n", kld_values.back());
  const std::pair<const char*, float> kld_rows[] = {{"99.9%   KLD", 0.999f}, {"99.0%   KLD", 0.990f},
                                                    {"95.0%   KLD", 0.950f}, {"90.0%   KLD", 0.900f}};
  for (const auto& [name, f] : kld_rows) o += fmt::sprintf("%s: %10.6f\n", name, percentile(kld_values, f));
  o += fmt::sprintf("Median  KLD: %10.6f\n", median(kld_values));
  const std::pair<const char*, float> kld_low[] = {
      {"10.0%   KLD", 0.100f}, {" 5.0%   KLD", 0.050f}, {" 1.0%   KLD", 0.010f}, {" 0.1%   KLD", 0.001f}};
  for (const auto& [name, f] : kld_low) o += fmt::sprintf("%s: %10.6f\n", name, percentile(kld_values, f));
  o += fmt::sprintf("Minimum KLD: %10.6f\n", kld_values.front());
  o += "\n====== Token probability statistics ======\n";
  const auto pd = mean_and_uncertainty(k.sum_p_diff, k.sum_p_diff2, k.count);
  o += fmt::sprintf("Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * pd.first, 100.0 * pd.second);
  o += fmt::sprintf("Maximum Δp: %6.3lf%%\n", 100.0 * p_diff_values.back());
  const std::pair<const char*, float> pd_high[] = {
      {"99.9%   Δp", 0.999f}, {"99.0%   Δp", 0.990f}, {"95.0%   Δp", 0.950f}, {"90.0%   Δp", 0.900f}, {"75.0%   Δp", 0.750f}};
  for (const auto& [name, f] : pd_high) o += fmt::sprintf("%s: %6.3lf%%\n", name, 100.0 * percentile(p_diff_values, f));
  o += fmt::sprintf("Median  Δp: %6.3lf%%\n", 100.0 * median(p_diff_values));
  const std::pair<const char*, float> pd_low[] = {
      {"25.0%   Δp", 0.250f}, {"10.0%   Δp", 0.100f}, {" 5.0%   Δp", 0.050f}, {" 1.0%   Δp", 0.010f}, {" 0.1%   Δp", 0.001f}};
  for (const auto& [name, f] : pd_low) o += fmt::sprintf("%s: %6.3lf%%\n", name, 100.0 * percentile(p_diff_values, f));
  o += fmt::sprintf("Minimum Δp: %6.3lf%%\n", 100.0 * p_diff_values.front());
  const auto mse = mean_and_uncertainty(k.sum_p_diff2, k.sum_p_diff4, k.count);
  const double rms = std::sqrt(mse.first);
  o += fmt::sprintf("RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * rms, 100.0 * 0.5 / rms * mse.second);
  const double top = 1.0 * static_cast<double>(k.n_same_top) / static_cast<double>(k.count);
  o += fmt::sprintf("Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * top,
                    100.0 * std::sqrt(top * (1.0 - top) / static_cast<double>(k.count - 1)));
  return o;
}

}  // namespace ferry
