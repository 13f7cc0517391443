// jinja2's symbol tracking (jinja2/idtracking.py) reduced to what the evaluator needs: for each
// frame, the names that start undefined. A frame's own statements are walked in order; nested
// frames (loop bodies and elses, macro bodies, block-set bodies) are analysed after their parent,
// seeing every name the parent references, as jinja2 compiles them.
#include <map>
#include <set>

#include "runtime/chat/ast.hpp"

namespace ferry::chat {
namespace {

enum class Ref { load, store, conditional };

struct Frame {
  std::map<std::string, Ref> first;  // the first reference to each name in this frame
  std::vector<std::pair<const Stmt*, bool /* the for loop's else */>> children;

  void load(const std::string& n) { first.emplace(n, Ref::load); }
  void store(const std::string& n, bool conditional) {
    first.emplace(n, conditional ? Ref::conditional : Ref::store);
  }

  void expr(const Expr* e) {
    if (!e) return;
    if (e->kind == Expr::Kind::name) load(e->name);
    for (const auto& a : e->args) expr(a.get());
    for (const auto& kw : e->kwargs) expr(kw.second.get());
  }

  void body(const Body& b, bool conditional) {
    for (const auto& s : b) {
      switch (s->kind) {
        case Stmt::Kind::output:
          expr(s->expr.get());
          break;
        case Stmt::Kind::set:
          expr(s->expr.get());  // the value is computed before the names are bound
          if (!s->attr.empty())
            load(s->targets[0]);  // ns.attr = ... reads ns
          else
            for (const auto& t : s->targets) store(t, conditional);
          break;
        case Stmt::Kind::set_block:
          store(s->targets[0], conditional);
          children.emplace_back(s.get(), false);
          break;
        case Stmt::Kind::if_:
          for (const auto& [cond, branch] : s->branches) {
            expr(cond.get());
            body(branch, true);  // jinja2's branch_update: names bound in a branch resolve first
          }
          body(s->else_body, true);
          break;
        case Stmt::Kind::for_:
          expr(s->expr.get());
          children.emplace_back(s.get(), false);
          if (!s->else_body.empty()) children.emplace_back(s.get(), true);
          break;
        case Stmt::Kind::macro:
          store(s->name, conditional);
          children.emplace_back(s.get(), false);
          break;
        default:
          break;
      }
    }
  }
};

// `owner` is the statement whose body (or, with `else_branch`, whose for-else) the frame is.
std::vector<std::string> analyze(const Body& body, const std::set<std::string>& outer,
                                 const Stmt* owner, bool else_branch) {
  Frame f;
  // A loop's targets and `loop`, a macro's parameters are the frame's parameters: defined first.
  if (owner && owner->kind == Stmt::Kind::for_ && !else_branch) {
    for (const auto& t : owner->targets) f.load(t);
    f.load("loop");
    f.expr(owner->cond.get());
  }
  if (owner && owner->kind == Stmt::Kind::macro)
    for (const auto& p : owner->params) f.load(p.first);
  f.body(body, false);
  std::vector<std::string> undefined;
  for (const auto& [name, ref] : f.first)
    if (ref == Ref::store && !outer.count(name)) undefined.push_back(name);
  std::set<std::string> seen = outer;
  for (const auto& kv : f.first) seen.insert(kv.first);
  for (const auto& [stmt, is_else] : f.children) {
    auto names = analyze(is_else ? stmt->else_body : stmt->body, seen, stmt, is_else);
    (is_else ? stmt->else_undefined_at_entry : stmt->undefined_at_entry) = std::move(names);
  }
  return undefined;
}

}  // namespace

std::vector<std::string> analyze_symbols(const Body& body) {
  return analyze(body, {}, nullptr, false);
}

}  // namespace ferry::chat
