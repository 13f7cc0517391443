#include "runtime/chat/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/chat/template_error.hpp"

namespace ferry::chat {

const Value* Dict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

Value* Dict::find(const std::string& key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  if (Value* slot = find(key)) {
    *slot = std::move(v);
    return;
  }
  items.emplace_back(key, std::move(v));
}

void Dict::add_unique(std::string key, Value v) {
  items.emplace_back(std::move(key), std::move(v));
}

Value Value::undefined(std::string name) {
  Value v;
  v.s = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.type = Type::none;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.type = Type::boolean;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.type = Type::integer;
  v.i = x;
  return v;
}
Value Value::floating(double x) {
  Value v;
  v.type = Type::floating;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.type = Type::string;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(List x, bool tuple) {
  Value v;
  v.type = Type::list;
  v.list = std::make_shared<List>(std::move(x));
  v.is_tuple = tuple;
  return v;
}
Value Value::make_dict(Dict x) {
  Value v;
  v.type = Type::dict;
  v.dict = std::make_shared<Dict>(std::move(x));
  return v;
}
Value Value::function(Callable c) {
  Value v;
  v.type = Type::callable;
  v.fn = std::make_shared<Callable>(std::move(c));
  return v;
}

double Value::as_double() const {
  switch (type) {
    case Type::boolean:
      return b ? 1.0 : 0.0;
    case Type::integer:
      return static_cast<double>(i);
    case Type::floating:
      return f;
    default:
      return 0.0;
  }
}

bool Value::truthy() const {
  switch (type) {
    case Type::undefined:
    case Type::none:
      return false;
    case Type::boolean:
      return b;
    case Type::integer:
      return i != 0;
    case Type::floating:
      return f != 0.0;
    case Type::string:
      return !s.empty();
    case Type::list:
      return !list->empty();
    case Type::dict:
      return is_namespace || !dict->items.empty();
    case Type::callable:
      return true;
  }
  return false;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      // Above INT64_MAX (Python would keep an exact big int): the nearest float, not a wrap.
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List out;
      out.reserve(j.size());
      for (const auto& e : j) out.push_back(from_json(e));
      return Value::make_list(std::move(out));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.add_unique(it.key(), from_json(it.value()));
      return Value::make_dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

nlohmann::ordered_json to_json(const Value& v) {
  switch (v.type) {
    case Value::Type::none:
      return nullptr;
    case Value::Type::boolean:
      return v.b;
    case Value::Type::integer:
      return v.i;
    case Value::Type::floating:
      return v.f;
    case Value::Type::string:
      return v.s;
    case Value::Type::list: {
      auto a = nlohmann::ordered_json::array();
      for (const auto& e : *v.list) a.push_back(to_json(e));
      return a;
    }
    case Value::Type::dict: {
      if (v.is_namespace)
        throw TemplateError(TemplateFailure::runtime, 0,
                            "Object of type Namespace is not JSON serializable");
      auto o = nlohmann::ordered_json::object();
      for (const auto& [k, e] : v.dict->items) o[k] = to_json(e);
      return o;
    }
    default:
      throw TemplateError(TemplateFailure::runtime, 0,
                          fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Python's repr: the shortest digits that round-trip, fixed notation when the decimal exponent is
  // in [-4, 16), else d.ddde+XX.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1);
        out += '.';
        out.append(digits, exp + 1, std::string::npos);
      }
    } else {
      out = "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e;
  }
  if (neg) out.insert(out.begin(), '-');
  return out;
}

static std::string repr_string(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(q))
      out += std::string("\\") + q;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else
      out += static_cast<char>(c);
  }
  return out + q;
}

std::string py_repr(const Value& v) {
  switch (v.type) {
    case Value::Type::string:
      return repr_string(v.s);
    case Value::Type::list: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + py_repr((*v.list)[k]);
      if (v.is_tuple && v.list->size() == 1) out += ",";
      return out + (v.is_tuple ? ")" : "]");
    }
    case Value::Type::dict: {
      // jinja2's Namespace prints as <Namespace {attrs}>; one nested inside prints as
      // <Namespace {...}> (a namespace may hold itself; Python prints the recursion so).
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : v.dict->items) {
        out += first ? "" : ", ";
        out += repr_string(k) + ": ";
        out += v.is_namespace && e.is_dict() && e.is_namespace ? "<Namespace {...}>" : py_repr(e);
        first = false;
      }
      out += '}';
      return v.is_namespace ? "<Namespace " + out + ">" : out;
    }
    default:
      return py_str(v);
  }
}

