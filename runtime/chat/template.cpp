// The evaluator: statements write to one output string, expressions return Values. Scoping follows
// jinja2: a for loop's body gets a fresh scope per iteration (so `set` inside a loop does not leak,
// hence namespace()), `if` opens none, a macro call gets its own scope above the one it was
// defined in.
#include "runtime/chat/template.hpp"

#include <cmath>

#include "runtime/chat/ast.hpp"
#include "runtime/chat/builtins.hpp"

namespace ferry::chat {
namespace {

struct Scope {
  Dict vars;
  const Scope* parent = nullptr;

  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent)
      if (const Value* v = s->vars.find(name)) return v;
    return nullptr;
  }
};

enum class Flow { normal, break_, continue_ };

// A template is untrusted input (a GGUF's metadata, a --chat-template-file): nested range() loops
// or a repeated string could run for hours or exhaust memory. These bounds sit far above any chat
// template (a 62-message Qwen3.5 render takes some ten thousand steps and 30 KB) and turn a runaway
// render into an error.
constexpr int64_t kMaxSteps = 5'000'000;
constexpr double kMaxOutputBytes = 64.0 * 1024 * 1024;

[[noreturn]] void runtime_error(int line, const std::string& what) {
  throw TemplateError(TemplateFailure::runtime, line, what);
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

class Interp {
 public:
  Flow exec(const Body& body, Scope& scope, std::string& out) {
    for (const auto& s : body) {
      Flow f = exec(*s, scope, out);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Value eval(const Expr& e, Scope& scope) {
    if (++steps_ > kMaxSteps)
      runtime_error(e.line, fmt::format("the template ran more than {} steps", kMaxSteps));
    try {
      return eval_inner(e, scope);
    } catch (const TemplateError& err) {
      if (err.line() > 0) throw;
      throw TemplateError(err.failure(), e.line, err.detail());  // a builtin's error: add our line
    }
  }

 private:
  Flow exec(const Stmt& s, Scope& scope, std::string& out) {
    if (++steps_ > kMaxSteps)
      runtime_error(s.line, fmt::format("the template ran more than {} steps", kMaxSteps));
    if (out.size() > kMaxOutputBytes) runtime_error(s.line, "the template's output passed 64 MiB");
    switch (s.kind) {
      case Stmt::Kind::text:
        out += s.text;
        return Flow::normal;
      case Stmt::Kind::output:
        out += py_str(eval(*s.expr, scope));
        return Flow::normal;
      case Stmt::Kind::if_:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, scope).truthy()) return exec(body, scope, out);
        return exec(s.else_body, scope, out);
      case Stmt::Kind::for_:
        return exec_for(s, scope, out);
      case Stmt::Kind::set: {
        Value v = eval(*s.expr, scope);
        if (!s.attr.empty()) {
          const Value* ns = scope.lookup(s.targets[0]);
          if (!ns || !ns->is_dict() || !ns->is_namespace)
            runtime_error(s.line, "cannot assign attribute on non-namespace object");
          ns->dict->set(s.attr, std::move(v));
        } else {
          assign(s.targets, v, scope, s.line);
        }
        return Flow::normal;
      }
      case Stmt::Kind::set_block: {
        std::string captured;
        Scope block{{}, &scope};  // jinja2 renders a block set's body in a frame of its own
        declare_undefined(block, s.undefined_at_entry);
        exec(s.body, block, captured);
        scope.vars.set(s.targets[0], Value::string(std::move(captured)));
        return Flow::normal;
      }
      case Stmt::Kind::macro:
        scope.vars.set(s.name, make_macro(s, scope));
        return Flow::normal;
      case Stmt::Kind::break_:
        return Flow::break_;
      case Stmt::Kind::continue_:
        return Flow::continue_;
    }
    return Flow::normal;
  }

  void assign(const std::vector<std::string>& targets, const Value& v, Scope& scope, int line) {
    if (targets.size() == 1) {
      scope.vars.set(targets[0], v);
      return;
    }
    List items = iterate(v, line);
    if (items.size() != targets.size())
      runtime_error(
          line, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
    for (size_t k = 0; k < targets.size(); ++k) scope.vars.set(targets[k], items[k]);
  }

  Flow exec_for(const Stmt& s, Scope& scope, std::string& out) {
    Value seq = eval(*s.expr, scope);
    if (seq.is_none() || seq.is_number() || seq.type == Value::Type::callable)
      runtime_error(s.line, fmt::format("'{}' object is not iterable", type_name(seq)));
    List items = iterate(seq, s.line);
    // Every item costs a step, looped over or filtered out, even with an empty body.
    steps_ += static_cast<int64_t>(items.size());
    if (steps_ > kMaxSteps)
      runtime_error(s.line, fmt::format("the template ran more than {} steps", kMaxSteps));
    if (s.cond) {  // `for x in xs if cond`: loop.* counts only the kept items
      List kept;
      for (const Value& it : items) {
        Scope probe{{}, &scope};
        assign(s.targets, it, probe, s.line);
        if (eval(*s.cond, probe).truthy()) kept.push_back(it);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    // loop.cycle(...) is one callable per loop reading the current position (not one per item).
    auto position = std::make_shared<int64_t>(0);
    const Value cycle = Value::function([position](CallArgs& a) -> Value {
      if (a.positional.empty()) runtime_error(0, "no items for cycling given");
      return a.positional[static_cast<size_t>(*position) % a.positional.size()];
    });
    bool completed = false;
    for (int64_t k = 0; k < n; ++k) {
      Scope iter{{}, &scope};
      Dict loop;
      loop.add_unique("index", Value::integer(k + 1));
      loop.add_unique("index0", Value::integer(k));
      loop.add_unique("revindex", Value::integer(n - k));
      loop.add_unique("revindex0", Value::integer(n - k - 1));
      loop.add_unique("first", Value::boolean(k == 0));
      loop.add_unique("last", Value::boolean(k == n - 1));
      loop.add_unique("length", Value::integer(n));
      loop.add_unique("depth", Value::integer(1));
      loop.add_unique("depth0", Value::integer(0));
      loop.add_unique("previtem", k > 0 ? items[k - 1] : Value::undefined("previtem"));
      loop.add_unique("nextitem", k + 1 < n ? items[k + 1] : Value::undefined("nextitem"));
      *position = k;
      loop.add_unique("cycle", cycle);
      iter.vars.set("loop", Value::make_dict(std::move(loop)));
      declare_undefined(iter, s.undefined_at_entry);
      assign(s.targets, items[k], iter, s.line);
      Flow f = exec(s.body, iter, out);
      if (f == Flow::break_) break;
      // jinja2 clears its "no iteration" flag at the end of a body run to completion, so a loop
      // whose every iteration breaks or continues still runs its else.
      if (f == Flow::normal) completed = true;
    }
    if (!completed) {
      Scope otherwise{{}, &scope};
      declare_undefined(otherwise, s.else_undefined_at_entry);
      return exec(s.else_body, otherwise, out);
    }
    return Flow::normal;
  }

  Value make_macro(const Stmt& s, const Scope& defined_in) {
    const Stmt* m = &s;
    const Scope* parent = &defined_in;
    return Value::function([this, m, parent](CallArgs& a) -> Value {
      // jinja2 stops runaway recursion with Python's RecursionError; so does this bound.
      struct Depth {
        int& d;
        explicit Depth(int& depth) : d(depth) { ++d; }
        ~Depth() { --d; }
      } depth(macro_depth_);
      if (macro_depth_ > 100)
        runtime_error(m->line, fmt::format("macro '{}' nested more than 100 calls deep", m->name));
      Scope local{{}, parent};
      declare_undefined(local, m->undefined_at_entry);
      if (a.positional.size() > m->params.size())
        runtime_error(m->line, fmt::format("macro '{}' takes not more than {} argument(s)", m->name,
                                           m->params.size()));
      for (size_t k = 0; k < m->params.size(); ++k) {
        const auto& [pname, def] = m->params[k];
        const Value* kw = nullptr;
        for (const auto& [key, v] : a.keyword)
          if (key == pname) kw = &v;
        if (k < a.positional.size())
          local.vars.set(pname, a.positional[k]);
        else if (kw)
          local.vars.set(pname, *kw);
        else if (def)
          local.vars.set(pname, eval(*def, local));
        else
          local.vars.set(pname, Value::undefined(pname));
      }
      for (const auto& [key, v] : a.keyword) {
        bool known = false;
        for (const auto& p : m->params) known = known || p.first == key;
        if (!known)
          runtime_error(m->line, fmt::format("macro '{}' has no argument '{}'", m->name, key));
      }
      std::string out;
      exec(m->body, local, out);
      return Value::string(std::move(out));
    });
  }

  CallArgs eval_args(const Expr& e, Scope& scope, size_t first) {
    CallArgs a;
    for (size_t k = first; k < e.args.size(); ++k) a.positional.push_back(eval(*e.args[k], scope));
    for (const auto& [key, ex] : e.kwargs) a.keyword.emplace_back(key, eval(*ex, scope));
    return a;
  }

  Value eval_inner(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case Expr::Kind::literal:
        return e.value;
      case Expr::Kind::name: {
        const Value* v = scope.lookup(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case Expr::Kind::list:
      case Expr::Kind::tuple: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        return Value::make_list(std::move(items), e.kind == Expr::Kind::tuple);
      }
      case Expr::Kind::dict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k], scope);
          if (!key.is_string())
            throw TemplateError(TemplateFailure::unsupported, e.line,
                                "unsupported dict key that is not a string");
          d.set(key.s, eval(*e.args[k + 1], scope));
        }
        return Value::make_dict(std::move(d));
      }
      case Expr::Kind::attr:
        return get_attribute(eval(*e.args[0], scope), e.name, e.line);
      case Expr::Kind::subscript:
        return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope), e.line);
      case Expr::Kind::slice: {
        auto part = [&](size_t k) { return e.args[k] ? eval(*e.args[k], scope) : Value::none(); };
        return get_slice(eval(*e.args[0], scope), part(1), part(2), part(3), e.line);
      }
      case Expr::Kind::call: {
        Value callee = eval(*e.args[0], scope);
        CallArgs a = eval_args(e, scope, 1);
        if (callee.type != Value::Type::callable) {
          if (callee.is_undefined())
            runtime_error(e.line,
                          fmt::format("'{}' is undefined", callee.s.empty() ? "value" : callee.s));
          runtime_error(e.line, fmt::format("'{}' object is not callable", type_name(callee)));
        }
        return (*callee.fn)(a);
      }
      case Expr::Kind::filter: {
        Value in = eval(*e.args[0], scope);
        CallArgs a = eval_args(e, scope, 1);
        return apply_filter(e.name, in, a, e.line);
      }
      case Expr::Kind::test: {
        Value in = eval(*e.args[0], scope);
        CallArgs a = eval_args(e, scope, 1);
        return Value::boolean(apply_test(e.name, in, a, e.line) != e.negated);
      }
      case Expr::Kind::unary: {
        Value v = eval(*e.args[0], scope);
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (!v.is_number())
          runtime_error(e.line,
                        fmt::format("bad operand type for unary {}: '{}'", e.name, type_name(v)));
        if (e.name == "+") return v.type == Value::Type::boolean ? Value::integer(v.b) : v;
        if (v.type == Value::Type::floating) return Value::floating(-v.f);
        return Value::integer(-(v.type == Value::Type::boolean ? int64_t{v.b} : v.i));
      }
      case Expr::Kind::logical: {
        Value left = eval(*e.args[0], scope);
        if (e.name == "and") return left.truthy() ? eval(*e.args[1], scope) : left;
        return left.truthy() ? left : eval(*e.args[1], scope);
      }
      case Expr::Kind::cond:
        if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value::undefined();
      case Expr::Kind::binary:
        return binary(e, eval(*e.args[0], scope), eval(*e.args[1], scope));
    }
    return Value::undefined();
  }

  Value binary(const Expr& e, const Value& a, const Value& b) {
    const std::string& op = e.name;
    if (op == "~") return Value::string(py_str(a) + py_str(b));
    if (op == "==") return Value::boolean(py_equal(a, b));
    if (op == "!=") return Value::boolean(!py_equal(a, b));
    if (op == "in" || op == "not in") return Value::boolean(contains(b, a, e.line) == (op == "in"));
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      bool ok = true;
      bool r = false;
      if (op == "<")
        r = py_less(a, b, &ok);
      else if (op == ">")
        r = py_less(b, a, &ok);
      else if (op == "<=")
        r = !py_less(b, a, &ok);
      else
        r = !py_less(a, b, &ok);
      if (!ok)
        runtime_error(e.line, fmt::format("'{}' not supported between instances of '{}' and '{}'",
                                          op, type_name(a), type_name(b)));
      return Value::boolean(r);
    }
    if (op == "%" && a.is_string())
      throw TemplateError(TemplateFailure::unsupported, e.line,
                          "unsupported operator: printf-style string formatting");
    if (a.is_undefined() || b.is_undefined())
      runtime_error(e.line, fmt::format("'{}' is undefined", a.is_undefined() ? a.s : b.s));
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        if (!a.is_safe && !b.is_safe) return Value::string(a.s + b.s);
        Value out = Value::string(escape(a).s + escape(b).s);  // Markup + str escapes the str
        out.is_safe = true;
        return out;
      }
      if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
        List out = *a.list;
        out.insert(out.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(out), a.is_tuple);
      }
    }
    if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
      const Value& seq = (a.is_string() || a.is_list()) ? a : b;
      const Value& count = &seq == &a ? b : a;
      if (count.type != Value::Type::integer && count.type != Value::Type::boolean)
        runtime_error(e.line, "can't multiply sequence by non-int");
      int64_t n = count.type == Value::Type::boolean ? count.b : count.i;
      const double size = static_cast<double>(seq.is_string() ? seq.s.size() : seq.list->size()) *
                          static_cast<double>(std::max<int64_t>(n, 0));
      if (size > kMaxOutputBytes) runtime_error(e.line, "repeated sequence too long");
      if (seq.is_string()) {
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq.s;
        return Value::string(out);
      }
      List out;
      for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
      return Value::make_list(std::move(out), seq.is_tuple);
    }
    if (!a.is_number() || !b.is_number())
      runtime_error(e.line, fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op,
                                        type_name(a), type_name(b)));
    bool ints = a.type != Value::Type::floating && b.type != Value::Type::floating;
    int64_t x = a.type == Value::Type::boolean ? a.b : a.i,
            y = b.type == Value::Type::boolean ? b.b : b.i;
    double fx = a.as_double(), fy = b.as_double();
    // Python's ints are unbounded; one past 64 bits is refused rather than wrapped.
    auto checked = [&](bool overflow, int64_t r) {
      if (overflow)
        throw TemplateError(TemplateFailure::unsupported, e.line,
                            "unsupported integer beyond 64 bits");
      return Value::integer(r);
    };
    if (op == "+" || op == "-" || op == "*") {
      if (!ints) return Value::floating(op == "+" ? fx + fy : op == "-" ? fx - fy : fx * fy);
      int64_t r = 0;
      bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                      : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                  : __builtin_mul_overflow(x, y, &r);
      return checked(overflow, r);
    }
    if ((op == "/" || op == "//" || op == "%") && fy == 0.0)
      runtime_error(e.line, "division by zero");
    if (op == "/") return Value::floating(fx / fy);
    if (op == "//" || op == "%") {
      if (ints) return Value::integer(op == "//" ? floor_div(x, y) : x - floor_div(x, y) * y);
      // CPython's float divmod (floatobject.c): the remainder from fmod, the quotient rounded from
      // (x - mod) / y, so that 1.0 // 0.1 is 9.0 and 0.0 % 2.0 is 0.0, as Python prints them.
      double mod = std::fmod(fx, fy);
      double div = (fx - mod) / fy;
      if (mod != 0.0) {
        if ((fy < 0) != (mod < 0)) {
          mod += fy;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, fy);
      }
      double floordiv = 0.0;
      if (div != 0.0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
      } else {
        floordiv = std::copysign(0.0, fx / fy);
      }
      return Value::floating(op == "//" ? floordiv : mod);
    }
    if (op == "**") {
      if (ints && y >= 0) {  // square and multiply, refusing what leaves 64 bits
        int64_t p = 1, base = x;
        for (int64_t n = y; n > 0; n >>= 1) {
          if ((n & 1) && __builtin_mul_overflow(p, base, &p)) checked(true, 0);
          if (n > 1 && __builtin_mul_overflow(base, base, &base)) checked(true, 0);
        }
        return Value::integer(p);
      }
      if (fx == 0.0 && fy < 0) runtime_error(e.line, "0.0 cannot be raised to a negative power");
      double p = std::pow(fx, fy);
      if (std::isinf(p) && std::isfinite(fx) && std::isfinite(fy))
        runtime_error(e.line, "OverflowError: (34, 'Numerical result out of range')");
      return Value::floating(p);
    }
    throw TemplateError(TemplateFailure::unsupported, e.line,
                        fmt::format("unsupported operator '{}'", op));
  }

  int macro_depth_ = 0;

 public:
  static void declare_undefined(Scope& scope, const std::vector<std::string>& names) {
    for (const auto& n : names) scope.vars.add_unique(n, Value::undefined(n));
  }

 private:
  int64_t steps_ = 0;

  bool contains(const Value& container, const Value& item, int line) {
    switch (container.type) {
      case Value::Type::string:
        if (!item.is_string())
          runtime_error(line, fmt::format("'in <string>' requires string as left operand, not {}",
                                          type_name(item)));
        return container.s.find(item.s) != std::string::npos;
      case Value::Type::list:
        for (const Value& v : *container.list)
          if (py_equal(v, item)) return true;
        return false;
      case Value::Type::dict:
        if ((item.is_list() && !item.is_tuple) || item.is_dict())  // Python hashes the key first
          runtime_error(line, fmt::format("unhashable type: '{}'", type_name(item)));
        return item.is_string() && container.dict->find(item.s) != nullptr;
      case Value::Type::undefined:
        return false;
      default:
        runtime_error(line,
                      fmt::format("argument of type '{}' is not iterable", type_name(container)));
    }
  }
};

}  // namespace

Template::Template(const std::string& source)
    : body_(std::make_shared<const Body>(parse_template(source))),
      undefined_at_entry_(analyze_symbols(*body_)) {}

std::string Template::render(const nlohmann::ordered_json& context, std::time_t now) const {
  if (!context.is_object())
    throw TemplateError(TemplateFailure::runtime, 0, "the template context must be a JSON object");
  Scope globals;
  auto namespaces = std::make_shared<std::vector<std::weak_ptr<Dict>>>();
  struct BreakCycles {
    std::shared_ptr<std::vector<std::weak_ptr<Dict>>> list;
    ~BreakCycles() {
      for (auto& w : *list)
        if (auto d = w.lock()) d->items.clear();
    }
  } break_cycles{namespaces};
  install_globals(globals.vars, now, namespaces);
  for (auto it = context.begin(); it != context.end(); ++it)
    globals.vars.set(it.key(), from_json(it.value()));
  Scope top{{}, &globals};
  Interp interp;
  std::string out;
  Interp::declare_undefined(top, undefined_at_entry_);
  interp.exec(*body_, top, out);
  return out;
}

}  // namespace ferry::chat
