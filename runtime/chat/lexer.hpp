#pragma once
// The template lexer: source text -> a flat token list, with jinja2's whitespace rules applied to
// the text between tags (trim_blocks, lstrip_blocks, the - and + signs, the single trailing newline
// dropped, \r\n and \r read as \n) and {% raw %} blocks turned into text. The Environment the
// chat templates are written for is transformers': trim_blocks=True, lstrip_blocks=True.
#include <string>
#include <vector>

namespace ferry::chat {

enum class Tok {
  text,         // literal template text (whitespace control already applied)
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,
  string,  // value: the unescaped text
  integer,
  floating,
  op,  // value: the operator: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  eof,
};

struct Token {
  Tok kind;
  std::string value;
  int line;  // 1-based line of the token's start in the source
};

std::vector<Token> lex_template(const std::string& source);

}  // namespace ferry::chat
