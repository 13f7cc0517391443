// /v1/chat/completions, /v1/completions (plain and SSE) and /v1/models.
#include <functional>
#include <random>

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/server/api_error.hpp"
#include "runtime/server/prompt.hpp"
#include "runtime/server/responses.hpp"
#include "runtime/server/routes.hpp"
#include "runtime/server/sockets.hpp"

namespace ferry::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string random_id(const char* prefix) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The prompt's tokens, checked against the vocabulary and the slot's context. chat: the rendered
// prompt's text.
std::vector<int32_t> prompt_tokens(const GenRequest& r, const std::string& chat_prompt,
                                   LoadedModel& m, int64_t n_ctx_slot) {
  const Tokenizer& tok = m.tokenizer();
  std::vector<int32_t> tokens;
  if (r.api == Api::chat) {
    tokens = tok.encode(chat_prompt, /*add_bos=*/true, /*parse_special=*/true);
  } else if (r.prompt_is_tokens) {
    tokens = r.prompt_tokens;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] >= tok.n_vocab())
        bad_field(fmt::format("prompt[{}]", i), "token id {} is out of range [0, {})", tokens[i],
                  tok.n_vocab());
  } else {
    tokens = tok.encode(r.prompt_text, /*add_bos=*/true, /*parse_special=*/true);
  }
  if (tokens.empty()) bad_field(r.api == Api::chat ? "messages" : "prompt", "has no tokens");
  for (const auto& [id, bias] : r.logit_bias)
    if (id >= tok.n_vocab())
      bad_field("logit_bias", "token id {} is out of range [0, {})", id, tok.n_vocab());
  const int64_t n = static_cast<int64_t>(tokens.size());
  // At least one position must be left for the reply.
  if (n >= n_ctx_slot)
    throw ApiError(400, "exceed_context_size_error",
                   fmt::format("the request exceeds the available context size ({} prompt tokens, "
                               "the slot context is {}), "
                               "try increasing it (-c, or fewer slots -np)",
                               n, n_ctx_slot),
                   {{"n_prompt_tokens", n}, {"n_ctx", n_ctx_slot}});
  return tokens;
}

void throw_admit(Scheduler::Admit a, const Scheduler& s) {
  if (a == Scheduler::Admit::stopping)
    throw ApiError(503, "unavailable_error", "the server is shutting down");
  throw ApiError(
      503, "unavailable_error",
      fmt::format("the server is busy: {} slots running and {} requests queued (-np, --queue)",
                  s.options().n_slots, s.options().queue_max));
}

void error_from_event(const Event& e) {
  throw ApiError(e.status, e.error_type, e.message);
}

// tool_choice "required" and a reply without a call: Ferry has no grammar to force one, so the
// request fails rather than answering as if the model had called.
ApiError no_required_call() {
  return ApiError(500, "server_error",
                  "tool_choice \"required\": the model answered without a tool call (Ferry has no "
                  "grammar-constrained sampling to force one)");
}

// A whole response: wait for the events, then answer once. Nothing is written before the end, so
// the client's socket is polled meanwhile: a client that leaves cancels the job.
void answer_whole(ServerContext& ctx, const std::shared_ptr<Job>& job, const ReplyMeta& meta,
                  LoadedModel& m, const httplib::Request& req, httplib::Response& res) {
  constexpr auto kPeerPoll = std::chrono::milliseconds(100);
  const int fd = find_connection(ctx.port, req.remote_addr, req.remote_port);
  std::string text;
  std::vector<TokenLogprob> lps;
  auto next_poll = Clock::now() + kPeerPoll;
  for (;;) {
    std::optional<Event> e = job->events.wait(kPeerPoll);
    if (Clock::now() >= next_poll) {  // by the clock: text events may come faster than the poll
      next_poll = Clock::now() + kPeerPoll;
      if (peer_closed(fd)) {
        job->cancelled = true;
        throw ApiError(503, "unavailable_error",
                       "the client closed the connection");  // never delivered
      }
    }
    if (!e) continue;
    if (e->kind == Event::Kind::error) error_from_event(*e);
    text += e->text;
    lps.insert(lps.end(), e->logprobs.begin(), e->logprobs.end());
    if (e->kind == Event::Kind::done) {
      const json lp =
          job->req.logprobs ? logprobs_json(meta.api, m.tokenizer(), lps, 0) : json(nullptr);
      if (meta.api == Api::chat) {
        const chat::ChatMessage msg = chat::parse_chat_output(text, meta.parse);
        if (meta.call_required && msg.tool_calls.empty()) throw no_required_call();
        send_json(res, 200,
                  full_response(meta, text, chat_finish_reason(msg, e->finish_reason), e->stats,
                                lp, json(msg.to_json())));
        return;
      }
      send_json(res, 200,
                meta.api == Api::native
                    ? native_final(meta, text, *e, lp)
                    : full_response(meta, text, e->finish_reason, e->stats, lp));
      return;
    }
  }
}

