// Checks of a parsed template that jinja2 makes when it compiles one: unknown filters and tests
// (outside conditionals) and break/continue outside a loop.
#include "runtime/chat/ast.hpp"
#include "runtime/chat/builtins.hpp"
#include "runtime/chat/template_error.hpp"

namespace ferry::chat {
namespace {

// jinja2 rejects an unknown filter or test when it compiles the template, except inside an `if`
// (its test and branches) or an inline `x if c else y`, where the check waits until the filter
// runs (jinja2's soft frames): `{% if args is string %}{{ args | from_json }}{% endif %}` compiles.
// A for loop, macro or block set inside the `if` is strict again, as jinja2's inner frames are.
void check_expr(const Expr* e, bool soft) {
  if (!e) return;
  soft = soft || e->kind == Expr::Kind::cond;
  if (!soft && e->kind == Expr::Kind::filter && !is_known_filter(e->name))
    throw TemplateError(TemplateFailure::unsupported, e->line,
                        fmt::format("unsupported filter '{}'", e->name));
  if (!soft && e->kind == Expr::Kind::test && !is_known_test(e->name))
    throw TemplateError(TemplateFailure::unsupported, e->line,
                        fmt::format("unsupported test '{}'", e->name));
  for (const auto& a : e->args) check_expr(a.get(), soft);
  for (const auto& kw : e->kwargs) check_expr(kw.second.get(), soft);
}

void check_body(const Body& body, bool soft, bool in_loop) {
  for (const auto& s : body) {
    switch (s->kind) {
      case Stmt::Kind::output:
      case Stmt::Kind::set:
        check_expr(s->expr.get(), soft);
        break;
      case Stmt::Kind::if_:
        for (const auto& [cond, b] : s->branches) {
          check_expr(cond.get(), true);
          check_body(b, true, in_loop);
        }
        check_body(s->else_body, true, in_loop);
        break;
      case Stmt::Kind::for_:
        check_expr(s->expr.get(), soft);
        check_expr(s->cond.get(), false);
        check_body(s->body, false, true);
        check_body(s->else_body, false, in_loop);  // the else runs after the loop
        break;
      case Stmt::Kind::macro:
        for (const auto& p : s->params) check_expr(p.second.get(), false);
        check_body(s->body, false, false);  // a macro is a function of its own
        break;
      case Stmt::Kind::set_block:
        check_body(s->body, false, in_loop);
        break;
      case Stmt::Kind::break_:
      case Stmt::Kind::continue_:
        if (!in_loop)
          throw TemplateError(TemplateFailure::syntax, s->line,
                              fmt::format("'{}' outside loop",
                                          s->kind == Stmt::Kind::break_ ? "break" : "continue"));
        break;
      default:
        break;
    }
  }
}

}  // namespace

void validate_template(const Body& body) {
  check_body(body, false, false);
}

}  // namespace ferry::chat
