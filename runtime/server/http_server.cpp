#include <csignal>

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/server/api_error.hpp"
#include "runtime/server/responses.hpp"
#include "runtime/server/routes.hpp"
#include "runtime/server/server.hpp"
#include "runtime/server/task_pool.hpp"

namespace ferry::server {

using nlohmann::json;

namespace {

// Reachable without a key, as llama-server's public endpoints (a load balancer's probe, the page
// that then asks for the key).
bool is_public(const std::string& path) {
  return path == "/health" || path == "/v1/health" || path == "/" || path == "/index.html" ||
         path == "/models" || path == "/v1/models";
}

std::string given_key(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  static constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() > kBearer.size() && std::string_view(auth).substr(0, kBearer.size()) == kBearer)
    return auth.substr(kBearer.size());
  return req.get_header_value("X-Api-Key");
}

}  // namespace

bool key_matches(const std::string& given, const std::vector<std::string>& keys) {
  bool any = false;
  for (const std::string& k : keys) {
    // Every byte of the longer one is compared, whatever matches: the time depends on lengths only.
    const size_t n = std::max(given.size(), k.size());
    unsigned diff = given.size() == k.size() ? 0u : 1u;
    for (size_t i = 0; i < n; ++i) {
      const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
      const unsigned char b = i < k.size() ? static_cast<unsigned char>(k[i]) : 0;
      diff |= static_cast<unsigned>(a ^ b);
    }
    any |= diff == 0;
  }
  return any;
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json; charset=utf-8");
}

Scheduler& ready_scheduler(ServerContext& ctx) {
  Scheduler* s = ctx.scheduler.load();
  if (!s) throw ApiError(503, "unavailable_error", "Loading model");
  return *s;
}

httplib::Server::Handler guarded(
    ServerContext& ctx, std::function<void(const httplib::Request&, httplib::Response&)> fn) {
  return [&ctx, fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const ApiError& e) {
      send_json(res, e.status(), e.body());
    } catch (const Error& e) {
      // The library's typed errors: bad arguments are the client's, the rest the server's.
      const int status =
          e.kind() == ErrorKind::invalid_arg || e.kind() == ErrorKind::context ? 400 : 500;
      send_json(res, status, error_body(status, e.what()));
    } catch (const std::exception& e) {
      log::warn("serve: {} {}: {}", req.method, req.path, e.what());
      send_json(res, 500, error_body(500, fmt::format("internal error: {}", e.what())));
    }
    (void)ctx;
  };
}

struct HttpServer::Impl {
  ServerContext& ctx;
  httplib::Server svr;
  explicit Impl(ServerContext& c) : ctx(c) {}
};

HttpServer::HttpServer(ServerContext& ctx) : impl_(std::make_unique<Impl>(ctx)) {
  httplib::Server& svr = impl_->svr;
  const ServerOptions& o = ctx.opt;
  // Threads: every slot and queued request holds one while it waits or streams, and the clients
  // refused with 503 or probing /health need some too: twice the admitted count plus a margin
  // are kept (a burst then reuses them, so memory stays flat), and past that the pool grows
  // (task_pool.hpp) rather than queue a /health behind streams.
  const size_t admitted = static_cast<size_t>(o.n_slots + o.queue_max);
  svr.new_task_queue = [admitted] {
    return new GrowingTaskPool(2 * admitted + 16, 4 * admitted + 64);
  };
  svr.set_payload_max_length(o.max_body_bytes);
  svr.set_read_timeout(o.timeout_s, 0);
  svr.set_write_timeout(o.timeout_s, 0);
  svr.set_default_headers({{"Server", "ferry"}, {"Access-Control-Allow-Origin", "*"}});
  svr.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "OPTIONS") {  // CORS preflight of browser clients
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key");
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (ctx.opt.api_keys.empty() || is_public(req.path))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string key = given_key(req);
    if (key.empty() || !key_matches(key, ctx.opt.api_keys)) {
      send_json(
          res, 401,
          ApiError(401, "authentication_error", key.empty() ? "Missing API key" : "Invalid API key")
              .body());
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler(httplib::Server::HandlerWithResponse(
      [&ctx](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours already
        std::string msg;
        switch (res.status) {
          case 404:
            msg = "File Not Found";
            break;
          case 413:
            // cpp-httplib 0.11 caps form-encoded bodies at 8 KiB whatever the limit: curl -d sends
            // that content type unless told otherwise.
            if (req.get_header_value("Content-Type") == "application/x-www-form-urlencoded")
              msg =
                  "a body sent as application/x-www-form-urlencoded is limited to 8 KiB: send "
                  "Content-Type: application/json";
            else
              msg = fmt::format("the request body is larger than --max-body ({} bytes)",
                                ctx.opt.max_body_bytes);
            break;
          case 400:
            msg = "malformed HTTP request";
            break;
          default:
            msg = fmt::format("HTTP error {}", res.status);
            break;
        }
        send_json(res, res.status, error_body(res.status, msg));
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_json(res, 500, error_body(500, "internal error: " + what));
      });
  add_openai_routes(svr, ctx);
  add_native_routes(svr, ctx);
  add_metrics_routes(svr, ctx);
  add_web_page(svr);
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const ServerOptions& o = impl_->ctx.opt;
  if (o.port == 0) {
    const int p = impl_->svr.bind_to_any_port(o.host);
    if (p <= 0) fail(ErrorKind::io, "cannot bind {} (any port)", o.host);
    return p;
  }
  if (!impl_->svr.bind_to_port(o.host, o.port))
    fail(ErrorKind::io, "cannot bind {}:{} (in use, or not an address of this machine)", o.host,
         o.port);
  return o.port;
}

void HttpServer::listen() {
  impl_->svr.listen_after_bind();
}

void HttpServer::stop() {
  impl_->svr.stop();
}

}  // namespace ferry::server