std::string py_str(const Value& v) {
  switch (v.type) {
    case Value::Type::undefined:
      return "";
    case Value::Type::none:
      return "None";
    case Value::Type::boolean:
      return v.b ? "True" : "False";
    case Value::Type::integer:
      return std::to_string(v.i);
    case Value::Type::floating:
      return py_float_repr(v.f);
    case Value::Type::string:
      return v.s;
    case Value::Type::callable:
      return "<function>";
    default:
      return py_repr(v);
  }
}

// Python's json string encoding: with ensure_ascii=False only '"', '\\' and control characters
// below 0x20 are escaped; with ensure_ascii=True every code point outside ' '..'~' is \uXXXX
// (UTF-16 surrogate pairs above U+FFFF), as json.encoder's py_encode_basestring(_ascii).
static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t k = 0; k < s.size(); ++k) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    char b[16];
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else if (!ensure_ascii || c < 0x80) {
      out += static_cast<char>(c);
    } else {
      size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      uint32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : n == 4 ? (c & 0x07) : 0xFFFD;
      for (size_t j = 1; j < n && k + j < s.size(); ++j)
        cp = (cp << 6) | (static_cast<unsigned char>(s[k + j]) & 0x3F);
      k += n - 1;
      if (cp > 0xFFFF) {
        cp -= 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", cp);
      }
      out += b;
    }
  }
  out += '"';
}

static void dumps(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  const bool pretty = o.indent >= 0;
  const std::string& item_sep =
      o.item_separator ? *o.item_separator : (pretty ? std::string(",") : std::string(", "));
  const std::string& key_sep = o.key_separator ? *o.key_separator : std::string(": ");
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(o.indent) * d, ' ');
  };
  switch (v.type) {
    case Value::Type::none:
      out += "null";
      return;
    case Value::Type::boolean:
      out += v.b ? "true" : "false";
      return;
    case Value::Type::integer:
      out += std::to_string(v.i);
      return;
    case Value::Type::floating:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f > 0 ? "Infinity" : "-Infinity";
      else
        out += py_float_repr(v.f);
      return;
    case Value::Type::string:
      json_string(out, v.s, o.ensure_ascii);
      return;
    case Value::Type::list: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        if (pretty) newline(depth + 1);
        dumps(out, (*v.list)[k], o, depth + 1);
      }
      if (pretty) newline(depth);
      out += ']';
      return;
    }
    case Value::Type::dict: {
      if (v.is_namespace)
        throw TemplateError(TemplateFailure::runtime, 0,
                            "Object of type Namespace is not JSON serializable");
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      bool first = true;
      for (const auto* kv : items) {
        if (!first) out += item_sep;
        first = false;
        if (pretty) newline(depth + 1);
        json_string(out, kv->first, o.ensure_ascii);
        out += key_sep;
        dumps(out, kv->second, o, depth + 1);
      }
      if (pretty) newline(depth);
      out += '}';
      return;
    }
    default:
      throw TemplateError(TemplateFailure::runtime, 0,
                          fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

std::string py_json_dumps(const Value& v, const JsonDumpOptions& opts) {
  std::string out;
  dumps(out, v, opts, 0);
  return out;
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type != Value::Type::floating && b.type != Value::Type::floating) {
      int64_t x = a.type == Value::Type::boolean ? a.b : a.i;
      int64_t y = b.type == Value::Type::boolean ? b.b : b.i;
      return x == y;
    }
    return a.as_double() == b.as_double();
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::undefined:
    case Value::Type::none:
      return true;
    case Value::Type::string:
      return a.s == b.s;
    case Value::Type::list:
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!py_equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Type::dict: {
      if (a.dict == b.dict) return true;
      if (a.is_namespace || b.is_namespace) return false;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, e] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !py_equal(e, *o)) return false;
      }
      return true;
    }
    case Value::Type::callable:
      return a.fn == b.fn;
    default:
      return false;
  }
}

bool py_less(const Value& a, const Value& b, bool* ok) {
  *ok = true;
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.s < b.s;
  if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      if (py_equal((*a.list)[k], (*b.list)[k])) continue;
      return py_less((*a.list)[k], (*b.list)[k], ok);
    }
    return a.list->size() < b.list->size();
  }
  *ok = false;
  return false;
}

const char* type_name(const Value& v) {
  switch (v.type) {
    case Value::Type::undefined:
      return "Undefined";
    case Value::Type::none:
      return "NoneType";
    case Value::Type::boolean:
      return "bool";
    case Value::Type::integer:
      return "int";
    case Value::Type::floating:
      return "float";
    case Value::Type::string:
      return "str";
    case Value::Type::list:
      return v.is_tuple ? "tuple" : "list";
    case Value::Type::dict:
      return v.is_namespace ? "Namespace" : "dict";
    case Value::Type::callable:
      return "function";
  }
  return "?";
}

}  // namespace ferry::chat
