// Attribute, item and slice access, Python's str/dict methods, iteration and the globals.
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

std::string need_string(const Value& v, const char* what, int line) {
  if (!v.is_string())
    runtime_error(line, fmt::format("{} must be str, not {}", what, type_name(v)));
  return v.s;
}

// str.split(sep, maxsplit) and rsplit: sep None splits on whitespace runs, dropping empties.
List py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right, int line) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t k = 0; k < s.size();) {
      while (k < s.size() && is_ascii_space(s[k])) ++k;
      if (k >= s.size()) break;
      size_t b = k;
      while (k < s.size() && !is_ascii_space(s[k])) ++k;
      words.emplace_back(b, k);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      if (!from_right) {
        size_t b = words[maxsplit].first;
        size_t e = s.size();
        while (e > b && is_ascii_space(s[e - 1])) --e;
        words.resize(maxsplit);
        words.emplace_back(b, e);
      } else {
        size_t cut = words.size() - maxsplit - 1;
        size_t b = 0;
        while (b < s.size() && is_ascii_space(s[b])) ++b;
        std::vector<std::pair<size_t, size_t>> w2{{b, words[cut].second}};
        w2.insert(w2.end(), words.begin() + cut + 1, words.end());
        words = w2;
      }
    }
    List out;
    for (auto [b, e] : words) out.push_back(Value::string(s.substr(b, e - b)));
    return out;
  }
  std::string d = need_string(*sep, "separator", line);
  if (d.empty()) runtime_error(line, "empty separator");
  if (!from_right) {
    size_t pos = 0;
    int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      size_t f = s.find(d, pos);
      if (f == std::string::npos) break;
      parts.push_back(s.substr(pos, f - pos));
      pos = f + d.size();
      ++n;
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      if (end < d.size()) break;
      size_t f = s.rfind(d, end - d.size());
      if (f == std::string::npos) break;
      parts.insert(parts.begin(), s.substr(f + d.size(), end - f - d.size()));
      end = f;
      ++n;
    }
    parts.insert(parts.begin(), s.substr(0, end));
  }
  List out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

int64_t int_arg(const Value* v, int64_t def, int line) {
  if (!v || v->is_none()) return def;
  if (v->type == Value::Type::integer) return v->i;
  if (v->type == Value::Type::boolean) return v->b;
  runtime_error(line, fmt::format("an integer is required, not {}", type_name(*v)));
}

std::string case_map(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::string out = s;
  bool prev_cased = false;
  for (size_t k = 0; k < out.size(); ++k) {
    unsigned char c = static_cast<unsigned char>(out[k]);
    bool alpha = std::isalpha(c);
    if (mode == 0)
      out[k] = static_cast<char>(std::tolower(c));
    else if (mode == 1)
      out[k] = static_cast<char>(std::toupper(c));
    else if (mode == 2)
      out[k] = static_cast<char>(prev_cased ? std::tolower(c) : std::toupper(c));
    else
      out[k] = static_cast<char>(k == 0 ? std::toupper(c) : std::tolower(c));
    prev_cased = alpha;
  }
  return out;
}

const std::set<std::string>& python_str_methods() {
  static const std::set<std::string> m = {
      "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
      "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
      "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
      "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
      "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
      "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
      "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
      "swapcase",     "title",       "translate", "upper",      "zfill"};
  return m;
}

