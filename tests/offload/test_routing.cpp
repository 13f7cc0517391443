// Routing overrides: locality statistics against the published Qwen3-30B-A3B figures, uniform
// routing, router-derived weights, trace record → replay, and trace file errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

#include "runtime/moe/observers.hpp"
#include "runtime/moe/routing.hpp"
#include "runtime/core/error.hpp"

namespace fs = std::filesystem;
using namespace ferry;

namespace {

// Records every request it receives (ids and weights copied).
class CaptureExecutor final : public MoeExecutor {
 public:
  struct Step {
    int32_t layer, n_tokens;
    std::vector<int32_t> ids;
    std::vector<float> weights;
  };
  std::vector<Step>* steps;
  explicit CaptureExecutor(std::vector<Step>* s) : steps(s) {}
  void run(const MoeStep& r) override {
    const size_t n = static_cast<size_t>(r.n_tokens) * static_cast<size_t>(r.top_k);
    steps->push_back({r.layer, r.n_tokens, {r.expert_ids, r.expert_ids + n}, {r.expert_weights, r.expert_weights + n}});
    if (observed()) observers_->routing(r);  // as every executor reports what it computed
  }
};

struct LocalityStats {
  double repeat_next = 0, recur_window = 0, top_half_share = 0;
};

// The three published statistics of one layer's token sequence (ids: (T, k)).
LocalityStats measure(const std::vector<int32_t>& ids, int32_t T, int32_t k, int32_t n_expert, int32_t window) {
  LocalityStats s;
  int64_t rep = 0, rec = 0, n_rep = 0, n_rec = 0;
  for (int32_t t = 1; t < T; ++t) {
    for (int32_t j = 0; j < k; ++j) {
      const int32_t e = ids[static_cast<size_t>(t * k + j)];
      bool in_prev = false, in_window = false;
      for (int32_t d = 1; d <= window && t - d >= 0; ++d) {
        const auto* row = &ids[static_cast<size_t>((t - d) * k)];
        const bool hit = std::find(row, row + k, e) != row + k;
        if (d == 1) in_prev = hit;
        in_window = in_window || hit;
      }
      rep += in_prev;
      ++n_rep;
      if (t >= window) {
        rec += in_window;
        ++n_rec;
      }
    }
  }
  std::vector<int64_t> count(static_cast<size_t>(n_expert), 0);
  for (int32_t e : ids) ++count[static_cast<size_t>(e)];
  std::sort(count.begin(), count.end(), std::greater<>());
  const int64_t total = std::accumulate(count.begin(), count.end(), int64_t{0});
  const int64_t top = std::accumulate(count.begin(), count.begin() + n_expert / 2, int64_t{0});
  s.repeat_next = double(rep) / double(n_rep);
  s.recur_window = double(rec) / double(n_rec);
  s.top_half_share = double(top) / double(total);
  return s;
}

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("ferry-test-routing-" + std::to_string(::getpid()) + "-" + name)).string();
}

// Drives n_steps single-token MoE steps over all layers through a RoutingExecutor.
struct Harness {
  int32_t n_layer, n_expert, top_k, n_embd;
  std::vector<std::vector<float>> router_data;
  std::vector<WeightView> routers;
  Harness(int32_t L, int32_t E, int32_t k, int32_t d) : n_layer(L), n_expert(E), top_k(k), n_embd(d) {
    for (int32_t l = 0; l < L; ++l) {
      router_data.push_back(random_vec(static_cast<size_t>(E * d), 100 + l));
      routers.push_back({router_data.back().data(), GgmlType::F32, E, d});
    }
  }
  RoutingOptions options(const std::string& spec) const {
    RoutingOptions o;
    o.spec = parse_routing_spec(spec, 7);
    o.routers = routers;
    o.n_layer = n_layer;
    o.n_expert = n_expert;
    o.top_k = top_k;
    return o;
  }
  // Feeds tokens in batches of `batch` with the "model's" routing = first top_k ids by index of a
  // random permutation (any valid choice will do), weights 1/k.
  void drive(MoeExecutor& ex, int32_t n_tokens, int32_t batch, uint32_t seed) const {
    std::mt19937 g(seed);
    for (int32_t t0 = 0; t0 < n_tokens; t0 += batch) {
      const int32_t nb = std::min(batch, n_tokens - t0);
      for (int32_t l = 0; l < n_layer; ++l) {
        auto x = random_vec(static_cast<size_t>(nb * n_embd), g());
        std::vector<int32_t> ids(static_cast<size_t>(nb * top_k));
        std::vector<float> w(ids.size(), 1.0f / static_cast<float>(top_k));
        for (int32_t t = 0; t < nb; ++t) {
          std::vector<int32_t> perm(static_cast<size_t>(n_expert));
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), g);
          std::copy_n(perm.begin(), top_k, ids.begin() + t * top_k);
        }
        std::vector<float> out(static_cast<size_t>(nb * n_embd));
        MoeStep r;
        r.layer = l;
        r.n_tokens = nb;
        r.n_embd = n_embd;
        r.top_k = top_k;
        r.x = x.data();
        r.expert_ids = ids.data();
        r.expert_weights = w.data();
        r.out = out.data();
        ex.run(r);
      }
    }
  }
};

