#include "runtime/server/responses.hpp"

namespace ferry::server {

using nlohmann::json;

namespace {

constexpr const char* kFingerprint = "ferry";

json base(const ReplyMeta& m, bool chunk) {
  const char* object = m.api == Api::chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                          : "text_completion";
  return {{"id", m.id},
          {"object", object},
          {"created", m.created},
          {"model", m.model},
          {"system_fingerprint", kFingerprint}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json timings_json(const ReplyStats& s) {
  const auto per_token = [](double ms, int64_t n) {
    return n > 0 ? ms / static_cast<double>(n) : 0.0;
  };
  const auto per_second = [](double ms, int64_t n) {
    return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0;
  };
  return {{"cache_n", s.n_cached},
          {"prompt_n", s.n_prompt},
          {"prompt_ms", s.prompt_ms},
          {"prompt_per_token_ms", per_token(s.prompt_ms, s.n_prompt)},
          {"prompt_per_second", per_second(s.prompt_ms, s.n_prompt)},
          {"predicted_n", s.n_predicted},
          {"predicted_ms", s.predicted_ms},
          {"predicted_per_token_ms", per_token(s.predicted_ms, s.n_predicted)},
          {"predicted_per_second", per_second(s.predicted_ms, s.n_predicted)}};
}

json usage_json(const ReplyStats& s) {
  // OpenAI's prompt_tokens counts the cached ones too (cached_tokens says how many); timings'
  // prompt_n only those evaluated, as llama-server.
  return {{"prompt_tokens", s.n_prompt + s.n_cached},
          {"completion_tokens", s.n_predicted},
          {"total_tokens", s.n_prompt + s.n_cached + s.n_predicted},
          {"prompt_tokens_details", {{"cached_tokens", s.n_cached}}}};
}

json logprobs_json(Api api, const Tokenizer& tok, const std::vector<TokenLogprob>& lp,
                   size_t text_offset0) {
  if (api == Api::native) {  // llama-server's completion_probabilities
    json out = json::array();
    for (const TokenLogprob& t : lp) {
      const std::string piece = tok.token_bytes(t.id);
      json top = json::array();
      for (const auto& [id, l] : t.top) {
        const std::string p = tok.token_bytes(id);
        top.push_back({{"id", id}, {"token", p}, {"logprob", l}, {"bytes", bytes_of(p)}});
      }
      out.push_back({{"id", t.id},
                     {"token", piece},
                     {"logprob", t.logprob},
                     {"bytes", bytes_of(piece)},
                     {"top_logprobs", top}});
    }
    return out;
  }
  if (api == Api::chat) {
    json content = json::array();
    for (const TokenLogprob& t : lp) {
      const std::string piece = tok.token_bytes(t.id);
      json top = json::array();
      for (const auto& [id, l] : t.top) {
        const std::string p = tok.token_bytes(id);
        top.push_back({{"token", p}, {"logprob", l}, {"bytes", bytes_of(p)}});
      }
      content.push_back({{"token", piece},
                         {"logprob", t.logprob},
                         {"bytes", bytes_of(piece)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  size_t offset = text_offset0;
  for (const TokenLogprob& t : lp) {
    const std::string piece = tok.token_bytes(t.id);
    tokens.push_back(piece);
    token_logprobs.push_back(t.logprob);
    json alts = json::object();
    for (const auto& [id, l] : t.top) alts[tok.token_bytes(id)] = l;
    top.push_back(alts);
    offsets.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json full_response(const ReplyMeta& m, const std::string& text, const std::string& finish_reason,
                   const ReplyStats& s, const json& logprobs, const json& message) {
  json r = base(m, false);
  json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", logprobs}};
  if (m.api == Api::chat)
    choice["message"] =
        message.is_null() ? json{{"role", "assistant"}, {"content", text}} : message;
  else
    choice["text"] = text;
  r["choices"] = json::array({choice});
  r["usage"] = usage_json(s);
  r["timings"] = timings_json(s);
  return r;
}

json role_chunk(const ReplyMeta& m) {
  json r = base(m, true);
  r["choices"] = json::array({{{"index", 0},
                               {"finish_reason", nullptr},
                               {"delta", {{"role", "assistant"}, {"content", nullptr}}}}});
  return r;
}

json delta_chunk(const ReplyMeta& m, const std::string& text, const json& logprobs) {
  json r = base(m, true);
  json choice = {{"index", 0}, {"finish_reason", nullptr}, {"logprobs", logprobs}};
  if (m.api == Api::chat)
    choice["delta"] = {{"content", text}};
  else
    choice["text"] = text;
  r["choices"] = json::array({choice});
  return r;
}

json chat_delta_chunk(const ReplyMeta& m, const json& delta, const json& logprobs) {
  json r = base(m, true);
  r["choices"] = json::array(
      {{{"index", 0}, {"finish_reason", nullptr}, {"logprobs", logprobs}, {"delta", delta}}});
  return r;
}

std::string chat_finish_reason(const chat::ChatMessage& msg, const std::string& finish_reason) {
  return !msg.tool_calls.empty() && finish_reason == "stop" ? "tool_calls" : finish_reason;
}

json final_chunk(const ReplyMeta& m, const std::string& finish_reason, const ReplyStats& s) {
  json r = base(m, true);
  json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (m.api == Api::chat)
    choice["delta"] = json::object();
  else
    choice["text"] = "";
  r["choices"] = json::array({choice});
  r["timings"] = timings_json(s);
  return r;
}

json native_chunk(const std::string& text, const json& probs) {
  json r = {{"index", 0}, {"content", text}, {"stop", false}};
  if (!probs.is_null()) r["completion_probabilities"] = probs;
  return r;
}

json native_final(const ReplyMeta& m, const std::string& text, const Event& done,
                  const json& probs) {
  const char* stop_type = done.finish_reason == "length" ? "limit"
                          : done.stop_word.empty()       ? "eos"
                                                         : "word";
  json r = {{"index", 0},
            {"content", text},
            {"stop", true},
            {"model", m.model},
            {"tokens_predicted", done.stats.n_predicted},
            {"tokens_evaluated", done.stats.n_prompt + done.stats.n_cached},
            {"tokens_cached", done.stats.n_cached},
            {"stop_type", stop_type},
            {"stopping_word", done.stop_word},
            {"truncated", false},
            {"timings", timings_json(done.stats)}};
  if (!probs.is_null()) r["completion_probabilities"] = probs;
  return r;
}

json usage_chunk(const ReplyMeta& m, const ReplyStats& s) {
  json r = base(m, true);
  r["choices"] = json::array();
  r["usage"] = usage_json(s);
  return r;
}

}  // namespace ferry::server
