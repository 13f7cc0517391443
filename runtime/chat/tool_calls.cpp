// Tool calls in the content stream: <tool_call>BODY</tool_call> blocks, BODY either Hermes JSON
// ({"name": ..., "arguments": {...}}, Qwen3/Qwen2.5/QwQ) or the XML form of Qwen3.5/Qwen3-Coder.
// A block is decided when it closes: a call (deltas: id+name, then the arguments in pieces) or,
// when it does not parse, its raw text as content.
#include <set>

#include "runtime/chat/output_split.hpp"

namespace ferry::chat {

using json = nlohmann::ordered_json;

namespace {

const std::string kOpen = "<tool_call>";
const std::string kClose = "</tool_call>";

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_json_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_json_space(s.back())) s.remove_suffix(1);
  return s;
}

const json* find_tool(const json& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const auto& t : tools) {
    const json& fn = t.contains("function") ? t["function"] : t;
    if (fn.is_object() && fn.value("name", "") == name) return &fn;
  }
  return nullptr;
}

// The JSON types a schema admits, as llama.cpp's common_chat_schema::value_types: "type" (a name or
// a list), enum/const values' types, the union over anyOf/oneOf; no constraint admits all.
std::set<std::string> value_types(const json& schema) {
  static const std::set<std::string> all = {"string", "number", "integer", "boolean",
                                            "object", "array",  "null"};
  if (!schema.is_object()) return all;
  std::set<std::string> out;
  auto of_value = [](const json& v) -> std::string {
    if (v.is_string()) return "string";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_object()) return "object";
    if (v.is_array()) return "array";
    return "null";
  };
  if (schema.contains("type")) {
    const json& t = schema["type"];
    if (t.is_string())
      out.insert(t.get<std::string>());
    else if (t.is_array())
      for (const auto& x : t)
        if (x.is_string()) out.insert(x.get<std::string>());
    return out;
  }
  if (schema.contains("const")) return {of_value(schema["const"])};
  if (schema.contains("enum") && schema["enum"].is_array()) {
    for (const auto& v : schema["enum"]) out.insert(of_value(v));
    return out;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (schema.contains(key) && schema[key].is_array()) {
      for (const auto& sub : schema[key]) {
        auto s = value_types(sub);
        out.insert(s.begin(), s.end());
      }
      return out;
    }
  }
  return all;
}

bool json_type_admitted(const json& v, const std::set<std::string>& types) {
  if (v.is_object()) return types.count("object");
  if (v.is_array()) return types.count("array");
  if (v.is_boolean()) return types.count("boolean");
  if (v.is_null()) return types.count("null");
  if (v.is_number_integer() || v.is_number_unsigned())
    return types.count("integer") || types.count("number");
  if (v.is_number()) return types.count("number");
  return false;
}

// One XML parameter value typed by its schema, as llama.cpp's Qwen3-Coder parser: without "string"
// among the types it must be JSON; with only "string" it is the raw text; with both, JSON of an
// admitted type wins, else the raw text.
bool typed_value(const std::string& raw, const json& schema, json& out) {
  std::set<std::string> types = value_types(schema);
  bool may_string = types.count("string") > 0;
  if (may_string && types.size() == 1) {
    out = raw;
    return true;
  }
  json parsed = json::parse(trim(raw), nullptr, false);
  bool ok = !parsed.is_discarded() && !parsed.is_string() && json_type_admitted(parsed, types);
  if (ok) {
    out = std::move(parsed);
    return true;
  }
  if (!may_string) return false;
  out = raw;
  return true;
}