std::vector<int32_t> layer_ids(const std::vector<CaptureExecutor::Step>& steps, int32_t layer) {
  std::vector<int32_t> ids;
  for (const auto& s : steps)
    if (s.layer == layer) ids.insert(ids.end(), s.ids.begin(), s.ids.end());
  return ids;
}

}  // namespace

TEST(Routing, ParseSpec) {
  EXPECT_EQ(parse_routing_spec("model").mode, RoutingMode::model);
  EXPECT_EQ(parse_routing_spec("uniform").mode, RoutingMode::uniform);
  EXPECT_EQ(parse_routing_spec("locality").mode, RoutingMode::locality);
  const auto t = parse_routing_spec("trace:/a/b.frrt");
  EXPECT_EQ(t.mode, RoutingMode::trace);
  EXPECT_EQ(t.trace_path, "/a/b.frrt");
  EXPECT_THROW(parse_routing_spec("trace:"), Error);
  EXPECT_THROW(parse_routing_spec("random"), Error);
}

// 4096 tokens × 48 layers of Qwen3-30B-A3B's shape (128 experts, top-8): each layer's measured
// statistics must be close to the published ones, and their mean closer still.
TEST(Routing, LocalityMatchesPublishedStatistics) {
  constexpr int32_t T = 4096, L = 48, E = 128, k = 8;
  double sum_rep = 0, sum_rec = 0, sum_top = 0;
  for (int32_t l = 0; l < L; ++l) {
    LocalityRouting gen(E, k, 1000 + l);
    std::vector<int32_t> ids(static_cast<size_t>(T * k));
    for (int32_t t = 0; t < T; ++t) {
      gen.next(&ids[static_cast<size_t>(t * k)]);
      const std::set<int32_t> distinct(ids.begin() + t * k, ids.begin() + (t + 1) * k);
      ASSERT_EQ(distinct.size(), size_t(k));
      ASSERT_GE(*distinct.begin(), 0);
      ASSERT_LT(*distinct.rbegin(), E);
    }
    const auto s = measure(ids, T, k, E, 8);
    EXPECT_NEAR(s.repeat_next, 0.45, 0.03) << "layer " << l;
    EXPECT_NEAR(s.recur_window, 0.80, 0.03) << "layer " << l;
    EXPECT_NEAR(s.top_half_share, 0.90, 0.03) << "layer " << l;
    sum_rep += s.repeat_next;
    sum_rec += s.recur_window;
    sum_top += s.top_half_share;
  }
  EXPECT_NEAR(sum_rep / L, 0.45, 0.01);
  EXPECT_NEAR(sum_rec / L, 0.80, 0.01);
  EXPECT_NEAR(sum_top / L, 0.90, 0.02);
  std::printf("locality (128 experts, top-8, %d tokens x %d layers): repeat-next %.3f, recur-in-8 %.3f, "
              "top-half share %.3f\n", T, L, sum_rep / L, sum_rec / L, sum_top / L);
}

// The same targets hold for the Qwen3.5-35B-A3B shape (256 experts) thanks to the feedback.
TEST(Routing, LocalityHoldsFor256Experts) {
  constexpr int32_t T = 4096, E = 256, k = 8;
  LocalityRouting gen(E, k, 42);
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  for (int32_t t = 0; t < T; ++t) gen.next(&ids[static_cast<size_t>(t * k)]);
  const auto s = measure(ids, T, k, E, 8);
  EXPECT_NEAR(s.repeat_next, 0.45, 0.03);
  EXPECT_NEAR(s.recur_window, 0.80, 0.03);
  EXPECT_NEAR(s.top_half_share, 0.90, 0.04);
}

