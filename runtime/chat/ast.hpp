#pragma once
// The syntax tree of a template: expressions and statements, each with its source line (errors
// name it). One node type per family keeps the parser and evaluator short; the fields a kind uses
// are listed next to it.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/chat/value.hpp"

namespace ferry::chat {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // name
    list,       // args: items
    tuple,      // args: items
    dict,       // args: key0, value0, key1, value1, ...
    attr,       // args[0] . name
    subscript,  // args[0] [ args[1] ]
    slice,      // args[0] [ args[1] : args[2] : args[3] ]  (null ExprPtr: omitted)
    call,       // args[0] ( args[1..], kwargs )
    filter,     // args[0] | name ( args[1..], kwargs )
    test,       // args[0] is [not: negated] name ( args[1..] )
    unary,      // name ("-", "+", "not") args[0]
    binary,     // args[0] name args[1]; name: + - * / // % ** ~ == != < <= > >= in "not in"
    logical,    // args[0] name ("and", "or") args[1]: short-circuit, returns an operand
    cond,       // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using Body = std::vector<std::shared_ptr<const Stmt>>;

struct Stmt {
  enum class Kind {
    text,       // text
    output,     // {{ expr }}
    if_,        // branches (cond, body); else_body
    for_,       // targets in expr [if cond] body; else_body
    set,        // targets = expr, or attr set: targets[0].attr = expr
    set_block,  // {% set targets[0] %} body {% endset %}
    macro,      // name(params) body
    break_,
    continue_,
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::string name;
  std::string attr;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters with defaults (or null)
  Body body;
  Body else_body;
  // for_ (its body), macro, set_block: the names jinja2 starts as undefined in that frame
  // (analyze_symbols; filled once after parsing).
  mutable std::vector<std::string> undefined_at_entry;
  mutable std::vector<std::string> else_undefined_at_entry;  // for_: its else
};

// Parses the token list of lex_template into the statements of the template, then checks them
// as jinja2's compiler does (validate_template). Throws TemplateError.
Body parse_template(const std::string& source);
void validate_template(const Body& body);

// jinja2's symbol tracking (idtracking.py), for the one place where it differs from looking names
// up scope by scope: a name whose first reference in a frame (the template, a loop body, a macro,
// a block set) is an assignment outside any `if`, and which no enclosing frame references, starts
// that frame undefined — not as the context's value — so `{% for %}{{ b }}{% endfor %}{% set b = 1
// %}` prints nothing even when the context has b. Fills each nested frame's undefined_at_entry and
// returns the template frame's list.
std::vector<std::string> analyze_symbols(const Body& body);

}  // namespace ferry::chat
