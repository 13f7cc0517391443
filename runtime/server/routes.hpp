#pragma once
// The routes of `ferry serve` (registered by HttpServer) and the helpers they share.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "runtime/server/server.hpp"

namespace ferry::server {

void add_openai_routes(httplib::Server& svr,
                       ServerContext& ctx);  // /v1/chat/completions, /v1/completions, /v1/models
void add_native_routes(httplib::Server& svr,
                       ServerContext& ctx);  // /health, /tokenize, /props, /slots, ...
void add_metrics_routes(httplib::Server& svr, ServerContext& ctx);  // /metrics, /metrics.json
void add_web_page(httplib::Server& svr);                            // /

// Runs a handler with llama-server's error envelope for whatever it throws.
httplib::Server::Handler guarded(
    ServerContext& ctx, std::function<void(const httplib::Request&, httplib::Response&)> fn);
void send_json(httplib::Response& res, int status, const nlohmann::json& body);
// The scheduler, or ApiError 503 "Loading model" while the model loads.
Scheduler& ready_scheduler(ServerContext& ctx);
// The model's id for /v1/models and responses.
std::string model_id(const ServerContext& ctx);

}  // namespace ferry::server
