// Python's str methods as templates call them: "abc".startswith(...), .split(), .strip(), ...
// ASCII case rules (docs/chat-templates.md); the rest of Python's str methods are named so that
// calling one is an "unsupported method" error rather than an undefined value.
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

}  // namespace

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
  if (name == "format") {
    // str.format with "{}", "{0}", "{name}" fields and "{{" / "}}"; a format spec or conversion
    // ("{:>8}", "{!r}") is unsupported.
    return method([](const std::string& str, CallArgs& a, int ln) {
      std::string out;
      size_t next_auto = 0;
      for (size_t k = 0; k < str.size(); ++k) {
        char c = str[k];
        if ((c == '{' || c == '}') && k + 1 < str.size() && str[k + 1] == c) {
          out += c;
          ++k;
          continue;
        }
        if (c == '}') runtime_error(ln, "Single '}' encountered in format string");
        if (c != '{') {
          out += c;
          continue;
        }
        size_t end = str.find('}', k);
        if (end == std::string::npos) runtime_error(ln, "Single '{' encountered in format string");
        std::string field = str.substr(k + 1, end - k - 1);
        if (field.find_first_of(":!.[") != std::string::npos)
          unsupported(ln, "str.format field '{" + field + "}'");
        const Value* v = nullptr;
        if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) {
              return std::isdigit(static_cast<unsigned char>(d));
            })) {
          size_t index = field.empty()      ? next_auto++
                         : field.size() < 9 ? std::stoul(field)
                                            : SIZE_MAX;
          if (index >= a.positional.size())
            runtime_error(ln, "Replacement index out of range for positional args tuple");
          v = &a.positional[index];
        } else {
          for (const auto& [key, val] : a.keyword)
            if (key == field) v = &val;
          if (!v) runtime_error(ln, fmt::format("KeyError: '{}'", field));
        }
        out += py_str(*v);
        k = end;
      }
      return Value::string(out);
    });
  }
  if (python_str_methods().count(name)) {
    return Value::function([name, line](CallArgs&) -> Value {
      unsupported(line, fmt::format("method str.{}", name));
    });
  }
  return Value::undefined(name);
}

}  // namespace ferry::chat
