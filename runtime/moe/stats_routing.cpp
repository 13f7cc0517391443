#include "runtime/moe/stats_routing.hpp"

#include <algorithm>
#include <functional>
#include <numeric>

#include <fmt/format.h>

namespace ferry {

RoutingLocalityStats::RoutingLocalityStats(int32_t n_layer, int32_t n_expert, int32_t window)
    : n_expert_(std::max(n_expert, 1)), window_(std::max(window, 1)) {
  acc_.resize(static_cast<size_t>(std::max(n_layer, 0)));
  for (Acc& a : acc_) {
    a.last_use.assign(static_cast<size_t>(n_expert_), -1);
    a.count.assign(static_cast<size_t>(n_expert_), 0);
  }
}

void RoutingLocalityStats::observe(int32_t layer, const int32_t* ids, int32_t n_tokens, int32_t top_k) {
  if (layer < 0 || static_cast<size_t>(layer) >= acc_.size()) return;
  Acc& a = acc_[static_cast<size_t>(layer)];
  for (int32_t r = 0; r < n_tokens; ++r) {
    const int64_t t = a.tokens;
    const int32_t* row = ids + static_cast<ptrdiff_t>(r) * top_k;
    for (int32_t j = 0; j < top_k; ++j) {
      const int32_t e = row[j];
      if (e < 0 || e >= n_expert_) continue;
      const int64_t u = a.last_use[static_cast<size_t>(e)];
      if (t >= 1) {
        a.rep += u == t - 1;
        ++a.rep_n;
        ++a.reuse[static_cast<size_t>(reuse_bin(u < 0 ? 0 : t - u))];
      }
      if (t >= window_) {
        a.win += u >= t - window_;
        ++a.win_n;
      }
      ++a.count[static_cast<size_t>(e)];
    }
    for (int32_t j = 0; j < top_k; ++j)
      if (row[j] >= 0 && row[j] < n_expert_) a.last_use[static_cast<size_t>(row[j])] = t;
    ++a.tokens;
  }
}

int RoutingLocalityStats::reuse_bin(int64_t distance) {
  if (distance < 1) return kReuseBins - 1;
  for (size_t b = 0; b < kReuseUpper.size(); ++b)
    if (distance <= kReuseUpper[b]) return static_cast<int>(b);
  return kReuseBins - 2;
}

std::string RoutingLocalityStats::reuse_bin_name(int bin) {
  if (bin == kReuseBins - 1) return "first";
  if (bin == kReuseBins - 2) return fmt::format(">{}", kReuseUpper.back());
  const int64_t hi = kReuseUpper[static_cast<size_t>(bin)],
                lo = bin == 0 ? 1 : kReuseUpper[static_cast<size_t>(bin) - 1] + 1;
  return lo == hi ? std::to_string(hi) : fmt::format("{}-{}", lo, hi);
}

RoutingLocalityStats::Layer RoutingLocalityStats::summarize(const Acc& a) const {
  Layer s;
  s.reuse = a.reuse;
  s.tokens = a.tokens;
  s.repeat_next = a.rep_n ? double(a.rep) / double(a.rep_n) : 0.0;
  s.recur_window = a.win_n ? double(a.win) / double(a.win_n) : 0.0;
  std::vector<int64_t> c = a.count;
  std::sort(c.begin(), c.end(), std::greater<>());
  const int64_t total = std::accumulate(c.begin(), c.end(), int64_t{0});
  const int64_t top = std::accumulate(c.begin(), c.begin() + n_expert_ / 2, int64_t{0});
  s.top_half_share = total ? double(top) / double(total) : 0.0;
  s.distinct = static_cast<int32_t>(std::count_if(c.begin(), c.end(), [](int64_t v) { return v > 0; }));
  return s;
}

RoutingLocalityStats::Layer RoutingLocalityStats::layer(int32_t l) const {
  return summarize(acc_.at(static_cast<size_t>(l)));
}

RoutingLocalityStats::Layer RoutingLocalityStats::all() const {
  // Pooled: counts summed over layers; top-half share averaged (experts differ per layer).
  Layer s;
  int64_t rep = 0, rep_n = 0, win = 0, win_n = 0;
  double top = 0;
  for (const Acc& a : acc_) {
    rep += a.rep;
    rep_n += a.rep_n;
    win += a.win;
    win_n += a.win_n;
    const Layer l = summarize(a);
    for (int b = 0; b < kReuseBins; ++b)
      s.reuse[static_cast<size_t>(b)] += a.reuse[static_cast<size_t>(b)];
    top += l.top_half_share;
    s.tokens = std::max(s.tokens, a.tokens);
    s.distinct = std::max(s.distinct, l.distinct);
  }
  s.repeat_next = rep_n ? double(rep) / double(rep_n) : 0.0;
  s.recur_window = win_n ? double(win) / double(win_n) : 0.0;
  s.top_half_share = acc_.empty() ? 0.0 : top / double(acc_.size());
  return s;
}

std::string RoutingLocalityStats::table() const {
  std::string out = fmt::format("routing locality (targets of --routing locality: 45 / 80 / 90 %)\n{:>5} {:>7} "
                                "{:>12} {:>12} {:>10} {:>9}\n",
                                "layer", "tokens", "repeat-next%", fmt::format("recur-in-{}%", window_), "top-half%",
                                "distinct");
  const auto row = [&](const std::string& name, const Layer& s) {
    out += fmt::format("{:>5} {:>7} {:>12.1f} {:>12.1f} {:>10.1f} {:>9}\n", name, s.tokens, 100 * s.repeat_next,
                       100 * s.recur_window, 100 * s.top_half_share, s.distinct);
  };
  for (size_t l = 0; l < acc_.size(); ++l) row(std::to_string(l), summarize(acc_[l]));
  row("all", all());

  out += "reuse distance (tokens since the expert's last use; % of the uses from token 1 on)\n";
  out += fmt::format("{:>5}", "layer");
  for (int b = 0; b < kReuseBins; ++b) out += fmt::format(" {:>6}", reuse_bin_name(b));
  out += "\n";
  const auto hist = [&](const std::string& name, const Layer& s) {
    const int64_t n = std::accumulate(s.reuse.begin(), s.reuse.end(), int64_t{0});
    out += fmt::format("{:>5}", name);
    for (int64_t c : s.reuse)
      out += fmt::format(" {:>6.1f}", n ? 100.0 * double(c) / double(n) : 0.0);
    out += "\n";
  };
  for (size_t l = 0; l < acc_.size(); ++l) hist(std::to_string(l), summarize(acc_[l]));
  hist("all", all());
  return out;
}

}  // namespace ferry