struct StreamState {
  bool role_sent = false;
  size_t text_offset = 0;
  std::optional<chat::ChatOutputParser> parser;  // chat: the reply split as it streams
};

// chat: the parsed deltas of one event, then at the end the final chunk, usage and [DONE] (or
// the error of a required call not made). False when a write failed (as stream_step).
bool stream_chat(Job& job, const ReplyMeta& meta, StreamState& st, const Event& e, LoadedModel& m,
                 const std::function<bool(const json&)>& data, httplib::DataSink& sink) {
  if (!st.parser) st.parser.emplace(meta.parse);
  const json lp =
      job.req.logprobs ? logprobs_json(meta.api, m.tokenizer(), e.logprobs, 0) : json(nullptr);
  const chat::ChatDelta d = st.parser->feed(e.text);
  if ((!d.empty() || !lp.is_null()) &&
      !data(chat_delta_chunk(meta, json(chat::delta_to_json(d)), lp)))
    return false;
  if (e.kind != Event::Kind::done) return true;
  const chat::ChatDelta rest = st.parser->finish();
  if (!rest.empty() && !data(chat_delta_chunk(meta, json(chat::delta_to_json(rest)), nullptr)))
    return false;
  if (meta.call_required && st.parser->message().tool_calls.empty()) {
    // As an error event: the status line is sent already.
    if (!data(no_required_call().body())) return false;
    sink.done();
    return true;
  }
  if (!data(final_chunk(meta, chat_finish_reason(st.parser->message(), e.finish_reason),
                        e.stats)))
    return false;
  if (job.req.include_usage && !data(usage_chunk(meta, e.stats))) return false;
  const std::string end = "data: [DONE]\n\n";
  if (!sink.write(end.data(), end.size())) return false;
  sink.done();
  return true;
}

// One call of the SSE provider: the role chunk first, then the next event (or a ping when none
// came within ping_ms). False ends the response (a failed write, which cancels the job).
bool stream_step(Job& job, const ReplyMeta& meta, StreamState& st, int ping_ms, LoadedModel& m,
                 httplib::DataSink& sink) {
  auto send = [&](const std::string& s) {
    if (!sink.write(s.data(), s.size())) {
      job.cancelled = true;
      return false;
    }
    return true;
  };
  auto data = [&](const json& j) { return send("data: " + dump(j) + "\n\n"); };
  if (!st.role_sent && meta.api == Api::chat) {
    st.role_sent = true;
    if (!data(role_chunk(meta))) return false;
  }
  std::optional<Event> e = job.events.wait(std::chrono::milliseconds(ping_ms));
  if (!e) return send(": ping\n\n");  // an SSE comment: clients ignore it; a gone client fails it
  if (e->kind == Event::Kind::error) {
    // The status line is sent already: the error goes in the stream, as llama-server does.
    const bool ok = data(ApiError(e->status, e->error_type, e->message).body());
    if (ok) sink.done();
    return ok;
  }
  if (meta.api == Api::native) {  // llama-server's /completion: no [DONE], the last chunk says stop
    const json lp =
        job.req.logprobs ? logprobs_json(meta.api, m.tokenizer(), e->logprobs, 0) : json(nullptr);
    if (e->kind == Event::Kind::done) {
      if (!data(native_final(meta, e->text, *e, lp))) return false;
      sink.done();
      return true;
    }
    return data(native_chunk(e->text, lp));
  }
  if (meta.api == Api::chat) {
    if (stream_chat(job, meta, st, *e, m, data, sink)) return true;
    job.cancelled = true;
    return false;
  }
  if (!e->text.empty() || !e->logprobs.empty()) {
    const json lp = job.req.logprobs
                        ? logprobs_json(meta.api, m.tokenizer(), e->logprobs, st.text_offset)
                        : json(nullptr);
    st.text_offset += e->text.size();
    if (!data(delta_chunk(meta, e->text, lp))) return false;
  }
  if (e->kind == Event::Kind::done) {
    if (!data(final_chunk(meta, e->finish_reason, e->stats))) return false;
    if (job.req.include_usage && !data(usage_chunk(meta, e->stats))) return false;
    if (!send("data: [DONE]\n\n")) return false;
    sink.done();
  }
  return true;
}

