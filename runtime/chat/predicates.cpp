// jinja2's tests (jinja2/tests.py): `x is defined`, `x is divisibleby 3`, ... with Python's
// semantics of the values they look at.
#include <cmath>
#include <set>

#include "runtime/chat/builtins.hpp"
#include "runtime/chat/template_error.hpp"

namespace ferry::chat {
namespace {

[[noreturn]] void runtime_error(int line, const std::string& what) {
  throw TemplateError(TemplateFailure::runtime, line, what);
}

}  // namespace

bool is_known_test(const std::string& name) {
  static const std::set<std::string> tests = {
      "defined",  "undefined",   "none",    "string", "number",  "integer",
      "float",    "boolean",     "true",    "false",  "mapping", "iterable",
      "sequence", "callable",    "equalto", "eq",     "==",      "sameas",
      "ne",       "!=",          "lt",      "<",      "gt",      ">",
      "le",       "<=",          "ge",      ">=",     "in",      "odd",
      "even",     "divisibleby", "lower",   "upper",  "filter",  "test"};
  return tests.count(name) > 0;
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args, int line) {
  const Value* arg = arg_at(args, 0, "value");
  auto need = [&]() -> const Value& {
    if (!arg) runtime_error(line, fmt::format("test '{}' takes an argument", name));
    return *arg;
  };
  using T = Value::Type;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.type == T::integer;
  if (name == "float") return v.type == T::floating;
  if (name == "boolean") return v.type == T::boolean;
  if (name == "true") return v.type == T::boolean && v.b;
  if (name == "false") return v.type == T::boolean && !v.b;
  if (name == "mapping") return v.is_dict() && !v.is_namespace;
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence")
    return v.is_list() || (v.is_dict() && !v.is_namespace) || v.is_string() || v.is_undefined();
  if (name == "callable")
    return v.type == T::callable || v.is_undefined();  // Undefined has __call__
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
    return py_equal(v, need());
  if (name == "ne" || name == "!=") return !py_equal(v, need());
  if (name == "lt" || name == "<" || name == "gt" || name == ">" || name == "le" || name == "<=" ||
      name == "ge" || name == ">=") {
    bool ok = true;
    const Value& o = need();
    bool r = (name == "lt" || name == "<")    ? py_less(v, o, &ok)
             : (name == "gt" || name == ">")  ? py_less(o, v, &ok)
             : (name == "le" || name == "<=") ? !py_less(o, v, &ok)
                                              : !py_less(v, o, &ok);
    if (!ok) runtime_error(line, "comparison between unorderable types");
    return r;
  }
  if (name == "in") {
    const Value& c = need();
    if (c.is_string()) return v.is_string() && c.s.find(v.s) != std::string::npos;
    if (c.is_dict()) return v.is_string() && c.dict->find(v.s);
    for (const Value& x : iterate(c, line))
      if (py_equal(x, v)) return true;
    return false;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    // Python's `value % n`: ints, bools and floats alike.
    if (!v.is_number())
      runtime_error(line, fmt::format("test '{}' needs a number, not {}", name, type_name(v)));
    const Value two = Value::integer(2);
    const Value& d = name == "divisibleby" ? need() : two;
    if (!d.is_number()) runtime_error(line, "divisibleby needs a number");
    if (d.as_double() == 0.0) runtime_error(line, "division by zero");
    if (v.type != T::floating && d.type != T::floating) {
      int64_t x = v.type == T::boolean ? v.b : v.i, n = d.type == T::boolean ? d.b : d.i;
      int64_t m = x % n;
      if (name == "odd") return m != 0;
      return m == 0;
    }
    double m = std::fmod(v.as_double(), d.as_double());
    return name == "odd" ? (m != 0.0 && std::fabs(m) == 1.0) : m == 0.0;
  }
  if (name == "filter") return v.is_string() && is_known_filter(v.s);  // `'from_json' is filter`
  if (name == "test") return v.is_string() && is_known_test(v.s);
  if (name == "lower" || name == "upper") {  // str(v).islower() / isupper()
    CallArgs none;
    return (*get_attribute(Value::string(py_str(v)), name == "lower" ? "islower" : "isupper", line)
                 .fn)(none)
        .b;
  }
  throw TemplateError(TemplateFailure::unsupported, line,
                      fmt::format("unsupported test '{}'", name));
}

}  // namespace ferry::chat