Value string_method(const std::string& s, const std::string& name, int line) {
  auto method = [&](auto body) {
    return Value::function([s, line, body](CallArgs& a) -> Value { return body(s, a, line); });
  };
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return method([start](const std::string& str, CallArgs& a, int ln) {
      const Value* p = arg_at(a, 0, "prefix");
      if (!p) runtime_error(ln, "startswith/endswith takes one argument");
      List options = p->is_list() ? *p->list : List{*p};
      for (const Value& o : options) {
        std::string x = need_string(o, "prefix", ln);
        bool hit =
            start ? str.compare(0, x.size(), x) == 0 && str.size() >= x.size()
                  : str.size() >= x.size() && str.compare(str.size() - x.size(), x.size(), x) == 0;
        if (hit) return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return method([l, r](const std::string& str, CallArgs& a, int) {
      const Value* chars = arg_at(a, 0, "chars");
      return Value::string(py_strip(str, chars ? *chars : Value::none(), l, r));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return method([right](const std::string& str, CallArgs& a, int ln) {
      return Value::make_list(
          py_split(str, arg_at(a, 0, "sep"), int_arg(arg_at(a, 1, "maxsplit"), -1, ln), right, ln));
    });
  }
  if (name == "splitlines") {
    return method([](const std::string& str, CallArgs& a, int ln) {
      bool keep = arg_at(a, 0, "keepends") && arg_at(a, 0, "keepends")->truthy();
      List out;
      size_t b = 0;
      for (size_t k = 0; k < str.size(); ++k) {
        if (str[k] != '\n' && str[k] != '\r') continue;
        size_t e = k;
        if (str[k] == '\r' && k + 1 < str.size() && str[k + 1] == '\n') ++k;
        out.push_back(Value::string(str.substr(b, (keep ? k + 1 : e) - b)));
        b = k + 1;
      }
      if (b < str.size()) out.push_back(Value::string(str.substr(b)));
      return Value::make_list(std::move(out));
    });
  }
  if (name == "replace") {
    return method([](const std::string& str, CallArgs& a, int ln) {
      const Value* o = arg_at(a, 0, "old");
      const Value* n = arg_at(a, 1, "new");
      if (!o || !n) runtime_error(ln, "replace() takes at least 2 arguments");
      CallArgs fa{{*o, *n}, {}};
      if (const Value* c = arg_at(a, 2, "count")) fa.positional.push_back(*c);
      return apply_filter("replace", Value::string(str), fa, ln);
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    int mode = name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : 3;
    return method([mode](const std::string& str, CallArgs&, int) {
      return Value::string(case_map(str, mode));
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return method([name](const std::string& str, CallArgs& a, int ln) {
      const Value* sub = arg_at(a, 0, "sub");
      if (!sub) runtime_error(ln, fmt::format("{}() takes at least 1 argument", name));
      std::string x = need_string(*sub, "substring", ln);
      if (arg_at(a, 1, "start")) unsupported(ln, fmt::format("str.{} with start/end", name));
      auto to_cp = [&](size_t byte) {  // Python indexes code points
        return utf8_length(std::string_view(str).substr(0, byte));
      };
      if (name == "count") {
        if (x.empty()) return Value::integer(py_len(Value::string(str), ln) + 1);
        int64_t n = 0;
        for (size_t p = str.find(x); p != std::string::npos; p = str.find(x, p + x.size())) ++n;
        return Value::integer(n);
      }
      size_t p = name == "find" ? str.find(x) : str.rfind(x);
      return Value::integer(p == std::string::npos ? -1 : to_cp(p));
    });
  }
  if (name == "join") {
    return method([](const std::string& str, CallArgs& a, int ln) {
      const Value* seq = arg_at(a, 0, "iterable");
      if (!seq) runtime_error(ln, "join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*seq, ln)) {
        out += (first ? "" : str) + need_string(v, "sequence item", ln);
        first = false;
      }
      return Value::string(out);
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "islower" || name == "isupper") {
    return method([name](const std::string& str, CallArgs&, int) {
      if (str.empty()) return Value::boolean(false);
      bool cased = false, ok = true;
      for (unsigned char c : str) {
        if (name == "isdigit")
          ok = ok && std::isdigit(c);
        else if (name == "isalpha")
          ok = ok && std::isalpha(c);
        else if (name == "isalnum")
          ok = ok && std::isalnum(c);
        else if (name == "isspace")
          ok = ok && is_ascii_space(static_cast<char>(c));
        else if (name == "islower")
          ok = ok && !std::isupper(c), cased = cased || std::islower(c);
        else
          ok = ok && !std::islower(c), cased = cased || std::isupper(c);
      }
      if (name == "islower" || name == "isupper") ok = ok && cased;
      return Value::boolean(ok);
    });
  }
  if (python_str_methods().count(name)) {
    return Value::function([name, line](CallArgs&) -> Value {
      unsupported(line, fmt::format("method str.{}", name));
    });
  }
  return Value::undefined(name);
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