// SSE: a chunk per piece of text, pings while there is nothing to send, [DONE] at the end. A
// failed write cancels the job.
void answer_stream(ServerContext& ctx, const std::shared_ptr<Job>& job, const ReplyMeta& meta,
                   LoadedModel& m, httplib::Response& res, std::shared_ptr<void> active) {
  auto st = std::make_shared<StreamState>();
  const int ping_ms = ctx.opt.ping_ms;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, meta, st, ping_ms, &m](size_t, httplib::DataSink& sink) {
        // Nothing may escape into httplib here: it calls the provider outside its own try.
        try {
          return stream_step(*job, meta, *st, ping_ms, m, sink);
        } catch (const std::exception& e) {
          log::warn("serve: stream of request {}: {}", job->id, e.what());
          job->cancelled = true;
          return false;
        }
      },
      [job, active](bool) {
        job->cancelled = true;
      });  // released: finished, or the connection is gone
}

void generate(ServerContext& ctx, Api api, const httplib::Request& req, httplib::Response& res) {
  Scheduler& sched = ready_scheduler(ctx);
  const json body = parse_body(req.body);
  auto job = std::make_shared<Job>();
  ReplyMeta meta;
  std::string chat_prompt;
  if (api == Api::chat) {
    // Parsed again with the key order kept: the tools' schemas reach the template as sent.
    job->req = parse_chat_request(body, nlohmann::ordered_json::parse(req.body), ctx.opt.defaults,
                                  ctx.opt.chat.defaults);
    RenderedChat rc = render_chat_prompt(ctx.opt.chat, job->req.chat);
    chat_prompt = std::move(rc.text);
    meta.parse = std::move(rc.parse);
    meta.call_required = job->req.chat.tool_choice == chat::ToolChoice::required;
  } else {
    job->req = api == Api::completion ? parse_completion_request(body, ctx.opt.defaults)
                                      : parse_native_request(body, ctx.opt.defaults);
  }
  LoadedModel& m = sched.model();
  if (!ctx.opt.force_tokens_file.empty())
    job->req.sampling.forced_tokens = read_forced_tokens(ctx.opt.force_tokens_file, m.tokenizer());
  job->prompt = prompt_tokens(job->req, chat_prompt, m, sched.options().n_ctx_slot);
  job->id = ctx.next_id.fetch_add(1);
  meta.api = api;
  meta.id = random_id(api == Api::chat ? "chatcmpl-" : "cmpl-");
  meta.created = unix_now();
  meta.model = job->req.model.empty() ? model_id(ctx) : job->req.model;
  if (ctx.shutting_down) throw_admit(Scheduler::Admit::stopping, sched);
  const Scheduler::Admit a = sched.submit(job);
  if (a != Scheduler::Admit::ok) throw_admit(a, sched);
  ++ctx.handlers_active;
  std::shared_ptr<void> active(nullptr, [&ctx](void*) { --ctx.handlers_active; });
  if (job->req.stream)
    answer_stream(ctx, job, meta, m, res, std::move(active));
  else
    answer_whole(ctx, job, meta, m, req, res);
}

}  // namespace

std::string model_id(const ServerContext& ctx) {
  if (!ctx.opt.model_alias.empty()) return ctx.opt.model_alias;
  const std::string& p = ctx.opt.model_path;
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

void add_openai_routes(httplib::Server& svr, ServerContext& ctx) {
  auto chat = guarded(ctx, [&ctx](const httplib::Request& q, httplib::Response& r) {
    generate(ctx, Api::chat, q, r);
  });
  auto completion = guarded(ctx, [&ctx](const httplib::Request& q, httplib::Response& r) {
    generate(ctx, Api::completion, q, r);
  });
  for (const char* p : {"/v1/chat/completions", "/chat/completions"}) svr.Post(p, chat);
  for (const char* p : {"/v1/completions", "/completions"}) svr.Post(p, completion);
  svr.Post("/completion", guarded(ctx, [&ctx](const httplib::Request& q, httplib::Response& r) {
             generate(ctx, Api::native, q, r);
           }));
  auto models = guarded(ctx, [&ctx](const httplib::Request&, httplib::Response& r) {
    json data = json::array();
    json entry = {{"id", model_id(ctx)},
                  {"object", "model"},
                  {"created", ctx.created_unix},
                  {"owned_by", "ferry"}};
    if (Scheduler* s = ctx.scheduler.load()) {
      const ModelConfig& c = s->model().config();
      entry["meta"] = {{"n_vocab", c.n_vocab},
                       {"n_ctx_train", c.n_ctx_train},
                       {"n_embd", c.n_embd},
                       {"size", s->model().file().file_size()}};
    }
    data.push_back(entry);
    send_json(r, 200, {{"object", "list"}, {"data", data}});
  });
  for (const char* p : {"/v1/models", "/models"}) svr.Get(p, models);
}

}  // namespace ferry::server
