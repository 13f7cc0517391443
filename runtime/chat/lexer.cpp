#include "runtime/chat/lexer.hpp"

#include <cctype>
#include <cstring>

#include "runtime/chat/template_error.hpp"

namespace ferry::chat {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// jinja2 reads the source through str.splitlines() and joins with "\n": line ends become "\n" and
// one trailing newline disappears (keep_trailing_newline=False).
std::string normalize_newlines(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t k = 0; k < src.size(); ++k) {
    if (src[k] == '\r') {
      out += '\n';
      if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
    } else {
      out += src[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Python's "unicode-escape" decoding of a string literal's body, as jinja2 applies it.
std::string unescape(const std::string& body, int line) {
  std::string out;
  for (size_t k = 0; k < body.size(); ++k) {
    char c = body[k];
    if (c != '\\' || k + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++k];
    auto hex = [&](int n) {
      if (k + n >= body.size())
        throw TemplateError(TemplateFailure::syntax, line, "truncated escape in string literal");
      uint32_t cp = 0;
      for (int d = 0; d < n; ++d) {
        char h = body[k + 1 + d];
        if (!std::isxdigit(static_cast<unsigned char>(h)))
          throw TemplateError(TemplateFailure::syntax, line, "bad escape in string literal");
        cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                 ? h - '0'
                                                 : (std::tolower(h) - 'a' + 10));
      }
      k += n;
      append_utf8(out, cp);
    };
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\n':
        break;  // a backslash-newline continues the line
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int d = 0; d < 2 && k + 1 < body.size() && body[k + 1] >= '0' && body[k + 1] <= '7';
               ++d)
            cp = cp * 8 + static_cast<uint32_t>(body[++k] - '0');
          append_utf8(out, cp);
        } else {
          out += '\\';  // Python keeps unknown escapes as written
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(normalize_newlines(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t start = find_tag(pos);
      std::string data = src_.substr(pos, start - pos);
      int data_line = line_;
      if (start == src_.size()) {
        emit_text(data, data_line);
        break;
      }
      char kind = src_[start + 1];  // '{', '%' or '#'
      char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
      if (sign == '-') {
        size_t e = data.size();
        while (e > 0 && is_space(data[e - 1])) --e;
        data.resize(e);
      } else if (sign != '+' && kind != '{') {
        lstrip(data, line_starting);
      }
      emit_text(data, data_line);
      count_lines(pos, start);
      pos = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        pos = end_comment(pos);
      } else if (kind == '%' && is_raw(pos)) {
        pos = raw_block(pos);
      } else {
        pos = tag(kind, pos);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    out_.push_back({Tok::eof, "", line_});
    return std::move(out_);
  }

 private:
  // lstrip_blocks: a block or comment tag alone after indentation drops the indentation.
  static void lstrip(std::string& data, bool line_starting) {
    size_t l_pos = data.rfind('\n');
    l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
    if (l_pos > 0 || line_starting) {
      bool blank = true;
      for (size_t k = l_pos; k < data.size(); ++k)
        if (data[k] != ' ' && data[k] != '\t') blank = false;
      if (blank) data.resize(l_pos);
    }
  }

  size_t find_tag(size_t pos) const {
    for (size_t k = pos; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    return src_.size();
  }

  void count_lines(size_t from, size_t to) {
    for (size_t k = from; k < to && k < src_.size(); ++k)
      if (src_[k] == '\n') ++line_;
  }

  void emit_text(const std::string& data, int line) {
    if (!data.empty()) out_.push_back({Tok::text, data, line});
  }

  // After a tag's closing delimiter: "-" strips all following whitespace, else trim_blocks drops
  // one newline (block and comment tags only, never after }}).
  size_t after_end(size_t end, bool minus, bool block_like) {
    size_t p = end;
    if (minus) {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (block_like && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    count_lines(end, p);
    return p;
  }

  size_t end_comment(size_t pos) {
    size_t e = src_.find("#}", pos);
    if (e == std::string::npos)
      throw TemplateError(TemplateFailure::syntax, line_, "unclosed comment");
    bool minus = e > pos && src_[e - 1] == '-';
    count_lines(pos, e + 2);
    return after_end(e + 2, minus, true);
  }

  // {% raw %} ... {% endraw %}: the body is text, tags in it are not interpreted.
  bool is_raw(size_t pos) const {
    size_t k = pos;
    while (k < src_.size() && is_space(src_[k])) ++k;
    if (src_.compare(k, 3, "raw") != 0) return false;
    k += 3;
    while (k < src_.size() && is_space(src_[k])) ++k;
    return src_.compare(k, 2, "%}") == 0 || src_.compare(k, 3, "-%}") == 0;
  }

  // jinja2's raw rules: no trim_blocks newline after {% raw %} ("-%}" still strips), the body's
  // end handled like text before a block tag (lstrip, or "-" strips), trim_blocks after endraw.
  size_t raw_block(size_t pos) {
    size_t close = src_.find("%}", pos);
    bool minus = src_[close - 1] == '-';
    count_lines(pos, close + 2);
    size_t body = after_end(close + 2, minus, false);
    for (size_t k = body; (k = src_.find("{%", k)) != std::string::npos; k += 2) {
      size_t j = k + 2;
      bool lminus = j < src_.size() && src_[j] == '-';
      if (lminus || (j < src_.size() && src_[j] == '+')) ++j;
      while (j < src_.size() && is_space(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      size_t end = src_.find("%}", j);
      if (end == std::string::npos) break;
      std::string text = src_.substr(body, k - body);
      if (lminus) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (src_[k + 2] != '+') {
        lstrip(text, body > 0 && src_[body - 1] == '\n');
      }
      emit_text(text, line_);
      count_lines(body, end + 2);
      return after_end(end + 2, src_[end - 1] == '-', true);
    }
    throw TemplateError(TemplateFailure::syntax, line_, "unclosed {% raw %} block");
  }

  size_t tag(char kind, size_t pos) {
    bool block = kind == '%';
    out_.push_back({block ? Tok::block_begin : Tok::var_begin, "", line_});
    int depth = 0;  // brackets: a "}}" inside a dict literal does not close the tag
    size_t p = pos;
    while (true) {
      while (p < src_.size() && is_space(src_[p])) {
        if (src_[p] == '\n') ++line_;
        ++p;
      }
      if (p >= src_.size())
        throw TemplateError(TemplateFailure::syntax, line_,
                            block ? "unclosed {% tag" : "unclosed {{ tag");
      const char* close = block ? "%}" : "}}";
      bool minus = src_[p] == '-' && src_.compare(p + 1, 2, close) == 0;
      if (depth == 0 && (minus || src_.compare(p, 2, close) == 0)) {
        size_t end = p + 2 + (minus ? 1 : 0);
        out_.push_back({block ? Tok::block_end : Tok::var_end, "", line_});
        return after_end(end, minus, block);
      }
      char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = p;
        while (p < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
          ++p;
        out_.push_back({Tok::name, src_.substr(s, p - s), line_});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = number(p);
      } else if (c == '\'' || c == '"') {
        size_t s = ++p;
        while (p < src_.size() && src_[p] != c) p += src_[p] == '\\' ? 2 : 1;
        if (p >= src_.size())
          throw TemplateError(TemplateFailure::syntax, line_, "unclosed string literal");
        int at = line_;
        count_lines(s, p);
        out_.push_back({Tok::string, unescape(src_.substr(s, p - s), at), at});
        ++p;
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : two)
          if (src_.compare(p, 2, t) == 0) op = t;
        if (op.size() == 1 && !std::strchr("+-*/%~<>=()[]{},.:|", c))
          throw TemplateError(TemplateFailure::syntax, line_,
                              fmt::format("unexpected character '{}'", c));
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        out_.push_back({Tok::op, op, line_});
        p += op.size();
      }
    }
  }

  size_t number(size_t p) {
    size_t s = p;
    bool is_float = false;
    auto digits = [&] {
      while (p < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
        ++p;
    };
    digits();
    if (p + 1 < src_.size() && src_[p] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      is_float = true;
      ++p;
      digits();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        p = q;
        digits();
      }
    }
    std::string text;
    for (size_t k = s; k < p; ++k)
      if (src_[k] != '_') text += src_[k];
    out_.push_back({is_float ? Tok::floating : Tok::integer, text, line_});
    return p;
  }

  std::string src_;
  std::vector<Token> out_;
  int line_ = 1;
};

}  // namespace

std::vector<Token> lex_template(const std::string& source) {
  return Lexer(source).run();
}

}  // namespace ferry::chat
