// Recursive descent over lex_template's tokens, following jinja2's grammar and operator
// precedence (jinja2/parser.py): condexpr < or < and < not < compare < + - < ~ < * / // % < ** <
// unary - + < postfix (. [] ()) and filters/tests.
#include <cstdlib>
#include <set>
#include <stdexcept>

#include "runtime/chat/ast.hpp"
#include "runtime/chat/lexer.hpp"
#include "runtime/chat/template_error.hpp"

namespace ferry::chat {
namespace {

using MutExpr = std::shared_ptr<Expr>;

MutExpr node(Expr::Kind kind, int line) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

// Hostile templates must not overflow the stack: nesting (brackets, unary operators, blocks) is
// bounded far above what any chat template uses.
constexpr int kMaxNesting = 200;

int64_t int_literal(const Token& tok) {
  try {
    return std::stoll(tok.value);
  } catch (const std::out_of_range&) {
    throw TemplateError(TemplateFailure::unsupported, tok.line,
                        "unsupported integer beyond 64 bits");
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(pos_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::op && peek(ahead).value == op;
  }
  bool is_name(const char* n, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::name && peek(ahead).value == n;
  }
  [[noreturn]] void syntax(const std::string& what) const {
    throw TemplateError(TemplateFailure::syntax, peek().line, what);
  }
  void expect_op(const char* op) {
    if (!is_op(op)) syntax(fmt::format("expected '{}'", op));
    ++pos_;
  }
  std::string expect_name() {
    if (peek().kind != Tok::name) syntax("expected a name");
    return next().value;
  }
  void expect_block_end() {
    if (peek().kind != Tok::block_end)
      syntax(fmt::format("expected end of statement, got '{}'", peek().value));
    ++pos_;
  }

  // Statements until one of `ends` (its name is stored in *end, the block_begin and name consumed).
  Body parse_body(const std::set<std::string>& ends, std::string* end) {
    Body body;
    while (true) {
      const Token& tok = peek();
      if (tok.kind == Tok::eof) {
        if (!ends.empty()) syntax(fmt::format("missing {{% {} %}}", *ends.begin()));
        return body;
      }
      if (tok.kind == Tok::text) {
        auto s = std::make_shared<Stmt>();
        s->kind = Stmt::Kind::text;
        s->line = tok.line;
        s->text = tok.value;
        body.push_back(s);
        ++pos_;
      } else if (tok.kind == Tok::var_begin) {
        ++pos_;
        auto s = std::make_shared<Stmt>();
        s->kind = Stmt::Kind::output;
        s->line = tok.line;
        s->expr = parse_tuple(true);
        if (peek().kind != Tok::var_end)
          syntax(fmt::format("expected '}}}}', got '{}'", peek().value));
        ++pos_;
        body.push_back(s);
      } else if (tok.kind == Tok::block_begin) {
        ++pos_;
        if (peek().kind != Tok::name) syntax("expected a statement name");
        std::string name = peek().value;
        if (ends.count(name)) {
          ++pos_;
          *end = name;
          return body;
        }
        body.push_back(parse_statement());
      } else {
        syntax("unexpected token");
      }
    }
  }

  std::shared_ptr<Stmt> parse_statement() {
    Nest nest(*this);
    const Token& tok = next();
    auto s = std::make_shared<Stmt>();
    s->line = tok.line;
    const std::string& w = tok.value;
    std::string end;
    if (w == "if") {
      s->kind = Stmt::Kind::if_;
      ExprPtr cond = parse_tuple(false);
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, &end);
        s->branches.emplace_back(cond, std::move(b));
        if (end == "elif") {
          cond = parse_tuple(false);
          expect_block_end();
          continue;
        }
        if (end == "else") {
          expect_block_end();
          s->else_body = parse_body({"endif"}, &end);
        }
        expect_block_end();
        return s;
      }
    }
    if (w == "for") {
      s->kind = Stmt::Kind::for_;
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        ++pos_;
        s->targets.push_back(expect_name());
      }
      if (!is_name("in")) syntax("expected 'in' in for loop");
      ++pos_;
      s->expr = parse_tuple(false);
      if (is_name("if")) {
        ++pos_;
        s->cond = parse_expression(true);
      }
      if (is_name("recursive"))
        throw TemplateError(TemplateFailure::unsupported, peek().line,
                            "unsupported recursive for loop");
      expect_block_end();
      s->body = parse_body({"else", "endfor"}, &end);
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, &end);
      }
      expect_block_end();
      return s;
    }
    if (w == "set") {
      s->targets.push_back(expect_name());
      if (is_op(".")) {
        ++pos_;
        s->attr = expect_name();
      }
      while (is_op(",")) {
        ++pos_;
        s->targets.push_back(expect_name());
      }
      if (is_op("=")) {
        ++pos_;
        s->kind = Stmt::Kind::set;
        s->expr = parse_tuple(true);
        expect_block_end();
        return s;
      }
      if (is_op("|"))
        throw TemplateError(TemplateFailure::unsupported, peek().line,
                            "unsupported filter on a block set");
      if (s->targets.size() != 1 || !s->attr.empty()) syntax("a block set takes one name");
      s->kind = Stmt::Kind::set_block;
      expect_block_end();
      s->body = parse_body({"endset"}, &end);
      expect_block_end();
      return s;
    }
    if (w == "macro") {
      s->kind = Stmt::Kind::macro;
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        std::string p = expect_name();
        ExprPtr def;
        if (is_op("=")) {
          ++pos_;
          def = parse_expression(true);
        }
        s->params.emplace_back(p, def);
        if (!is_op(",")) break;
        ++pos_;
      }
      expect_op(")");
      expect_block_end();
      s->body = parse_body({"endmacro"}, &end);
      if (peek().kind == Tok::name) ++pos_;  // {% endmacro name %}
      expect_block_end();
      return s;
    }
    if (w == "break" || w == "continue") {
      s->kind = w == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_;
      expect_block_end();
      return s;
    }
    throw TemplateError(TemplateFailure::unsupported, tok.line,
                        fmt::format("unsupported statement '{}'", w));
  }

  // Comma-separated expressions: one, or a tuple.
  ExprPtr parse_tuple(bool with_condexpr) {
    int line = peek().line;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto t = node(Expr::Kind::tuple, line);
    t->args.push_back(first);
    while (is_op(",")) {
      ++pos_;
      if (peek().kind == Tok::block_end || peek().kind == Tok::var_end || is_op(")")) break;
      t->args.push_back(parse_expression(with_condexpr));
    }
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Nest nest(*this);
    ExprPtr e = parse_or();
    if (!with_condexpr) return e;
    while (is_name("if")) {
      int line = next().line;
      auto c = node(Expr::Kind::cond, line);
      c->args = {parse_or(), e};
      if (is_name("else")) {
        ++pos_;
        c->args.push_back(parse_expression(true));
      } else {
        c->args.push_back(nullptr);
      }
      e = c;
    }
    return e;
  }

  ExprPtr logical(const char* op, ExprPtr (Parser::*sub)()) {
    ExprPtr left = (this->*sub)();
    while (is_name(op)) {
      auto n = node(Expr::Kind::logical, next().line);
      n->name = op;
      n->args = {left, (this->*sub)()};
      left = n;
    }
    return left;
  }
  ExprPtr parse_or() { return logical("or", &Parser::parse_and); }
  ExprPtr parse_and() { return logical("and", &Parser::parse_not); }

  ExprPtr parse_not() {
    Nest nest(*this);
    if (is_name("not")) {
      auto n = node(Expr::Kind::unary, next().line);
      n->name = "not";
      n->args = {parse_not()};
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    static const std::set<std::string> ops = {"==", "!=", "<", "<=", ">", ">="};
    while (true) {
      std::string op;
      int line = peek().line;
      if (peek().kind == Tok::op && ops.count(peek().value)) {
        op = next().value;
      } else if (is_name("in")) {
        ++pos_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        return left;
      }
      auto n = node(Expr::Kind::binary, line);
      n->name = op;
      n->args = {left, parse_math1()};
      left = n;
    }
  }

  ExprPtr binary_level(std::initializer_list<const char*> ops, ExprPtr (Parser::*sub)()) {
    ExprPtr left = (this->*sub)();
    while (true) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (is_op(op)) hit = op;
      if (!hit) return left;
      auto n = node(Expr::Kind::binary, next().line);
      n->name = hit;
      n->args = {left, (this->*sub)()};
      left = n;
    }
  }
  ExprPtr parse_math1() { return binary_level({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return binary_level({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return binary_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return binary_level({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      auto n = node(Expr::Kind::unary, peek().line);
      n->name = next().value;
      n->args = {parse_unary(false)};
      e = n;
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(e) : e;
  }

  ExprPtr parse_primary() {
    const Token& tok = next();
    auto lit = [&](Value v) {
      auto n = node(Expr::Kind::literal, tok.line);
      n->value = std::move(v);
      return n;
    };
    switch (tok.kind) {
      case Tok::name:
        if (tok.value == "true" || tok.value == "True") return lit(Value::boolean(true));
        if (tok.value == "false" || tok.value == "False") return lit(Value::boolean(false));
        if (tok.value == "none" || tok.value == "None") return lit(Value::none());
        {
          auto n = node(Expr::Kind::name, tok.line);
          n->name = tok.value;
          return n;
        }
      case Tok::string: {
        std::string s = tok.value;
        while (peek().kind == Tok::string) s += next().value;  // adjacent literals join
        return lit(Value::string(s));
      }
      case Tok::integer:
        return lit(Value::integer(int_literal(tok)));
      case Tok::floating:
        return lit(Value::floating(std::strtod(tok.value.c_str(), nullptr)));  // 1e999 is inf
      case Tok::op:
        if (tok.value == "(") {
          if (is_op(")")) {
            ++pos_;
            return node(Expr::Kind::tuple, tok.line);
          }
          ExprPtr inner = parse_tuple(true);
          expect_op(")");
          return inner;
        }
        if (tok.value == "[") {
          auto n = node(Expr::Kind::list, tok.line);
          while (!is_op("]")) {
            n->args.push_back(parse_expression(true));
            if (!is_op(",")) break;
            ++pos_;
          }
          expect_op("]");
          return n;
        }
        if (tok.value == "{") {
          auto n = node(Expr::Kind::dict, tok.line);
          while (!is_op("}")) {
            n->args.push_back(parse_expression(true));
            expect_op(":");
            n->args.push_back(parse_expression(true));
            if (!is_op(",")) break;
            ++pos_;
          }
          expect_op("}");
          return n;
        }
        break;
      default:
        break;
    }
    throw TemplateError(TemplateFailure::syntax, tok.line,
                        fmt::format("unexpected '{}'", tok.value));
  }

  void parse_call_args(MutExpr& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Tok::name && is_op("=", 1)) {
        std::string key = next().value;
        ++pos_;
        n->kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (is_op("*"))
          throw TemplateError(TemplateFailure::unsupported, peek().line,
                              "unsupported *args in a call");
        n->args.push_back(parse_expression(true));
      }
      if (!is_op(",")) break;
      ++pos_;
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        int line = next().line;
        auto n = node(Expr::Kind::attr, line);
        if (peek().kind == Tok::integer) {  // x.0 is x[0]
          n->kind = Expr::Kind::subscript;
          auto idx = node(Expr::Kind::literal, line);
          idx->value = Value::integer(int_literal(next()));
          n->args = {e, idx};
        } else {
          n->name = expect_name();
          n->args = {e};
        }
        e = n;
      } else if (is_op("[")) {
        int line = next().line;
        ExprPtr parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            ++pos_;
            if (++colons > 2) syntax("too many ':' in a slice");
            continue;
          }
          parts[colons] = parse_expression(true);
        }
        expect_op("]");
        auto n = node(colons ? Expr::Kind::slice : Expr::Kind::subscript, line);
        n->args = {e, parts[0]};
        if (colons)
          n->args.insert(n->args.end(), {parts[1], parts[2]});
        else if (!parts[0])
          syntax("empty subscript");
        e = n;
      } else if (is_op("(")) {
        auto n = node(Expr::Kind::call, peek().line);
        n->args = {e};
        parse_call_args(n);
        e = n;
      } else {
        return e;
      }
    }
  }

  // Filters and tests after a unary expression: x | f(a) | g, x is [not] t(a), x is t a.
  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        auto n = node(Expr::Kind::filter, next().line);
        n->name = expect_name();
        while (is_op(".")) {  // dotted filter names do not occur in jinja2's builtins
          ++pos_;
          n->name += '.';
          n->name += expect_name();
        }
        n->args = {e};
        if (is_op("(")) parse_call_args(n);
        e = parse_postfix(n);
      } else if (is_name("is")) {
        auto n = node(Expr::Kind::test, next().line);
        if (is_name("not")) {
          ++pos_;
          n->negated = true;
        }
        n->name = expect_name();
        n->args = {e};
        if (is_op("(")) {
          parse_call_args(n);
        } else if (peek().kind == Tok::string || peek().kind == Tok::integer ||
                   peek().kind == Tok::floating ||
                   (peek().kind == Tok::name && !is_name("else") && !is_name("or") &&
                    !is_name("and") && !is_name("if") && !is_name("is") && !is_name("in") &&
                    !is_name("not")) ||
                   is_op("[") || is_op("{") || is_op("-")) {
          n->args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
        }
        e = n;
      } else {
        return e;
      }
    }
  }

  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.syntax(fmt::format("nesting deeper than {}", kMaxNesting));
    }
    ~Nest() { --p.depth_; }
  };

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) {
  Body body = Parser(lex_template(source)).parse();
  validate_template(body);
  return body;
}

}  // namespace ferry::chat