// Uniform routing: no locality beyond chance (k/E) and no skew; distinct valid ids.
TEST(Routing, UniformHasNoLocality) {
  Harness h(2, 64, 4, 16);
  std::vector<CaptureExecutor::Step> steps;
  RoutingExecutor ex(std::make_unique<CaptureExecutor>(&steps), h.options("uniform"));
  h.drive(ex, 2000, 1, 3);
  const auto ids = layer_ids(steps, 1);
  const auto s = measure(ids, 2000, 4, 64, 8);
  EXPECT_NEAR(s.repeat_next, 4.0 / 64, 0.02);
  EXPECT_LT(s.top_half_share, 0.6);
}

// A forward step that runs twice (recorded, then eagerly after a failed recording) gets the same
// override both times, and the generator advances once per step: the sequence is the one of a
// run without repeats. Without begin_step (no step counting) every request chooses anew.
TEST(Routing, ARepeatedStepKeepsItsChoice) {
  for (const char* mode : {"uniform", "locality"}) {
    Harness h(2, 64, 4, 16);
    std::vector<CaptureExecutor::Step> once, twice, uncounted;
    RoutingExecutor a(std::make_unique<CaptureExecutor>(&once), h.options(mode));
    RoutingExecutor b(std::make_unique<CaptureExecutor>(&twice), h.options(mode));
    RoutingExecutor c(std::make_unique<CaptureExecutor>(&uncounted), h.options(mode));
    const auto x = random_vec(16, 3);
    std::vector<int32_t> ids = {0, 1, 2, 3};
    std::vector<float> w(4, 0.25f), out(16);
    for (int step = 0; step < 20; ++step) {
      a.begin_step(1);
      b.begin_step(1);
      for (int32_t l = 0; l < 2; ++l) {
        MoeStep r{l, 1, 16, 4, x.data(), ids.data(), w.data(), out.data()};
        a.run(r);
        b.run(r);
        b.run(r);  // the same step's layer again
        c.run(r);
        c.run(r);
      }
    }
    ASSERT_EQ(twice.size(), 2 * once.size());
    for (size_t i = 0; i < once.size(); ++i) {
      EXPECT_EQ(twice[2 * i].ids, once[i].ids) << mode << " " << i;
      EXPECT_EQ(twice[2 * i + 1].ids, once[i].ids) << mode << " " << i;
    }
    // Uncounted: consecutive requests are separate choices (they differ somewhere).
    bool differ = false;
    for (size_t i = 0; i + 1 < uncounted.size(); i += 2) differ = differ || uncounted[i].ids != uncounted[i + 1].ids;
    EXPECT_TRUE(differ) << mode;
  }
}

// Weights of an overridden choice are the model's softmax probabilities of the chosen ids,
// renormalised, scaled by the sum of the model's own weights.
TEST(Routing, WeightsComeFromTheRouter) {
  Harness h(1, 32, 4, 24);
  std::vector<CaptureExecutor::Step> steps;
  RoutingExecutor ex(std::make_unique<CaptureExecutor>(&steps), h.options("locality"));
  const auto x = random_vec(24 * 3, 9);
  std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<float> w(12, 0.5f);  // model's weights sum to 2 per token (a scaled router)
  std::vector<float> out(24 * 3);
  MoeStep r{0, 3, 24, 4, x.data(), ids.data(), w.data(), out.data()};
  ex.run(r);
  ASSERT_EQ(steps.size(), 1u);
  for (int32_t t = 0; t < 3; ++t) {
    std::vector<double> logit(32);
    for (int32_t e = 0; e < 32; ++e)
      for (int32_t c = 0; c < 24; ++c) logit[e] += double(h.router_data[0][e * 24 + c]) * x[t * 24 + c];
    const double mx = *std::max_element(logit.begin(), logit.end());
    double z = 0, zsel = 0;
    for (double v : logit) z += std::exp(v - mx);
    for (int32_t j = 0; j < 4; ++j) zsel += std::exp(logit[steps[0].ids[t * 4 + j]] - mx) / z;
    for (int32_t j = 0; j < 4; ++j) {
      const double p = std::exp(logit[steps[0].ids[t * 4 + j]] - mx) / z;
      EXPECT_NEAR(steps[0].weights[t * 4 + j], 2.0 * p / zsel, 1e-5);
    }
  }
}

