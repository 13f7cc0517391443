#include "runtime/moe/routing.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/matmul.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace ferry {

RoutingSpec parse_routing_spec(const std::string& s, uint64_t seed) {
  RoutingSpec r;
  r.seed = seed;
  if (s == "model") r.mode = RoutingMode::model;
  else if (s == "uniform") r.mode = RoutingMode::uniform;
  else if (s == "locality") r.mode = RoutingMode::locality;
  else if (s.rfind("locality:", 0) == 0 && s.size() > 9) {
    r.mode = RoutingMode::locality;
    r.locality_path = s.substr(9);
  } else if (s.rfind("trace:", 0) == 0 && s.size() > 6) {
    r.mode = RoutingMode::trace;
    r.trace_path = s.substr(6);
  } else {
    fail(ErrorKind::invalid_arg,
         "--routing '{}': expected model, uniform, locality, locality:FILE or trace:FILE", s);
  }
  return r;
}

const char* routing_mode_name(RoutingMode m) {
  switch (m) {
    case RoutingMode::model: return "model";
    case RoutingMode::uniform: return "uniform";
    case RoutingMode::locality: return "locality";
    case RoutingMode::trace: return "trace";
  }
  return "?";
}

void routing_softmax(const float* logits, int32_t n, float* probs) {
  float mx = -INFINITY;
  for (int32_t e = 0; e < n; ++e) mx = std::max(mx, logits[e]);
  double sum = 0.0;
  for (int32_t e = 0; e < n; ++e) {
    probs[e] = std::exp(logits[e] - mx);
    sum += static_cast<double>(probs[e]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int32_t e = 0; e < n; ++e) probs[e] *= inv;
}

RoutingExecutor::RoutingExecutor(std::unique_ptr<MoeExecutor> inner, RoutingOptions o)
    : inner_(std::move(inner)), o_(std::move(o)) {
  if (!inner_) fail(ErrorKind::internal, "RoutingExecutor needs an executor to wrap");
  if (o_.n_layer < 1 || o_.n_expert < 1 || o_.top_k < 1 || o_.top_k > o_.n_expert)
    fail(ErrorKind::invalid_arg, "routing: bad model shape (n_layer {}, n_expert {}, top_k {})", o_.n_layer,
         o_.n_expert, o_.top_k);
  const size_t L = static_cast<size_t>(o_.n_layer);
  switch (o_.spec.mode) {
    case RoutingMode::model: break;
    case RoutingMode::uniform:
      for (size_t l = 0; l < L; ++l) uniform_rng_.emplace_back(o_.spec.seed * 1000003ull + l);
      break;
    case RoutingMode::locality: {
      std::vector<LocalityParams> par(L);
      if (!o_.spec.locality_path.empty()) {
        par = locality_params_from_trace(read_routing_trace(o_.spec.locality_path), o_.n_layer,
                                         o_.n_expert, o_.top_k);
        for (size_t l = 0; l < L; ++l)
          log::info("routing locality from {}: layer {}: repeat-next {:.1f}%, recur-in-{} {:.1f}%, skew {:.2f}",
                    o_.spec.locality_path, l, 100 * par[l].target_repeat_next, par[l].window,
                    100 * par[l].target_recur_window, par[l].skew_lambda);
      }
      for (size_t l = 0; l < L; ++l)
        locality_.push_back(std::make_unique<LocalityRouting>(
            o_.n_expert, o_.top_k, o_.spec.seed * 1000003ull + l, par[l]));
      break;
    }
    case RoutingMode::trace: {
      trace_ = read_routing_trace(o_.spec.trace_path);
      const auto& h = trace_->header;
      if (h.n_layer != o_.n_layer || h.n_expert != o_.n_expert || h.top_k != o_.top_k)
        fail(ErrorKind::invalid_arg,
             "routing trace {} has {} layers × {} experts, top-{}; the model has {} × {}, top-{}",
             o_.spec.trace_path, h.n_layer, h.n_expert, h.top_k, o_.n_layer, o_.n_expert, o_.top_k);
      for (int32_t l = 0; l < o_.n_layer; ++l)
        if (trace_->tokens(l) == 0)
          fail(ErrorKind::invalid_arg, "routing trace {} has no tokens for layer {}", o_.spec.trace_path, l);
      trace_pos_.assign(L, 0);
      break;
    }
  }
  if (!o_.routers.empty() && o_.routers.size() != L)
    fail(ErrorKind::internal, "routing: {} router matrices for {} layers", o_.routers.size(), L);
  if (o_.spec.mode == RoutingMode::model) fail(ErrorKind::internal, "routing: an override of mode model");
  chosen_.resize(L);
}

void RoutingExecutor::begin_step(int64_t n_tokens) {
  {
    std::lock_guard lock(mu_);
    ++step_;
    // Grown here, eagerly: a recorded step cannot allocate.
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n_tokens, 1)) * static_cast<size_t>(o_.top_k) * 4;
    if (o_.device_ops && bytes > ids_dev_.bytes()) {
      o_.device_ops->sync();  // queued copies may still read the old buffer
      ids_dev_ = DeviceBuffer();
      ids_dev_ = o_.device_ops->alloc(bytes);
    }
  }
  inner_->begin_step(n_tokens);
}

