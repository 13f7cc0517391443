#pragma once
// jinja2's builtins as the chat templates use them: filters, tests, attribute and item access
// (with Python's str/dict methods) and the globals transformers installs. Every function takes the
// template line for its errors; a builtin this interpreter lacks is a TemplateFailure::unsupported
// error, never a silent fallback.
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/value.hpp"

namespace ferry::chat {

Value apply_filter(const std::string& name, const Value& input, CallArgs& args, int line);
bool apply_test(const std::string& name, const Value& v, CallArgs& args, int line);
// jinja2 rejects an unknown filter or test when it compiles the template, executed or not.
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

// obj.name as jinja2's sandbox resolves it: Python attributes (methods) first, then obj[name];
// a miss is undefined; any attribute of undefined is an error.
Value get_attribute(const Value& obj, const std::string& name, int line);
// A bound str method (s.startswith, s.split, ...); undefined for a name str does not have.
Value string_method(const std::string& s, const std::string& name, int line);
// obj[key]: item first, then attribute (jinja2's Environment.getitem).
Value get_item(const Value& obj, const Value& key, int line);
// obj[start:stop:step] with Python's rules (None bounds, negatives, reversed steps).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step,
                int line);

// range, dict, namespace, raise_exception, strftime_now (formatting `now`, UTC). Every namespace()
// made is recorded in `namespaces`: a namespace may hold itself (`set ns.me = ns`), a shared_ptr
// cycle the caller breaks after rendering by clearing them.
void install_globals(Dict& globals, std::time_t now,
                     std::shared_ptr<std::vector<std::weak_ptr<Dict>>> namespaces);

// Python's iteration of a value: list items, dict keys, string code points; undefined is empty.
List iterate(const Value& v, int line);
// len(): code points of a string, items of a list or dict; undefined is 0.
int64_t py_len(const Value& v, int line);

// markupsafe's escape (the `e` filter): Markup unchanged, else the escaped str() as Markup.
Value escape(const Value& v);

// UTF-8 helpers shared by the builtins.
std::vector<std::string> utf8_chars(std::string_view s);
int64_t utf8_length(std::string_view s);  // code points
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);

// A keyword or positional argument of a builtin call: keyword `name` wins, else positional `index`.
const Value* arg_at(CallArgs& args, size_t index, const char* name);

}  // namespace ferry::chat