// Record with locality in prefill batches of 5, replay one token at a time: identical ids per
// layer and token; the model's weights are recorded exactly under --routing model.
TEST(Routing, TraceReplayReproducesRecordedIds) {
  Harness h(3, 16, 4, 8);
  const std::string path = tmp_path("rec.frrt");
  std::vector<CaptureExecutor::Step> recorded, replayed, model_steps;
  {
    // --record-routing is an observer of the executor behind the override: it records the ids
    // actually computed.
    RoutingRecorder rec(path, RoutingTraceHeader{3, 16, 4});
    ObserverSet obs;
    obs.add(&rec);
    RoutingExecutor ex(std::make_unique<CaptureExecutor>(&recorded), h.options("locality"));
    ex.set_observers(&obs);
    h.drive(ex, 40, 5, 11);
    EXPECT_FALSE(fs::exists(path));  // only renamed into place by finish()
    rec.finish();
  }
  ASSERT_TRUE(fs::exists(path));
  const auto trace = read_routing_trace(path);
  EXPECT_EQ(trace.header.n_layer, 3);
  EXPECT_EQ(trace.tokens(2), 40);
  {
    RoutingExecutor ex(std::make_unique<CaptureExecutor>(&replayed), h.options("trace:" + path));
    h.drive(ex, 40, 1, 12);
  }
  for (int32_t l = 0; l < 3; ++l) {
    EXPECT_EQ(layer_ids(recorded, l), layer_ids(replayed, l)) << "layer " << l;
    EXPECT_EQ(layer_ids(recorded, l), trace.ids[static_cast<size_t>(l)]);
  }
  // Recording the model's own routing (no override) keeps its choice and weights bit for bit.
  const std::string path2 = tmp_path("model.frrt");
  {
    RoutingRecorder rec(path2, RoutingTraceHeader{3, 16, 4});
    ObserverSet obs;
    obs.add(&rec);
    CaptureExecutor ex(&model_steps);
    ex.set_observers(&obs);
    h.drive(ex, 6, 3, 13);
    rec.finish();
  }
  const auto t2 = read_routing_trace(path2);
  EXPECT_EQ(layer_ids(model_steps, 1), t2.ids[1]);
  std::vector<float> w1;
  for (const auto& s : model_steps)
    if (s.layer == 1) w1.insert(w1.end(), s.weights.begin(), s.weights.end());
  EXPECT_EQ(w1, t2.weights[1]);
  fs::remove(path);
  fs::remove(path2);
}

TEST(Routing, TraceErrors) {
  Harness h(2, 16, 4, 8);
  const std::string path = tmp_path("bad.frrt");
  {
    std::ofstream f(path, std::ios::binary);
    f << "NOPE and some more bytes to pass the size check";
  }
  EXPECT_THROW(read_routing_trace(path), Error);
  // A valid trace of another shape is refused by the executor.
  {
    RoutingTraceWriter w(path, {2, 16, 2});
    const int32_t ids[2] = {1, 2};
    const float ws[2] = {0.5f, 0.5f};
    w.append(0, 1, ids, ws);
    w.append(1, 1, ids, ws);
    w.finish();
  }
  std::vector<CaptureExecutor::Step> steps;
  EXPECT_THROW(RoutingExecutor(std::make_unique<CaptureExecutor>(&steps), h.options("trace:" + path)), Error);
  // Truncated record, out-of-range id, repeated id.
  {
    RoutingTraceWriter w(path, {2, 16, 4});
    const int32_t ids[4] = {1, 2, 3, 4};
    const float ws[4] = {};
    w.append(0, 1, ids, ws);
    w.finish();
  }
  fs::resize_file(path, fs::file_size(path) - 3);
  EXPECT_THROW(read_routing_trace(path), Error);
  for (const int32_t bad : {16, 2}) {
    {
      RoutingTraceWriter w(path, {2, 16, 4});
      const int32_t ids[4] = {1, 2, bad, 4};
      const float ws[4] = {};
      w.append(0, 1, ids, ws);
      w.finish();
    }
    EXPECT_THROW(read_routing_trace(path), Error) << bad;
  }
  EXPECT_THROW(read_routing_trace(path + ".missing"), Error);
  // Every truncation of a valid two-record trace either ends on a record boundary (and reads the
  // records before it) or is refused; none reads past the data.
  {
    RoutingTraceWriter w(path, {2, 16, 4});
    const int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const float ws[8] = {};
    w.append(0, 2, ids, ws);
    w.append(1, 1, ids, ws);
    w.finish();
  }
  const auto full = fs::file_size(path);
  std::string bytes(full, '\0');
  std::ifstream(path, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(full));
  const std::string cut = tmp_path("cut.frrt");
  int accepted = 0;
  for (size_t n = 0; n < full; ++n) {
    std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(n));
    try {
      const auto t = read_routing_trace(cut);
      ++accepted;
      EXPECT_TRUE(n == 24 || n == 24 + 8 + 2 * 4 * 8) << n;
      EXPECT_EQ(t.tokens(0), n == 24 ? 0 : 2);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::format) << n;
    }
  }
  EXPECT_EQ(accepted, 2);
  fs::remove(cut);
  fs::remove(path);
}
