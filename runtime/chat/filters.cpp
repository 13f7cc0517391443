// jinja2's filters and tests (jinja2/filters.py, jinja2/tests.py) with the arguments the chat
// templates pass. tojson is transformers' binding (json.dumps, ensure_ascii=False, no HTML escape).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "runtime/chat/builtins.hpp"
#include "runtime/chat/template_error.hpp"

namespace ferry::chat {
namespace {

[[noreturn]] void runtime_error(int line, const std::string& what) {
  throw TemplateError(TemplateFailure::runtime, line, what);
}

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The value an attribute path ("a.b" or "0") names, as jinja2's make_attrgetter.
Value attr_path(const Value& v, const std::string& path, int line) {
  Value cur = v;
  size_t b = 0;
  while (true) {
    size_t e = path.find('.', b);
    std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    bool digits = !part.empty() && part.size() < 18 &&
                  std::all_of(part.begin(), part.end(),
                              [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    cur = get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part), line);
    if (e == std::string::npos) return cur;
    b = e + 1;
  }
}

CallArgs rest_args(CallArgs& a, size_t from) {
  CallArgs out;
  for (size_t k = from; k < a.positional.size(); ++k) out.positional.push_back(a.positional[k]);
  out.keyword = a.keyword;
  return out;
}

bool flag(CallArgs& a, size_t index, const char* name, bool def) {
  const Value* v = arg_at(a, index, name);
  return v ? v->truthy() : def;
}

// Sort keys as jinja2's sort/dictsort/unique/min/max do: strings lower-cased unless case-sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(lower_ascii(v.s));
  return v;
}

void py_sort(List& items, const std::function<Value(const Value&)>& key, bool reverse, int line) {
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& v : items) keyed.emplace_back(key(v), v);
  bool ok = true;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    bool good = true;
    bool r = reverse ? py_less(y.first, x.first, &good) : py_less(x.first, y.first, &good);
    ok = ok && good;
    return r;
  });
  if (!ok) runtime_error(line, "'<' not supported between the sorted values");
  items.clear();
  for (auto& kv : keyed) items.push_back(std::move(kv.second));
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every code point
    int64_t n = 0;
    for (const auto& c : utf8_chars(s)) {
      if (count < 0 || n < count) out += to, ++n;
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out += s.substr(pos, f - pos) + to;
    pos = f + from.size();
    ++n;
  }
  return out + s.substr(pos);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Markup(str(v)): the `safe` filter.
Value markup(const Value& v) {
  Value out = Value::string(py_str(v));
  out.is_safe = true;
  return out;
}

using Filter = Value (*)(const Value&, CallArgs&, int);

