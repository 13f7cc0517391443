#include "runtime/server/request.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "runtime/core/error.hpp"
#include "runtime/server/api_error.hpp"

namespace ferry::server {
namespace {

using nlohmann::json;

// The OpenAI limit on alternatives per token.
constexpr int32_t kMaxTopLogprobs = 20;
constexpr size_t kMaxStopStrings = 16;

const json* field(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return nullptr;  // null = not given (clients send it)
  return &*it;
}

double number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) bad_field(name, "must be a number, got {}", v.type_name());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad_field(name, "must be in [{}, {}], got {}", lo, hi, v.dump());
  return x;
}

int64_t integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && x >= static_cast<double>(lo) &&
        x <= static_cast<double>(hi))
      return static_cast<int64_t>(x);
    bad_field(name, "must be an integer in [{}, {}], got {}", lo, hi, v.dump());
  }
  if (!v.is_number_integer()) bad_field(name, "must be an integer, got {}", v.type_name());
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad_field(name, "must be an integer in [{}, {}], got {}", lo, hi, v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad_field(name, "must be an integer in [{}, {}], got {}", lo, hi, x);
  return x;
}

bool boolean(const json& v, const std::string& name) {
  if (!v.is_boolean()) bad_field(name, "must be true or false, got {}", v.type_name());
  return v.get<bool>();
}

// content: a string, or an array of {"type": "text", "text": "..."} parts (joined as OpenAI does).
std::string content_text(const json& v, const std::string& name) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array())
    bad_field(name, "must be a string or an array of text parts, got {}", v.type_name());
  std::string out;
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string pn = fmt::format("{}[{}]", name, j);
    const json& part = v[j];
    if (!part.is_object()) bad_field(pn, "must be an object, got {}", part.type_name());
    const json* type = field(part, "type");
    if (!type || !type->is_string()) bad_field(pn + ".type", "must be the string \"text\"");
    if (type->get<std::string>() != "text")
      bad_field(pn + ".type", "\"{}\" parts are not supported (only \"text\")",
                type->get<std::string>());
    const json* text = field(part, "text");
    if (!text || !text->is_string()) bad_field(pn + ".text", "must be a string");
    out += text->get<std::string>();
  }
  return out;
}

// OpenAI: {"token id": bias}; llama-server also [[id, bias], ...] and false for a ban.
void parse_logit_bias(const json& v, GenRequest& r) {
  auto bias_of = [](const json& b, const std::string& name) {
    if (b.is_boolean()) {
      if (b.get<bool>()) bad_field(name, "true is not a bias (false bans the token)");
      return -std::numeric_limits<float>::infinity();
    }
    const double x = number(b, name, -100.0, 100.0);
    return x <= -100.0 ? -std::numeric_limits<float>::infinity() : static_cast<float>(x);
  };
  constexpr size_t kMaxBiases = 1024;
  if (v.size() > kMaxBiases)
    bad_field("logit_bias", "at most {} entries, got {}", kMaxBiases, v.size());
  if (v.is_object()) {
    for (const auto& [key, b] : v.items()) {
      const std::string name = fmt::format("logit_bias[\"{}\"]", key);
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max())
        bad_field(name, "the key must be a token id");
      r.logit_bias.emplace_back(static_cast<int32_t>(id), bias_of(b, name));
    }
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string name = fmt::format("logit_bias[{}]", i);
      if (!v[i].is_array() || v[i].size() != 2) bad_field(name, "must be a [token id, bias] pair");
      const int64_t id = integer(v[i][0], name + "[0]", 0, std::numeric_limits<int32_t>::max());
      r.logit_bias.emplace_back(static_cast<int32_t>(id), bias_of(v[i][1], name + "[1]"));
    }
  } else {
    bad_field("logit_bias", "must be an object of token id: bias, got {}", v.type_name());
  }
}

