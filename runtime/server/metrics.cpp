#include "runtime/server/metrics.hpp"

#include <fmt/format.h>

#include "runtime/server/api_error.hpp"
#include "runtime/server/routes.hpp"

namespace ferry::server {
namespace {

using nlohmann::json;

double ratio(double num, double den) {
  return den > 0 ? num / den : 0.0;
}

struct Writer {
  std::string out;
  void head(const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  template <typename T>
  void metric(const char* name, const char* type, const char* help, T value) {
    head(name, type, help);
    out += fmt::format("{} {}\n", name, value);
  }
};

}  // namespace

std::string prometheus_text(const SchedulerMetrics& s, const OffloadMetrics& o, int32_t n_slots) {
  Writer w;
  // llama-server's names and meanings (tools/server: metrics); the two throughput gauges are
  // averages since the start here (llama-server's reset at each scrape).
  w.metric("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
           s.prompt_tokens_total);
  w.metric("llamacpp:prompt_seconds_total", "counter", "Prompt process time",
           s.prompt_seconds_total);
  w.metric("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
           s.tokens_predicted_total);
  w.metric("llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time",
           s.tokens_predicted_seconds_total);
  w.metric("llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls",
           s.n_decode_total);
  w.metric("llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
           ratio(static_cast<double>(s.prompt_tokens_total), s.prompt_seconds_total));
  w.metric("llamacpp:predicted_tokens_seconds", "gauge",
           "Average generation throughput in tokens/s.",
           ratio(static_cast<double>(s.tokens_predicted_total), s.tokens_predicted_seconds_total));
  w.metric("llamacpp:requests_processing", "gauge", "Number of requests processing.",
           s.requests_processing);
  w.metric("llamacpp:requests_deferred", "gauge", "Number of requests deferred.",
           s.requests_deferred);
  // Ferry's own.
  w.metric("ferry_slots", "gauge", "Slots (-np).", n_slots);
  w.metric("ferry_requests_total", "counter", "Generation requests admitted.", s.requests_total);
  w.metric("ferry_requests_rejected_total", "counter",
           "Generation requests refused with 503 (slots and queue full).",
           s.requests_rejected_total);
  w.metric("ferry_requests_deferred_total", "counter",
           "Admitted requests that waited in the queue.", s.requests_deferred_total);
  w.metric("ferry_requests_cancelled_total", "counter",
           "Requests cancelled (client gone, shutdown).", s.requests_cancelled_total);
  if (!o.counted) return w.out;
  w.head("ferry_expert_hits_total", "counter", "Expert uses served from a VRAM slot, per layer.");
  for (size_t l = 0; l < o.layer_hits.size(); ++l)
    w.out += fmt::format("ferry_expert_hits_total{{layer=\"{}\"}} {}\n", l, o.layer_hits[l]);
  w.head("ferry_expert_misses_total", "counter",
         "Expert uses not resident in VRAM when needed, per layer.");
  for (size_t l = 0; l < o.layer_misses.size(); ++l)
    w.out += fmt::format("ferry_expert_misses_total{{layer=\"{}\"}} {}\n", l, o.layer_misses[l]);
  w.metric("ferry_cpu_experts_total", "counter", "Missed experts computed on the CPU.",
           o.cpu_experts);
  w.metric("ferry_h2d_bytes_total", "counter", "Bytes copied host to device.", o.h2d_bytes);
  w.metric("ferry_moe_tokens_total", "counter", "Tokens through the MoE layers.", o.tokens);
  w.metric("ferry_prefetch_issued_total", "counter", "Expert prefetches started.",
           o.prefetch_issued);
  w.metric("ferry_prefetch_used_total", "counter", "Prefetched experts used.", o.prefetch_used);
  w.metric("ferry_prefetch_wasted_total", "counter",
           "Prefetched experts evicted or dropped unused.", o.prefetch_wasted);
  w.head("ferry_gpu_wait_seconds_total", "counter", "Time the device's compute waited, by cause.");
  for (size_t c = 0; c < o.wait_seconds.size(); ++c)
    w.out += fmt::format("ferry_gpu_wait_seconds_total{{cause=\"{}\"}} {}\n", o.wait_cause_names[c],
                         o.wait_seconds[c]);
  if (o.offloading) {
    w.metric("ferry_vram_used_bytes", "gauge", "Device memory in use.", o.vram_used_bytes);
    w.metric("ferry_vram_peak_bytes", "gauge", "Device memory peak.", o.vram_peak_bytes);
    w.metric("ferry_vram_budget_bytes", "gauge", "Device memory budget (--vram).",
             o.vram_budget_bytes);
    w.metric("ferry_expert_cache_slots", "gauge", "Expert slots in VRAM.", o.cache_slots);
  }
  return w.out;
}

json metrics_json(const SchedulerMetrics& s, const OffloadMetrics& o, int32_t n_slots,
                  double uptime_s) {
  json j = {{"uptime_s", uptime_s},
            {"slots", n_slots},
            {"prompt_tokens_total", s.prompt_tokens_total},
            {"prompt_seconds_total", s.prompt_seconds_total},
            {"tokens_predicted_total", s.tokens_predicted_total},
            {"tokens_predicted_seconds_total", s.tokens_predicted_seconds_total},
            {"n_decode_total", s.n_decode_total},
            {"prompt_tokens_seconds",
             ratio(static_cast<double>(s.prompt_tokens_total), s.prompt_seconds_total)},
            {"predicted_tokens_seconds", ratio(static_cast<double>(s.tokens_predicted_total),
                                               s.tokens_predicted_seconds_total)},
            {"requests_processing", s.requests_processing},
            {"requests_deferred", s.requests_deferred},
            {"requests_total", s.requests_total},
            {"requests_rejected_total", s.requests_rejected_total},
            {"requests_deferred_total", s.requests_deferred_total},
            {"requests_cancelled_total", s.requests_cancelled_total}};
  json off = {{"counted", o.counted}, {"offloading", o.offloading}};
  if (o.counted) {
    json layers = json::array();
    for (size_t l = 0; l < o.layer_hits.size(); ++l)
      layers.push_back({{"hits", o.layer_hits[l]}, {"misses", o.layer_misses[l]}});
    json waits = json::object();
    for (size_t c = 0; c < o.wait_seconds.size(); ++c)
      waits[o.wait_cause_names[c]] = o.wait_seconds[c];
    off.update(
        {{"hits", o.hits},
         {"misses", o.misses},
         {"hit_rate", ratio(static_cast<double>(o.hits), static_cast<double>(o.hits + o.misses))},
         {"cpu_experts", o.cpu_experts},
         {"h2d_bytes", o.h2d_bytes},
         {"tokens", o.tokens},
         {"h2d_bytes_per_token",
          ratio(static_cast<double>(o.h2d_bytes), static_cast<double>(o.tokens))},
         {"prefetch_issued", o.prefetch_issued},
         {"prefetch_used", o.prefetch_used},
         {"prefetch_wasted", o.prefetch_wasted},
         {"wait_seconds", waits},
         {"vram_used_bytes", o.vram_used_bytes},
         {"vram_peak_bytes", o.vram_peak_bytes},
         {"vram_budget_bytes", o.vram_budget_bytes},
         {"cache_slots", o.cache_slots},
         {"layers", layers}});
  }
  j["offload"] = off;
  return j;
}

void add_metrics_routes(httplib::Server& svr, ServerContext& ctx) {
  svr.Get("/metrics", guarded(ctx, [&ctx](const httplib::Request&, httplib::Response& res) {
            if (!ctx.opt.metrics)
              throw ApiError(
                  501, "not_supported_error",
                  "This server does not support metrics endpoint. Start it with `--metrics`");
            Scheduler& s = ready_scheduler(ctx);
            res.status = 200;
            res.set_content(prometheus_text(s.metrics(), s.offload_metrics(), s.options().n_slots),
                            "text/plain; version=0.0.4");
          }));
  svr.Get(
      "/metrics.json", guarded(ctx, [&ctx](const httplib::Request&, httplib::Response& res) {
        Scheduler& s = ready_scheduler(ctx);
        const double up =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx.started).count();
        send_json(res, 200,
                  metrics_json(s.metrics(), s.offload_metrics(), s.options().n_slots, up));
      }));
}

}  // namespace ferry::server
