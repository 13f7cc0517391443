#include "offload/simulate_routing.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"
#include "runtime/core/named.hpp"

#include <optional>

namespace ferry {

SimRouting parse_sim_routing(const std::string& s, uint64_t seed) {
  SimRouting r;
  r.seed = seed;
  const auto with_file = [&](const char* prefix, SimRoutingMode m) {
    const size_t n = std::char_traits<char>::length(prefix);
    if (s.size() <= n) fail(ErrorKind::invalid_arg, "--routing {}: FILE missing", s);
    r.mode = m;
    r.path = s.substr(n);
  };
  // The plain spellings; the FILE forms by prefix.
  static constexpr std::array<Named<SimRoutingMode>, 2> kPlain{
      {{"uniform", SimRoutingMode::uniform}, {"locality", SimRoutingMode::locality}}};
  if (const std::optional<SimRoutingMode> m = find_named(kPlain, s)) r.mode = *m;
  else if (s.rfind("locality:", 0) == 0) with_file("locality:", SimRoutingMode::locality);
  else if (s.rfind("trace:", 0) == 0) with_file("trace:", SimRoutingMode::trace);
  else if (s.rfind("profile:", 0) == 0) with_file("profile:", SimRoutingMode::profile);
  else
    fail(ErrorKind::invalid_arg,
         "--routing '{}' (uniform, locality, locality:FILE, trace:FILE or profile:FILE)", s);
  return r;
}

std::string sim_routing_name(const SimRouting& r) {
  switch (r.mode) {
    case SimRoutingMode::uniform: return "uniform";
    case SimRoutingMode::locality: return r.path.empty() ? "locality" : "locality:" + r.path;
    case SimRoutingMode::trace: return "trace:" + r.path;
    case SimRoutingMode::profile: return "profile:" + r.path;
  }
  return "?";
}

SimRouter::SimRouter(const SimRouting& r, int32_t n_layer, int32_t n_expert, int32_t top_k)
    : r_(r), n_layer_(n_layer), n_expert_(n_expert), top_k_(top_k) {
  if (n_layer < 1 || n_expert < 1 || top_k < 1 || top_k > n_expert)
    fail(ErrorKind::invalid_arg, "simulator routing: bad shape ({} layers, {} experts, top-{})",
         n_layer, n_expert, top_k);
  const auto L = static_cast<size_t>(n_layer);
  switch (r.mode) {
    case SimRoutingMode::uniform:
      for (size_t l = 0; l < L; ++l) rng_.emplace_back(r.seed * 1000003ull + l);
      break;
    case SimRoutingMode::locality: {
      std::vector<LocalityParams> par(L);
      if (!r.path.empty())
        par = locality_params_from_trace(read_routing_trace(r.path), n_layer, n_expert, top_k);
      for (size_t l = 0; l < L; ++l)
        locality_.push_back(
            std::make_unique<LocalityRouting>(n_expert, top_k, r.seed * 1000003ull + l, par[l]));
      break;
    }
    case SimRoutingMode::trace: {
      trace_ = read_routing_trace(r.path);
      const RoutingTraceHeader& h = trace_->header;
      if (h.n_layer != n_layer || h.n_expert != n_expert || h.top_k != top_k)
        fail(ErrorKind::invalid_arg,
             "routing trace {} has {} layers x {} experts, top-{}; the model has {} x {}, top-{}",
             r.path, h.n_layer, h.n_expert, h.top_k, n_layer, n_expert, top_k);
      for (int32_t l = 0; l < n_layer; ++l)
        if (trace_->tokens(l) == 0)
          fail(ErrorKind::invalid_arg, "routing trace {} has no tokens for layer {}", r.path, l);
      pos_.assign(L, 0);
      break;
    }
    case SimRoutingMode::profile: {
      const ExpertProfile p = ExpertProfile::read(r.path);
      if (p.n_layer() != n_layer || p.n_expert() != n_expert)
        fail(ErrorKind::invalid_arg, "profile {} has {} layers x {} experts; the model has {} x {}",
             r.path, p.n_layer(), p.n_expert(), n_layer, n_expert);
      for (size_t l = 0; l < L; ++l) {
        rng_.emplace_back(r.seed * 1000003ull + l);
        std::vector<double> c(static_cast<size_t>(n_expert));
        double sum = 0;
        // +1 per expert: an expert never seen in the recording still has a small chance.
        for (int32_t e = 0; e < n_expert; ++e)
          c[static_cast<size_t>(e)] = sum += 1.0 + double(p.count(static_cast<int32_t>(l), e));
        for (double& x : c) x /= sum;
        cdf_.push_back(std::move(c));
      }
      break;
    }
  }
}

void SimRouter::next(int32_t layer, int32_t* row) {
  const auto l = static_cast<size_t>(layer);
  const auto k = static_cast<size_t>(top_k_);
  switch (r_.mode) {
    case SimRoutingMode::uniform:
      for (size_t j = 0; j < k; ++j) {
        int32_t e;
        do e = static_cast<int32_t>(rng_[l].below(static_cast<uint32_t>(n_expert_)));
        while (std::find(row, row + j, e) != row + j);
        row[j] = e;
      }
      return;
    case SimRoutingMode::locality: locality_[l]->next(row); return;
    case SimRoutingMode::trace: {
      int64_t& pos = pos_[l];
      if (pos >= trace_->tokens(layer)) pos = 0;  // as the override: replayed from the start
      std::copy_n(trace_->ids[l].data() + static_cast<size_t>(pos) * k, k, row);
      ++pos;
      return;
    }
    case SimRoutingMode::profile:
      for (size_t j = 0; j < k; ++j) {
        int32_t e;
        do {
          const double u = rng_[l].uniform();
          e = static_cast<int32_t>(std::upper_bound(cdf_[l].begin(), cdf_[l].end(), u) -
                                   cdf_[l].begin());
          e = std::min(e, n_expert_ - 1);
        } while (std::find(row, row + j, e) != row + j);
        row[j] = e;
      }
      return;
  }
}

}  // namespace ferry
