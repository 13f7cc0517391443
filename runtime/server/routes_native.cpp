// llama-server's native endpoints: /health, /tokenize, /detokenize, /props, /slots,
// /apply-template.
#include "runtime/server/api_error.hpp"
#include "runtime/server/prompt.hpp"
#include "runtime/server/responses.hpp"
#include "runtime/server/routes.hpp"

namespace ferry::server {
namespace {

using nlohmann::json;

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

bool flag(const json& b, const char* name, bool def) {
  auto it = b.find(name);
  if (it == b.end() || it->is_null()) return def;
  if (!it->is_boolean()) bad_field(name, "must be true or false, got {}", it->type_name());
  return it->get<bool>();
}

json sampling_json(const SamplingParams& p, int32_t n_predict) {
  return {{"temperature", p.temp},
          {"top_k", p.top_k},
          {"top_p", p.top_p},
          {"min_p", p.min_p},
          {"repeat_penalty", p.repeat_penalty},
          {"repeat_last_n", p.repeat_last_n},
          {"presence_penalty", p.presence_penalty},
          {"frequency_penalty", p.frequency_penalty},
          {"seed", p.seed},
          {"n_predict", n_predict}};
}

}  // namespace

void add_native_routes(httplib::Server& svr, ServerContext& ctx) {
  auto health = guarded(ctx, [&ctx](const httplib::Request&, httplib::Response& res) {
    ready_scheduler(ctx);  // 503 "Loading model" until the model is up
    send_json(res, 200, {{"status", "ok"}});
  });
  svr.Get("/health", health);
  svr.Get("/v1/health", health);

  svr.Post("/tokenize", guarded(ctx, [&ctx](const httplib::Request& req, httplib::Response& res) {
             const Tokenizer& tok = ready_scheduler(ctx).model().tokenizer();
             const json b = parse_body(req.body);
             auto it = b.find("content");
             if (it == b.end() || !it->is_string()) bad_field("content", "must be a string");
             const std::vector<int32_t> ids =
                 tok.encode(it->get<std::string>(), flag(b, "add_special", false),
                            flag(b, "parse_special", true));
             json out = json::array();
             if (flag(b, "with_pieces", false)) {
               for (int32_t id : ids) {
                 const std::string piece = tok.token_bytes(id, /*render_special=*/true);
                 json p = json::array();
                 if (valid_utf8(piece)) {
                   out.push_back({{"id", id}, {"piece", piece}});
                 } else {
                   for (unsigned char c : piece) p.push_back(static_cast<int>(c));
                   out.push_back({{"id", id}, {"piece", p}});
                 }
               }
             } else {
               for (int32_t id : ids) out.push_back(id);
             }
             send_json(res, 200, {{"tokens", out}});
           }));

  svr.Post(
      "/detokenize", guarded(ctx, [&ctx](const httplib::Request& req, httplib::Response& res) {
        const Tokenizer& tok = ready_scheduler(ctx).model().tokenizer();
        const json b = parse_body(req.body);
        auto it = b.find("tokens");
        if (it == b.end() || !it->is_array()) bad_field("tokens", "must be an array of token ids");
        std::vector<int32_t> ids;
        for (size_t i = 0; i < it->size(); ++i) {
          const json& t = (*it)[i];
          if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab())
            bad_field(fmt::format("tokens[{}]", i), "must be a token id in [0, {})", tok.n_vocab());
          ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
        send_json(res, 200, {{"content", tok.decode(ids, /*render_special=*/true)}});
      }));

  svr.Post("/apply-template",
           guarded(ctx, [&ctx](const httplib::Request& req, httplib::Response& res) {
             ready_scheduler(ctx);
             const json b = parse_body(req.body);
             (void)parse_messages(b);  // the same checks (and messages) as a chat request
             const chat::ChatRequest r =
                 parse_chat_fields(nlohmann::ordered_json::parse(req.body), ctx.opt.chat.defaults);
             send_json(res, 200, {{"prompt", render_chat_prompt(ctx.opt.chat, r).text}});
           }));

  svr.Get("/props", guarded(ctx, [&ctx](const httplib::Request&, httplib::Response& res) {
            Scheduler& s = ready_scheduler(ctx);
            const ServerOptions& o = ctx.opt;
            json gen = {{"n_ctx", s.options().n_ctx_slot},
                        {"params", sampling_json(o.defaults.sampling, o.defaults.n_predict)}};
            send_json(res, 200,
                      {{"default_generation_settings", gen},
                       {"total_slots", s.options().n_slots},
                       {"queue_size", s.options().queue_max},
                       {"model_path", o.model_path},
                       {"model_alias", model_id(ctx)},
                       {"chat_template", o.chat.source},
                       // Ferry's: where it came from ("gguf", "file", "chatml-fallback").
                       {"chat_template_origin", template_origin_name(o.chat.origin)},
                       {"bos_token", o.chat.defaults.bos_token},
                       {"eos_token", o.chat.defaults.eos_token},
                       {"modalities", {{"vision", false}, {"audio", false}}},
                       {"build_info", "ferry"}});
          }));

  svr.Get("/slots", guarded(ctx, [&ctx](const httplib::Request&, httplib::Response& res) {
            Scheduler& s = ready_scheduler(ctx);
            json out = json::array();
            for (const SlotInfo& i : s.slots())
              out.push_back({{"id", i.id},
                             {"n_ctx", i.n_ctx},
                             {"is_processing", i.is_processing},
                             {"id_task", i.id_task},
                             {"n_prompt_tokens", i.n_prompt_tokens},
                             {"n_prompt_tokens_cache", i.n_cached},
                             {"n_cache_tokens", i.n_cache_tokens},
                             {"n_ctx_checkpoints", i.n_checkpoints},
                             {"ctx_checkpoints_bytes", i.checkpoint_bytes},
                             {"next_token", {{"n_decoded", i.n_decoded}}}});
            send_json(res, 200, out);
          }));
}

}  // namespace ferry::server
