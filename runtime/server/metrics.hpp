#pragma once
// /metrics in Prometheus' text format — llama-server's names verbatim (its dashboards work
// unchanged) plus Ferry's offload counters — and its JSON twin for the web page.
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/server/offload_metrics.hpp"
#include "runtime/server/scheduler.hpp"

namespace ferry::server {

std::string prometheus_text(const SchedulerMetrics& s, const OffloadMetrics& o, int32_t n_slots);
nlohmann::json metrics_json(const SchedulerMetrics& s, const OffloadMetrics& o, int32_t n_slots,
                            double uptime_s);

}  // namespace ferry::server