// str(v).name() for the filters that are Python's str methods (upper, lower, capitalize).
Value str_method(const Value& v, const char* name, int line) {
  CallArgs none;
  return (*get_attribute(Value::string(py_str(v)), name, line).fn)(none);
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = {
      {"length", [](const Value& v, CallArgs&, int l) { return Value::integer(py_len(v, l)); }},
      {"count", [](const Value& v, CallArgs&, int l) { return Value::integer(py_len(v, l)); }},
      {"default",
       [](const Value& v, CallArgs& a, int) {
         const Value* d = arg_at(a, 0, "default_value");
         bool boolean = flag(a, 1, "boolean", false);
         if (v.is_undefined() || (boolean && !v.truthy())) return d ? *d : Value::string("");
         return v;
       }},
      {"trim",
       [](const Value& v, CallArgs& a, int) {
         const Value* chars = arg_at(a, 0, "chars");
         return Value::string(py_strip(py_str(v), chars ? *chars : Value::none(), true, true));
       }},
      {"upper", [](const Value& v, CallArgs&, int l) { return str_method(v, "upper", l); }},
      {"lower", [](const Value& v, CallArgs&, int l) { return str_method(v, "lower", l); }},
      {"title",
       [](const Value& v, CallArgs&, int) {
         // jinja2's do_title: words start after whitespace, '-', '(', '{', '[' or '<' (str.title()
         // starts one after any non-letter); the first character up, the rest down.
         std::string s = py_str(v), out;
         bool start = true;
         for (char c : s) {
           unsigned char u = static_cast<unsigned char>(c);
           bool sep = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
           out += static_cast<char>(sep ? c : start ? std::toupper(u) : std::tolower(u));
           start = sep;
         }
         return Value::string(out);
       }},
      {"capitalize",
       [](const Value& v, CallArgs&, int l) { return str_method(v, "capitalize", l); }},
      {"replace",
       [](const Value& v, CallArgs& a, int l) {
         const Value* from = arg_at(a, 0, "old");
         const Value* to = arg_at(a, 1, "new");
         if (!from || !to) runtime_error(l, "replace takes old and new");
         const Value* c = arg_at(a, 2, "count");
         return Value::string(
             replace_all(py_str(v), py_str(*from), py_str(*to), c && !c->is_none() ? c->i : -1));
       }},
      {"join",
       [](const Value& v, CallArgs& a, int l) {
         const Value* sep = arg_at(a, 0, "d");
         const Value* attr = arg_at(a, 1, "attribute");
         std::string out;
         bool first = true;
         for (const Value& item : iterate(v, l)) {
           out += (first ? "" : (sep ? py_str(*sep) : "")) +
                  py_str(attr ? attr_path(item, py_str(*attr), l) : item);
           first = false;
         }
         return Value::string(out);
       }},
      {"first",
       [](const Value& v, CallArgs&, int l) {
         List items = iterate(v, l);
         return items.empty() ? Value::undefined("first") : items.front();
       }},
      {"last",
       [](const Value& v, CallArgs&, int l) {
         List items = iterate(v, l);
         return items.empty() ? Value::undefined("last") : items.back();
       }},
      {"list", [](const Value& v, CallArgs&, int l) { return Value::make_list(iterate(v, l)); }},
      {"reverse",
       [](const Value& v, CallArgs&, int l) {
         if (v.is_string())
           return get_slice(v, Value::none(), Value::none(), Value::integer(-1), l);
         List items = iterate(v, l);
         std::reverse(items.begin(), items.end());
         return Value::make_list(std::move(items));
       }},
      {"map",
       [](const Value& v, CallArgs& a, int l) {
         List out;
         if (!v.truthy())
           return Value::make_list();  // jinja2 maps `if value`: a falsy input is empty
         const Value* attr = arg_at(a, 99, "attribute");
         for (const Value& item : iterate(v, l)) {
           if (attr) {
             Value got = attr_path(item, py_str(*attr), l);
             const Value* def = arg_at(a, 99, "default");
             out.push_back(got.is_undefined() && def ? *def : got);
           } else {
             if (a.positional.empty()) runtime_error(l, "map requires a filter name or attribute=");
             CallArgs sub = rest_args(a, 1);
             out.push_back(apply_filter(py_str(a.positional[0]), item, sub, l));
           }
         }
         return Value::make_list(std::move(out));
       }},
      {"tojson",
       [](const Value& v, CallArgs& a, int l) {
         // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
         // sort_keys=False)
         JsonDumpOptions o;
         if (const Value* ea = arg_at(a, 0, "ensure_ascii")) o.ensure_ascii = ea->truthy();
         if (const Value* in = arg_at(a, 1, "indent"); in && !in->is_none()) {
           if (in->type != Value::Type::integer)
             throw TemplateError(TemplateFailure::unsupported, l,
                                 "unsupported tojson indent that is not an integer");
           o.indent = static_cast<int>(std::max<int64_t>(0, in->i));
         }
         if (const Value* sep = arg_at(a, 2, "separators"); sep && !sep->is_none()) {
           if (!sep->is_list() || sep->list->size() != 2 || !(*sep->list)[0].is_string() ||
               !(*sep->list)[1].is_string())
             runtime_error(l, "tojson separators must be two strings");
           o.item_separator = (*sep->list)[0].s;
           o.key_separator = (*sep->list)[1].s;
         }
         if (const Value* sk = arg_at(a, 3, "sort_keys")) o.sort_keys = sk->truthy();
         return Value::string(py_json_dumps(v, o));
       }},
      {"string",  // soft_str: a string (Markup included) stays as it is
       [](const Value& v, CallArgs&, int) { return v.is_string() ? v : Value::string(py_str(v)); }},
      {"safe", [](const Value& v, CallArgs&, int) { return markup(v); }},
      {"e", [](const Value& v, CallArgs&, int) { return escape(v); }},
      {"escape", [](const Value& v, CallArgs&, int) { return escape(v); }},
      {"int",
       [](const Value& v, CallArgs& a, int l) {
         if (v.is_undefined()) runtime_error(l, fmt::format("'{}' is undefined", v.s));
         const Value* def = arg_at(a, 0, "default");
         Value fallback = def ? *def : Value::integer(0);
         if (v.type == Value::Type::integer) return v;
         if (v.type == Value::Type::boolean) return Value::integer(v.b);
         if (v.type == Value::Type::floating) return Value::integer(static_cast<int64_t>(v.f));
         if (v.is_string()) {
           try {
             size_t used = 0;
             std::string t = py_strip(v.s, Value::none(), true, true);
             int64_t x = std::stoll(t, &used);
             if (used == t.size()) return Value::integer(x);
             double d = std::stod(t, &used);
             if (used == t.size()) return Value::integer(static_cast<int64_t>(d));
           } catch (const std::exception&) {
           }
         }
         return fallback;
       }},
      {"float",
       [](const Value& v, CallArgs& a, int l) {
         if (v.is_undefined()) runtime_error(l, fmt::format("'{}' is undefined", v.s));
         const Value* def = arg_at(a, 0, "default");
         if (v.is_number()) return Value::floating(v.as_double());
         if (v.is_string()) {
           try {
             size_t used = 0;
             std::string t = py_strip(v.s, Value::none(), true, true);
             double d = std::stod(t, &used);
             if (used == t.size()) return Value::floating(d);
           } catch (const std::exception&) {
           }
         }
         return def ? *def : Value::floating(0.0);
       }},
      {"items",
       [](const Value& v, CallArgs&, int l) {
         if (v.is_undefined()) return Value::make_list();
         if (!v.is_dict())
           runtime_error(l, fmt::format("items filter on a '{}', not a mapping", type_name(v)));
         List out;
         for (const auto& [k, x] : v.dict->items)
           out.push_back(Value::make_list({Value::string(k), x}, true));
         return Value::make_list(std::move(out));
       }},
      {"dictsort",
       [](const Value& v, CallArgs& a, int l) {
         if (!v.is_dict()) runtime_error(l, "dictsort requires a mapping");
         bool cs = flag(a, 0, "case_sensitive", false);
         const Value* by = arg_at(a, 1, "by");
         bool by_value = by && py_str(*by) == "value";
         List out;
         for (const auto& [k, x] : v.dict->items)
           out.push_back(Value::make_list({Value::string(k), x}, true));
         py_sort(
             out, [&](const Value& kv) { return sort_key((*kv.list)[by_value ? 1 : 0], cs); },
             flag(a, 2, "reverse", false), l);
         return Value::make_list(std::move(out));
       }},
      {"sort",
       [](const Value& v, CallArgs& a, int l) {
         List out = iterate(v, l);
         bool cs = flag(a, 1, "case_sensitive", false);
         const Value* attr = arg_at(a, 2, "attribute");
         py_sort(
             out,
             [&](const Value& x) {
               return sort_key(attr ? attr_path(x, py_str(*attr), l) : x, cs);
             },
             flag(a, 0, "reverse", false), l);
         return Value::make_list(std::move(out));
       }},
      {"unique",
       [](const Value& v, CallArgs& a, int l) {
         bool cs = flag(a, 0, "case_sensitive", false);
         const Value* attr = arg_at(a, 1, "attribute");
         List out, seen;
         for (const Value& x : iterate(v, l)) {
           Value key = sort_key(attr ? attr_path(x, py_str(*attr), l) : x, cs);
           if (std::none_of(seen.begin(), seen.end(),
                            [&](const Value& s) { return py_equal(s, key); })) {
             seen.push_back(key);
             out.push_back(x);
           }
         }
         return Value::make_list(std::move(out));
       }},
      {"indent",
       [](const Value& v, CallArgs& a, int l) {
         if (!v.is_string())
           runtime_error(l, fmt::format("indent needs a string, not {}", type_name(v)));
         const Value* w = arg_at(a, 0, "width");
         std::string pad =
             w ? (w->is_string()
                      ? w->s
                      : std::string(static_cast<size_t>(std::max<int64_t>(0, w->i)), ' '))
               : "    ";
         bool first = flag(a, 1, "first", false), blank = flag(a, 2, "blank", false);
         std::string s = py_str(v), out;
         size_t b = 0;
         bool is_first = true;
         while (b <= s.size()) {
           size_t e = s.find('\n', b);
           std::string line = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
           bool add = (is_first ? first : true) && (blank || !line.empty());
           out += (add ? pad : "") + line;
           if (e == std::string::npos) break;
           out += '\n';
           b = e + 1;
           is_first = false;
         }
         return Value::string(out);
       }},
      {"wordcount",
       [](const Value& v, CallArgs&, int) {
         // jinja2 counts matches of \w+: runs of letters, digits and underscores (non-ASCII bytes
         // count as letters here).
         int64_t n = 0;
         bool in_word = false;
         for (unsigned char c : py_str(v)) {
           bool w = std::isalnum(c) || c == '_' || c >= 0x80;
           if (w && !in_word) ++n;
           in_word = w;
         }
         return Value::integer(n);
       }},
      {"abs",
       [](const Value& v, CallArgs&, int l) {
         if (v.type == Value::Type::floating) return Value::floating(std::fabs(v.f));
         if (v.type == Value::Type::integer) return Value::integer(v.i < 0 ? -v.i : v.i);
         if (v.type == Value::Type::boolean) return Value::integer(v.b);
         runtime_error(l, fmt::format("bad operand type for abs(): '{}'", type_name(v)));
       }},
      {"round",
       [](const Value& v, CallArgs& a, int l) {
         if (!v.is_number()) runtime_error(l, "round requires a number");
         const Value* p = arg_at(a, 0, "precision");
         const Value* m = arg_at(a, 1, "method");
         std::string method = m ? py_str(*m) : "common";
         double scale = std::pow(10.0, p ? p->as_double() : 0.0);
         double x = v.as_double() * scale;
         // Python's round() rounds halves to even, as nearbyint in the default rounding mode.
         double r = method == "ceil"    ? std::ceil(x)
                    : method == "floor" ? std::floor(x)
                                        : std::nearbyint(x);
         if (method == "common" && v.type != Value::Type::floating)
           return Value::integer(v.type == Value::Type::boolean ? v.b
                                                                : v.i);  // round(int) is an int
         return Value::floating(r / scale);
       }},
      {"sum",
       [](const Value& v, CallArgs& a, int l) {
         const Value* attr = arg_at(a, 0, "attribute");
         const Value* start = arg_at(a, 1, "start");
         Value acc = start ? *start : Value::integer(0);
         for (const Value& x : iterate(v, l)) {
           Value y = attr ? attr_path(x, py_str(*attr), l) : x;
           if (!y.is_number() || !acc.is_number()) runtime_error(l, "sum of non-numbers");
           bool ints = acc.type != Value::Type::floating && y.type != Value::Type::floating;
           acc = ints ? Value::integer(static_cast<int64_t>(acc.as_double()) +
                                       static_cast<int64_t>(y.as_double()))
                      : Value::floating(acc.as_double() + y.as_double());
         }
         return acc;
       }},
      {"min",
       [](const Value& v, CallArgs& a, int l) {
         List items = iterate(v, l);
         if (items.empty()) return Value::undefined("min");
         const Value* attr = arg_at(a, 1, "attribute");
         py_sort(
             items,
             [&](const Value& x) {
               return sort_key(attr ? attr_path(x, py_str(*attr), l) : x,
                               flag(a, 0, "case_sensitive", false));
             },
             false, l);
         return items.front();
       }},
      {"max",
       [](const Value& v, CallArgs& a, int l) {
         List items = iterate(v, l);
         if (items.empty()) return Value::undefined("max");
         const Value* attr = arg_at(a, 1, "attribute");
         // Python's max keeps the first of equal maxima: sort descending (stable), take the front.
         py_sort(
             items,
             [&](const Value& x) {
               return sort_key(attr ? attr_path(x, py_str(*attr), l) : x,
                               flag(a, 0, "case_sensitive", false));
             },
             true, l);
         return items.front();
       }},
      {"batch",
       [](const Value& v, CallArgs& a, int l) {
         const Value* n = arg_at(a, 0, "linecount");
         if (!n || n->i <= 0) runtime_error(l, "batch requires a positive line count");
         const Value* fill = arg_at(a, 1, "fill_with");
         List out, cur;
         for (const Value& x : iterate(v, l)) {
           cur.push_back(x);
           if (static_cast<int64_t>(cur.size()) == n->i)
             out.push_back(Value::make_list(std::move(cur))), cur.clear();
         }
         if (!cur.empty()) {
           while (fill && static_cast<int64_t>(cur.size()) < n->i) cur.push_back(*fill);
           out.push_back(Value::make_list(std::move(cur)));
         }
         return Value::make_list(std::move(out));
       }},
  };
  return table;
}