void parse_common(const json& b, const RequestDefaults& d, GenRequest& r, bool chat) {
  r.sampling = d.sampling;
  if (const json* v = field(b, "model")) {
    if (!v->is_string()) bad_field("model", "must be a string, got {}", v->type_name());
    r.model = v->get<std::string>();
  }
  if (const json* v = field(b, "temperature"))
    r.sampling.temp = static_cast<float>(number(*v, "temperature", 0.0, 100.0));
  if (const json* v = field(b, "top_p"))
    r.sampling.top_p = static_cast<float>(number(*v, "top_p", 0.0, 1.0));
  if (const json* v = field(b, "top_k"))
    r.sampling.top_k =
        static_cast<int32_t>(integer(*v, "top_k", 0, std::numeric_limits<int32_t>::max()));
  if (const json* v = field(b, "min_p"))
    r.sampling.min_p = static_cast<float>(number(*v, "min_p", 0.0, 1.0));
  if (const json* v = field(b, "presence_penalty"))
    r.sampling.presence_penalty = static_cast<float>(number(*v, "presence_penalty", -2.0, 2.0));
  if (const json* v = field(b, "frequency_penalty"))
    r.sampling.frequency_penalty = static_cast<float>(number(*v, "frequency_penalty", -2.0, 2.0));
  if (const json* v = field(b, "repeat_penalty")) {
    r.sampling.repeat_penalty = static_cast<float>(number(*v, "repeat_penalty", 0.0, 100.0));
    if (!(r.sampling.repeat_penalty > 0.0f)) bad_field("repeat_penalty", "must be > 0 (1 = off)");
  }
  if (const json* v = field(b, "repeat_last_n"))
    r.sampling.repeat_last_n =
        static_cast<int32_t>(integer(*v, "repeat_last_n", -1, std::numeric_limits<int32_t>::max()));
  if (const json* v = field(b, "seed")) {
    // llama-server: -1 (or no seed) draws a random one; seeds are 32-bit.
    const int64_t s = integer(*v, "seed", -1, std::numeric_limits<uint32_t>::max());
    r.sampling.seed = s < 0 ? 0xFFFFFFFFu : static_cast<uint64_t>(s);
  }
  // max_completion_tokens is the newer OpenAI name; max_tokens the older; n_predict llama-server's.
  for (const char* name : {"n_predict", "max_tokens", "max_completion_tokens"})
    if (const json* v = field(b, name)) {
      const int64_t n = integer(*v, name, -1, std::numeric_limits<int32_t>::max());
      if (n == 0) bad_field(name, "must be >= 1 (or -1: until the end of generation)");
      r.max_tokens = static_cast<int32_t>(n);
    }
  if (d.n_predict >= 0 && (r.max_tokens < 0 || r.max_tokens > d.n_predict))
    r.max_tokens = d.n_predict;
  if (const json* v = field(b, "n")) {
    if (integer(*v, "n", 1, 128) != 1) bad_field("n", "only n = 1 is supported");
  }
  if (const json* v = field(b, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > kMaxStopStrings)
        bad_field("stop", "at most {} stop strings, got {}", kMaxStopStrings, v->size());
      for (size_t i = 0; i < v->size(); ++i) {
        if (!(*v)[i].is_string())
          bad_field(fmt::format("stop[{}]", i), "must be a string, got {}", (*v)[i].type_name());
        r.stop.push_back((*v)[i].get<std::string>());
      }
    } else {
      bad_field("stop", "must be a string or an array of strings, got {}", v->type_name());
    }
    for (size_t i = 0; i < r.stop.size(); ++i)
      if (r.stop[i].empty()) bad_field(fmt::format("stop[{}]", i), "must not be empty");
  }
  if (const json* v = field(b, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(b, "cache_prompt")) r.cache_prompt = boolean(*v, "cache_prompt");
  if (const json* v = field(b, "stream_options")) {
    if (!v->is_object()) bad_field("stream_options", "must be an object, got {}", v->type_name());
    if (const json* u = field(*v, "include_usage"))
      r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (const json* v = field(b, "logit_bias")) parse_logit_bias(*v, r);
  // Known OpenAI features this server does not have: refused, not silently ignored (a client
  // asking for JSON must not get plain text as if it had it). Tools are the chat API's (the
  // template renders them); a completion has no template to give them to.
  if (const json* v = field(b, "tools"); !chat && v && !(v->is_array() && v->empty()))
    bad_field("tools", "tool calls need /v1/chat/completions (the chat template renders them)");
  if (const json* v = field(b, "response_format")) {
    const json* type = v->is_object() ? field(*v, "type") : nullptr;
    if (!type || !type->is_string())
      bad_field("response_format", "must be an object with a string \"type\"");
    if (type->get<std::string>() != "text")
      bad_field("response_format.type",
                "\"{}\" is not supported: Ferry has no grammar-constrained sampling, so it cannot "
                "make the reply follow JSON or a schema (only \"text\")",
                type->get<std::string>());
  }
  if (chat) {
    if (const json* v = field(b, "logprobs")) r.logprobs = boolean(*v, "logprobs");
    if (const json* v = field(b, "top_logprobs")) {
      r.top_logprobs = static_cast<int32_t>(integer(*v, "top_logprobs", 0, kMaxTopLogprobs));
      if (!r.logprobs && r.top_logprobs > 0) bad_field("top_logprobs", "needs \"logprobs\": true");
    }
  } else if (const json* v = field(b, "logprobs")) {
    // The legacy completions API: logprobs is the number of alternatives.
    r.top_logprobs = static_cast<int32_t>(integer(*v, "logprobs", 0, kMaxTopLogprobs));
    r.logprobs = true;
  }
}

}  // namespace

