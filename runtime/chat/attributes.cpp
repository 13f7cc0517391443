// Attribute, item and slice access, dict and list methods, iteration and the globals (str methods
// are in str_methods.cpp).
#include <algorithm>
#include <cctype>
#include <set>

#include "runtime/chat/builtins.hpp"
#include "runtime/chat/template_error.hpp"

namespace ferry::chat {
namespace {

[[noreturn]] void runtime_error(int line, const std::string& what) {
  throw TemplateError(TemplateFailure::runtime, line, what);
}
[[noreturn]] void unsupported(int line, const std::string& what) {
  throw TemplateError(TemplateFailure::unsupported, line, "unsupported " + what);
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int64_t int_arg(const Value* v, int64_t def, int line) {
  if (!v || v->is_none()) return def;
  if (v->type == Value::Type::integer) return v->i;
  if (v->type == Value::Type::boolean) return v->b;
  runtime_error(line, fmt::format("an integer is required, not {}", type_name(*v)));
}

Value dict_method(const Value& obj, const std::string& name, int line) {
  auto d = obj.dict;
  if (name == "get") {
    return Value::function([d, line](CallArgs& a) -> Value {
      const Value* k = arg_at(a, 0, "key");
      if (!k) runtime_error(line, "get expected at least 1 argument");
      const Value* def = arg_at(a, 1, "default");
      const Value* hit = k->is_string() ? d->find(k->s) : nullptr;
      return hit ? *hit : (def ? *def : Value::none());
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function([d, name](CallArgs&) -> Value {
      List out;
      for (const auto& [k, v] : d->items) {
        if (name == "items")
          out.push_back(Value::make_list({Value::string(k), v}, true));
        else
          out.push_back(name == "keys" ? Value::string(k) : v);
      }
      return Value::make_list(std::move(out));
    });
  }
  static const std::set<std::string> others = {"clear",   "copy",       "fromkeys", "pop",
                                               "popitem", "setdefault", "update"};
  if (others.count(name)) {
    return Value::function([name, line](CallArgs&) -> Value {
      unsupported(line, fmt::format("method dict.{}", name));
    });
  }
  return Value{};
}

// Python index of a code point / list position, negatives counted from the end.
int64_t norm_index(int64_t i, int64_t n) {
  return i < 0 ? i + n : i;
}

}  // namespace

const Value* arg_at(CallArgs& args, size_t index, const char* name) {
  for (const auto& [k, v] : args.keyword)
    if (k == name) return &v;
  return index < args.positional.size() ? &args.positional[index] : nullptr;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t k = 0; k < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - k);
    out.emplace_back(s.substr(k, n));
    k += n;
  }
  return out;
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  // Works on bytes: no allocation per code point (templates trim whole messages).
  size_t b = 0, e = s.size();
  if (chars.is_none() || chars.is_undefined()) {
    auto space = [](char c) { return is_ascii_space(c) || (c >= 0x1c && c <= 0x1f); };
    if (left)
      while (b < e && space(s[b])) ++b;
    if (right)
      while (e > b && space(s[e - 1])) --e;
    return s.substr(b, e - b);
  }
  const std::vector<std::string> set = utf8_chars(chars.s);
  auto in_set = [&](std::string_view c) {
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  auto cp_len = [&](size_t at) {
    unsigned char c = static_cast<unsigned char>(s[at]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return std::min(n, e - at);
  };
  if (left)
    while (b < e && in_set(std::string_view(s).substr(b, cp_len(b)))) b += cp_len(b);
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (!in_set(std::string_view(s).substr(start, e - start))) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;  // code points: the bytes that do not continue a UTF-8 sequence
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

List iterate(const Value& v, int line) {
  switch (v.type) {
    case Value::Type::undefined:
      return {};
    case Value::Type::list:
      return *v.list;
    case Value::Type::dict: {
      List keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Type::string: {
      List out;
      for (auto& c : utf8_chars(v.s)) out.push_back(Value::string(std::move(c)));
      return out;
    }
    default:
      runtime_error(line, fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

int64_t py_len(const Value& v, int line) {
  switch (v.type) {
    case Value::Type::undefined:
      return 0;
    case Value::Type::string:
      return utf8_length(v.s);
    case Value::Type::list:
      return static_cast<int64_t>(v.list->size());
    case Value::Type::dict:
      return static_cast<int64_t>(v.dict->items.size());
    default:
      runtime_error(line, fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

Value get_attribute(const Value& obj, const std::string& name, int line) {
  switch (obj.type) {
    case Value::Type::undefined:
      runtime_error(line, fmt::format("'{}' is undefined (attribute '{}')",
                                      obj.s.empty() ? "value" : obj.s, name));
    case Value::Type::string:
      return string_method(obj.s, name, line);
    case Value::Type::dict: {
      if (!obj.is_namespace) {
        Value m = dict_method(obj, name, line);
        if (m.type == Value::Type::callable) return m;
      }
      const Value* v = obj.dict->find(name);
      return v ? *v : Value::undefined(name);
    }
    case Value::Type::list: {
      if (name == "count" || name == "index") {
        auto items = obj.list;
        return Value::function([items, name, line](CallArgs& a) -> Value {
          if (a.positional.size() != 1)
            runtime_error(line, fmt::format("list.{}() takes exactly one argument", name));
          int64_t n = 0;
          for (size_t k = 0; k < items->size(); ++k) {
            if (!py_equal((*items)[k], a.positional[0])) continue;
            if (name == "index") return Value::integer(static_cast<int64_t>(k));
            ++n;
          }
          if (name == "index") runtime_error(line, "list.index(x): x not in list");
          return Value::integer(n);
        });
      }
      static const std::set<std::string> methods = {
          "append", "clear", "copy", "extend", "insert", "pop", "remove", "reverse", "sort"};
      if (methods.count(name))
        return Value::function([name, line](CallArgs&) -> Value {
          unsupported(line, fmt::format("method list.{}", name));
        });
      return Value::undefined(name);
    }
    default:
      return Value::undefined(name);
  }
}

Value get_item(const Value& obj, const Value& key, int line) {
  switch (obj.type) {
    case Value::Type::undefined:
      runtime_error(line, fmt::format("'{}' is undefined (item {})",
                                      obj.s.empty() ? "value" : obj.s, py_repr(key)));
    case Value::Type::dict: {
      if (key.is_string()) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
        return obj.is_namespace ? Value::undefined(key.s) : get_attribute(obj, key.s, line);
      }
      return Value::undefined();
    }
    case Value::Type::list:
    case Value::Type::string: {
      if (key.is_string()) return get_attribute(obj, key.s, line);
      if (key.type != Value::Type::integer && key.type != Value::Type::boolean)
        return Value::undefined();
      int64_t n = py_len(obj, line);
      int64_t i = norm_index(key.type == Value::Type::boolean ? key.b : key.i, n);
      if (i < 0 || i >= n) return Value::undefined();
      if (obj.is_list()) return (*obj.list)[static_cast<size_t>(i)];
      return Value::string(utf8_chars(obj.s)[static_cast<size_t>(i)]);
    }
    default:
      if (key.is_string()) return get_attribute(obj, key.s, line);
      return Value::undefined();
  }
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step,
                int line) {
  if (!obj.is_list() && !obj.is_string()) {
    if (obj.is_undefined()) runtime_error(line, fmt::format("'{}' is undefined (slice)", obj.s));
    runtime_error(line, fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }
  std::vector<std::string> chars;
  if (obj.is_string()) chars = utf8_chars(obj.s);
  const int64_t n =
      obj.is_list() ? static_cast<int64_t>(obj.list->size()) : static_cast<int64_t>(chars.size());
  const int64_t st = int_arg(&step, 1, line);
  if (st == 0) runtime_error(line, "slice step cannot be zero");
  auto bound = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t i = int_arg(&v, 0, line);
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t b = bound(start, st > 0 ? 0 : n - 1);
  int64_t e = bound(stop, st > 0 ? n : -1);
  List items;
  std::string text;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) {
    if (obj.is_list())
      items.push_back((*obj.list)[static_cast<size_t>(k)]);
    else
      text += chars[static_cast<size_t>(k)];
  }
  return obj.is_list() ? Value::make_list(std::move(items), obj.is_tuple)
                       : Value::string(std::move(text));
}

void install_globals(Dict& globals, std::time_t now,
                     std::shared_ptr<std::vector<std::weak_ptr<Dict>>> namespaces) {
  globals.set("range", Value::function([](CallArgs& a) -> Value {
                if (a.positional.empty() || a.positional.size() > 3)
                  runtime_error(0, "range expected 1 to 3 arguments");
                int64_t b = 0, e = 0, st = 1;
                if (a.positional.size() == 1)
                  e = int_arg(&a.positional[0], 0, 0);
                else {
                  b = int_arg(&a.positional[0], 0, 0);
                  e = int_arg(&a.positional[1], 0, 0);
                  if (a.positional.size() == 3) st = int_arg(&a.positional[2], 1, 0);
                }
                if (st == 0) runtime_error(0, "range() arg 3 must not be zero");
                List out;
                for (int64_t k = b; st > 0 ? k < e : k > e; k += st) {
                  if (out.size() >= 100000)
                    runtime_error(0, "range too big (jinja2's sandbox limit is 100000)");
                  out.push_back(Value::integer(k));
                }
                return Value::make_list(std::move(out));
              }));
  auto make_dict = [namespaces](bool ns) {
    return [ns, namespaces](CallArgs& a) -> Value {
      Dict d;
      if (!a.positional.empty()) {
        if (a.positional.size() > 1 || !a.positional[0].is_dict())
          runtime_error(0, "expected one mapping argument");
        d = *a.positional[0].dict;
      }
      for (const auto& [k, v] : a.keyword) d.set(k, v);
      Value out = Value::make_dict(std::move(d));
      out.is_namespace = ns;
      if (ns) namespaces->push_back(out.dict);
      return out;
    };
  };
  globals.set("dict", Value::function(make_dict(false)));
  globals.set("namespace", Value::function(make_dict(true)));
  globals.set("raise_exception", Value::function([](CallArgs& a) -> Value {
                throw TemplateError(TemplateFailure::raised, 0,
                                    a.positional.empty() ? std::string() : py_str(a.positional[0]));
              }));
  globals.set("strftime_now", Value::function([now](CallArgs& a) -> Value {
                if (a.positional.empty() || !a.positional[0].is_string())
                  runtime_error(0, "strftime_now(format) takes a string");
                std::tm tm{};
                gmtime_r(&now, &tm);
                char buf[256];
                size_t n = std::strftime(buf, sizeof buf, a.positional[0].s.c_str(), &tm);
                return Value::string(std::string(buf, n));
              }));
}

}  // namespace ferry::chat