Value select_impl(const Value& v, CallArgs& a, int l, bool with_attr, bool keep) {
  List out;
  if (!v.truthy()) return Value::make_list();  // jinja2 iterates `if seq`: a falsy input is empty
  size_t test_at = with_attr ? 1 : 0;
  for (const Value& item : iterate(v, l)) {
    Value subject =
        with_attr ? attr_path(item, a.positional.empty() ? "" : py_str(a.positional[0]), l) : item;
    bool ok;
    if (a.positional.size() <= test_at) {
      ok = subject.truthy();
    } else {
      CallArgs sub = rest_args(a, test_at + 1);
      ok = apply_test(py_str(a.positional[test_at]), subject, sub, l);
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

}  // namespace

// markupsafe.escape: Markup stays as it is, anything else is str()'d, escaped and made Markup.
Value escape(const Value& v) {
  if (v.is_string() && v.is_safe) return v;
  Value out = Value::string(html_escape(py_str(v)));
  out.is_safe = true;
  return out;
}

Value apply_filter(const std::string& name, const Value& input, CallArgs& args, int line) {
  std::string n = name == "d" ? "default" : name;
  if (n == "select" || n == "reject") return select_impl(input, args, line, false, n == "select");
  if (n == "selectattr" || n == "rejectattr")
    return select_impl(input, args, line, true, n == "selectattr");
  auto it = filters().find(n);
  if (it == filters().end())
    throw TemplateError(TemplateFailure::unsupported, line,
                        fmt::format("unsupported filter '{}'", name));
  return it->second(input, args, line);
}

bool is_known_filter(const std::string& name) {
  return name == "d" || name == "select" || name == "reject" || name == "selectattr" ||
         name == "rejectattr" || filters().count(name) > 0;
}

}  // namespace ferry::chat
