#pragma once
// The values a chat template computes with, modelled on the Python objects jinja2 sees when
// transformers renders a template: None, bool, int, float, str, list (tuples too), dict (insertion
// ordered, as Python's), jinja2's Undefined, a namespace() and callables (macros, methods).
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ferry::chat {

struct Value;
using List = std::vector<Value>;

// An insertion-ordered string-keyed dict. Chat contexts are small (a few dozen keys), so a linear
// scan beats a hash map and keeps Python's iteration order without a second index.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value v);
  // Appends a key the caller knows is new (JSON objects, the loop variable): no lookup.
  void add_unique(std::string key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Callable = std::function<Value(CallArgs&)>;

struct Value {
  enum class Type { undefined, none, boolean, integer, floating, string, list, dict, callable };
  Type type = Type::undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;  // the text of a string; for undefined, the name that was missing (errors)
  // Shared, as Python objects are: a namespace() mutated through `set ns.x` is seen everywhere.
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Callable> fn;
  bool is_namespace = false;  // a dict made by namespace(): attribute assignment allowed
  bool is_tuple = false;      // a list made from a tuple literal or items(): prints with ()
  // A string that is markupsafe's Markup (made by `safe`, `e`/`escape`): escaping leaves it as it
  // is, and `+` with a plain string escapes the plain one (Markup.__add__/__radd__).
  bool is_safe = false;

  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value make_list(List v = {}, bool tuple = false);
  static Value make_dict(Dict v = {});
  static Value function(Callable c);

  bool is_undefined() const { return type == Type::undefined; }
  bool is_none() const { return type == Type::none; }
  bool is_string() const { return type == Type::string; }
  bool is_number() const {
    return type == Type::integer || type == Type::floating || type == Type::boolean;
  }
  bool is_list() const { return type == Type::list; }
  bool is_dict() const { return type == Type::dict; }
  double as_double() const;
  bool truthy() const;
};

Value from_json(const nlohmann::ordered_json& j);
// Lists become arrays, dicts objects; undefined/callables are an error (as json.dumps raises).
nlohmann::ordered_json to_json(const Value& v);

// Python's str(v) (jinja2 prints values with it): None -> "None", True -> "True", 1.0 -> "1.0",
// lists and dicts in repr form. Undefined prints as "".
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
std::string py_float_repr(double d);
// json.dumps as transformers' tojson calls it (its defaults: ensure_ascii=False, no indent,
// Python's separators — ", " and ": ", or "," and ": " with an indent — keys in insertion order).
struct JsonDumpOptions {
  int indent = -1;  // <0: on one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::optional<std::string> item_separator;  // separators=(item, key); unset: Python's default
  std::optional<std::string> key_separator;
};
std::string py_json_dumps(const Value& v, const JsonDumpOptions& opts = {});

bool py_equal(const Value& a, const Value& b);
// Python's <: numbers with numbers, strings with strings, lists elementwise; else a type error
// (returns false in *ok).
bool py_less(const Value& a, const Value& b, bool* ok);
const char* type_name(const Value& v);

}  // namespace ferry::chat