RoutingExecutor::~RoutingExecutor() = default;

void RoutingExecutor::run(const MoeStep& req) {
  std::lock_guard lock(mu_);
  if (req.layer < 0 || req.layer >= o_.n_layer || req.top_k != o_.top_k)
    fail(ErrorKind::internal, "routing: request for layer {} top-{} (model: {} layers, top-{})", req.layer,
         req.top_k, o_.n_layer, o_.top_k);
  // A forward step may run twice (recorded, then eagerly when the recording failed): the second
  // run of a step's layer gets the ids of the first, so the generators advance once per step.
  auto& again = chosen_[static_cast<size_t>(req.layer)];
  if (step_ > 0 && again.step == step_ && again.ids.size() == static_cast<size_t>(req.n_tokens) * o_.top_k) {
    ids_ = again.ids;
  } else {
    choose(req);
    again = {step_, ids_};
  }
  MoeStep r = req;
  if (o_.device_ops) {
    // Device routing: the override's ids replace the router's in device memory; its weights stay,
    // in rank order, as without router matrices.
    const size_t bytes = ids_.size() * sizeof(int32_t);
    if (bytes > ids_dev_.bytes())
      fail(ErrorKind::internal, "routing: a step of {} tokens without begin_step", req.n_tokens);
    o_.device_ops->to_device(ids_dev_.data(), ids_.data(), bytes);
    r.expert_ids = static_cast<const int32_t*>(ids_dev_.data());
    inner_->run(r);
    return;
  }
  weights_from_router(req);
  r.expert_ids = ids_.data();
  r.expert_weights = weights_.data();
  inner_->run(r);
}

void RoutingExecutor::choose(const MoeStep& req) {
  const size_t k = static_cast<size_t>(req.top_k), n = static_cast<size_t>(req.n_tokens);
  const size_t l = static_cast<size_t>(req.layer);
  ids_.resize(n * k);
  for (size_t t = 0; t < n; ++t) {
    int32_t* row = ids_.data() + t * k;
    switch (o_.spec.mode) {
      case RoutingMode::model: break;
      case RoutingMode::uniform:
        for (size_t j = 0; j < k; ++j) {
          int32_t e;
          do e = static_cast<int32_t>(uniform_rng_[l].below(static_cast<uint32_t>(o_.n_expert)));
          while (std::find(row, row + j, e) != row + j);
          row[j] = e;
        }
        break;
      case RoutingMode::locality: locality_[l]->next(row); break;
      case RoutingMode::trace: {
        int64_t& pos = trace_pos_[l];
        if (pos >= trace_->tokens(req.layer)) {
          if (!warned_wrap_)
            log::warn("routing trace {} ran out of tokens at layer {} ({}); replaying it from the start",
                      o_.spec.trace_path, req.layer, pos);
          warned_wrap_ = true;
          pos = 0;
        }
        std::copy_n(trace_->ids[l].data() + static_cast<size_t>(pos) * k, k, row);
        ++pos;
        break;
      }
    }
  }
}

void RoutingExecutor::weights_from_router(const MoeStep& req) {
  const size_t k = static_cast<size_t>(req.top_k), n = static_cast<size_t>(req.n_tokens);
  weights_.resize(n * k);
  const WeightView* router = o_.routers.empty() ? nullptr : &o_.routers[static_cast<size_t>(req.layer)];
  if (!router || !router->data || router->rows != o_.n_expert || router->cols != req.n_embd) {
    // No usable router: the model's own weights, in rank order, go to the new ids.
    std::copy_n(req.expert_weights, n * k, weights_.data());
    return;
  }
  const size_t E = static_cast<size_t>(o_.n_expert);
  probs_.resize(n * E);
  // router · x for every token: (n_tokens, n_expert) logits, then softmax in place.
  cpu::matmul(router->type, router->data, router->rows, router->cols, req.x, req.n_embd, req.n_tokens,
              probs_.data(), static_cast<int64_t>(E));
  for (size_t t = 0; t < n; ++t) {
    float* p = probs_.data() + t * E;
    routing_softmax(p, o_.n_expert, p);
    const int32_t* row = ids_.data() + t * k;
    float* w = weights_.data() + t * k;
    if (std::equal(row, row + k, req.expert_ids + t * k)) {
      // The model's own choice (e.g. a replay of its recorded routing): its weights, exactly.
      std::copy_n(req.expert_weights + t * k, k, w);
      continue;
    }
    // Σ of the model's own weights keeps its scale: 1 when it renormalises, the kept probability
    // mass otherwise, times expert_weights_scale where the architecture has one.
    float model_sum = 0.0f, sum = 0.0f;
    for (size_t j = 0; j < k; ++j) {
      model_sum += req.expert_weights[t * k + j];
      sum += p[row[j]];
    }
    sum = std::max(sum, 6.103515625e-5f);  // as llama.cpp clamps its renormalisation
    // A renormalising model's weights sum to 1 up to rounding: then divide only, as moe_route
    // does, so replaying a model's own routing reproduces its weights bit for bit.
    const bool scaled = std::fabs(model_sum - 1.0f) > 1e-3f;
    for (size_t j = 0; j < k; ++j) w[j] = scaled ? p[row[j]] / sum * model_sum : p[row[j]] / sum;
  }
}

}  // namespace ferry