json parse_body(const std::string& text) {
  json b;
  try {
    b = json::parse(text);
  } catch (const json::parse_error& e) {
    // The parser's message names the byte where it failed.
    throw ApiError(400, "invalid_request_error", fmt::format("malformed JSON body: {}", e.what()));
  }
  if (!b.is_object())
    throw ApiError(400, "invalid_request_error",
                   fmt::format("body: must be a JSON object, got {}", b.type_name()));
  return b;
}

std::vector<ChatMessage> parse_messages(const json& b) {
  const json* msgs = field(b, "messages");
  if (!msgs) bad_field("messages", "is required");
  if (!msgs->is_array()) bad_field("messages", "must be an array, got {}", msgs->type_name());
  if (msgs->empty()) bad_field("messages", "must not be empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const std::string name = fmt::format("messages[{}]", i);
    const json& m = (*msgs)[i];
    if (!m.is_object()) bad_field(name, "must be an object, got {}", m.type_name());
    const json* role = field(m, "role");
    if (!role) bad_field(name + ".role", "is required");
    if (!role->is_string())
      bad_field(name + ".role", "must be a string, got {}", role->type_name());
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      bad_field(name + ".role", "unknown role \"{}\" (system, developer, user, assistant, tool)",
                role->get<std::string>());
    const json* content = field(m, "content");
    std::string text;
    if (content) {
      text = content_text(*content, name + ".content");
    } else if (r != "assistant") {  // an assistant turn may be tool calls alone
      bad_field(name + ".content", "is required");
    }
    if (const json* calls = field(m, "tool_calls"); calls && !calls->is_array())
      bad_field(name + ".tool_calls", "must be an array, got {}", calls->type_name());
    out.push_back({r, std::move(text)});
  }
  return out;
}

chat::ChatRequest parse_chat_fields(const nlohmann::ordered_json& ordered,
                                    const chat::ChatServerDefaults& chat_defaults) {
  try {
    return chat::parse_chat_request(ordered, chat_defaults);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::invalid_arg) throw;
    throw ApiError(400, "invalid_request_error", e.what());
  }
}

GenRequest parse_chat_request(const json& b, const nlohmann::ordered_json& ordered,
                              const RequestDefaults& d,
                              const chat::ChatServerDefaults& chat_defaults) {
  GenRequest r;
  r.api = Api::chat;
  r.messages = parse_messages(b);
  parse_common(b, d, r, /*chat=*/true);
  r.chat = parse_chat_fields(ordered, chat_defaults);
  return r;
}

GenRequest parse_completion_request(const json& b, const RequestDefaults& d) {
  GenRequest r;
  r.api = Api::completion;
  const json* p = field(b, "prompt");
  if (!p) bad_field("prompt", "is required");
  // A string, a list of token ids, or a list holding one string / one list of ids (n prompts
  // would be n completions: one per request here).
  const json* one = p;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
    one = &(*p)[0];
  if (one->is_string()) {
    r.prompt_text = one->get<std::string>();
  } else if (one->is_array()) {
    for (size_t i = 0; i < one->size(); ++i) {
      const json& t = (*one)[i];
      if (!t.is_number_integer())
        bad_field(fmt::format("prompt[{}]", i),
                  "must be a token id (integer); one prompt per request");
      r.prompt_tokens.push_back(static_cast<int32_t>(
          integer(t, fmt::format("prompt[{}]", i), 0, std::numeric_limits<int32_t>::max())));
    }
    r.prompt_is_tokens = true;
  } else {
    bad_field("prompt", "must be a string or an array of token ids, got {}", p->type_name());
  }
  if ((r.prompt_is_tokens && r.prompt_tokens.empty()) ||
      (!r.prompt_is_tokens && r.prompt_text.empty()))
    bad_field("prompt", "must not be empty");
  if (const json* v = field(b, "echo"); v && boolean(*v, "echo"))
    bad_field("echo", "echo is not supported");
  parse_common(b, d, r, /*chat=*/false);
  return r;
}

GenRequest parse_native_request(const json& b, const RequestDefaults& d) {
  GenRequest r = parse_completion_request(b, d);
  r.api = Api::native;
  if (const json* v = field(b, "n_probs")) {
    r.top_logprobs = static_cast<int32_t>(integer(*v, "n_probs", 0, kMaxTopLogprobs));
    r.logprobs = r.top_logprobs > 0;
  }
  return r;
}

}  // namespace ferry::server