bool parse_xml_call(std::string_view body, const json& tools, ToolCall& call,
                    std::vector<std::string>& pieces) {
  body = trim(body);
  const std::string_view fopen = "<function=";
  if (body.substr(0, fopen.size()) != fopen) return false;
  size_t gt = body.find('>');
  if (gt == std::string_view::npos) return false;
  call.name = std::string(body.substr(fopen.size(), gt - fopen.size()));
  if (call.name.empty() || call.name.find_first_of("<\n") != std::string::npos) return false;
  const json* fn = find_tool(tools, call.name);
  if (!fn && tools.is_array() && !tools.empty()) return false;
  const json props = fn && fn->contains("parameters") && (*fn)["parameters"].is_object()
                         ? (*fn)["parameters"].value("properties", json::object())
                         : json::object();
  std::string_view rest = body.substr(gt + 1);
  std::set<std::string> seen;
  while (true) {
    rest = trim(rest);
    if (rest == "</function>") break;
    const std::string_view popen = "<parameter=";
    if (rest.substr(0, popen.size()) != popen) return false;
    size_t pgt = rest.find('>');
    if (pgt == std::string_view::npos) return false;
    std::string pname(rest.substr(popen.size(), pgt - popen.size()));
    if (pname.empty() || pname.find_first_of("<\n") != std::string::npos || seen.count(pname))
      return false;
    // The value ends where llama.cpp's parser ends it, at the first "\n</parameter>" (a value may
    // itself contain "</parameter>" mid-line, e.g. code); else at the first "</parameter>".
    size_t pend = rest.find("\n</parameter>", pgt);
    pend = pend == std::string_view::npos ? rest.find("</parameter>", pgt) : pend + 1;
    if (pend == std::string_view::npos) return false;
    std::string_view value = rest.substr(pgt + 1, pend - pgt - 1);
    if (!value.empty() && value.front() == '\n') value.remove_prefix(1);  // the template's layout
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    json schema;
    if (fn) {
      if (!props.is_object() || !props.contains(pname)) return false;  // not in the schema
      schema = props[pname];
    }
    json typed;
    if (!typed_value(std::string(value), schema, typed)) return false;
    std::string piece = (seen.empty() ? "{" : ",") + json(pname).dump() + ":" + typed.dump();
    pieces.push_back(piece);
    seen.insert(pname);
    rest = rest.substr(pend + std::string_view("</parameter>").size());
  }
  if (fn && fn->contains("parameters") && (*fn)["parameters"].is_object()) {
    const json req = (*fn)["parameters"].value("required", json::array());
    if (req.is_array())
      for (const auto& r : req)
        if (r.is_string() && !seen.count(r.get<std::string>()))
          return false;  // a required one missing
  }
  if (seen.empty()) pieces.push_back("{");
  pieces.push_back("}");
  call.arguments.clear();
  for (const auto& p : pieces) call.arguments += p;
  return true;
}

bool parse_hermes_call(std::string_view body, const json& tools, ToolCall& call,
                       std::vector<std::string>& pieces) {
  json j = json::parse(trim(body), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string())
    return false;
  call.name = j["name"].get<std::string>();
  if (tools.is_array() && !tools.empty() && !find_tool(tools, call.name)) return false;
  json args = j.contains("arguments") ? j["arguments"] : json::object();
  if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
  if (!args.is_object()) return false;
  call.arguments = args.dump();
  pieces = {call.arguments};
  return true;
}

}  // namespace

bool parse_tool_call_body(std::string_view body, const json& tools, ToolCall& call,
                          std::vector<std::string>& pieces) {
  pieces.clear();
  std::string_view t = trim(body);
  if (!t.empty() && t.front() == '{') return parse_hermes_call(t, tools, call, pieces);
  return parse_xml_call(t, tools, call, pieces);
}

void ToolCallSplitter::feed(std::string_view piece, ChatDelta& out, std::vector<ToolCall>& calls) {
  buf_.append(piece);
  step(out, calls);
}

void ToolCallSplitter::step(ChatDelta& out, std::vector<ToolCall>& calls) {
  while (!buf_.empty()) {
    if (skip_space_) {
      size_t k = 0;
      while (k < buf_.size() && is_json_space(buf_[k])) ++k;
      buf_.erase(0, k);
      if (buf_.empty()) return;
      skip_space_ = false;
    }
    if (!in_call_) {
      size_t at = buf_.find(kOpen);
      if (at != std::string::npos) {
        // The whitespace before the tag stays held: dropped if the block is a call (layout, not
        // content), sent with the block's text if it is not.
        content_space_.emit(std::string_view(buf_).substr(0, at), out.content);
        buf_.erase(0, at);
        in_call_ = true;
        continue;
      }
      size_t keep = partial_tag_suffix(buf_, {kOpen});
      content_space_.emit(std::string_view(buf_).substr(0, buf_.size() - keep), out.content);
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    size_t end = buf_.find(kClose);
    if (end == std::string::npos) return;  // the block is decided when it closes
    std::string_view body = std::string_view(buf_).substr(kOpen.size(), end - kOpen.size());
    ToolCall call;
    std::vector<std::string> pieces;
    if (parse_tool_call_body(body, opts_.tools, call, pieces)) {
      size_t index = calls.size();
      call.id = opts_.make_id(index);
      out.tool_calls.push_back({index, call.id, call.name, ""});
      for (auto& p : pieces) out.tool_calls.push_back({index, "", "", std::move(p)});
      calls.push_back(std::move(call));
      content_space_.drop();
      skip_space_ = true;
    } else {
      content_space_.emit(std::string_view(buf_).substr(0, end + kClose.size()), out.content);
    }
    buf_.erase(0, end + kClose.size());
    in_call_ = false;
  }
}

void ToolCallSplitter::finish(ChatDelta& out, std::vector<ToolCall>&) {
  if (!skip_space_ || in_call_)
    content_space_.emit(buf_, out.content);  // an unclosed block is content
  buf_.clear();
  content_space_.flush(out.content);
}

}  // namespace ferry::chat
