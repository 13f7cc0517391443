// The Jinja interpreter on its own: tests/chat/template_cases.json holds small templates with the
// output jinja2 gives in transformers' environment (test_template_parity.py re-checks every
// expectation of that file against jinja2), and the constructs Ferry does not support must fail
// with the documented error naming the line.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "runtime/chat/template.hpp"
#include "runtime/chat/value.hpp"

using ferry::chat::Template;
using ferry::chat::TemplateError;
using ferry::chat::TemplateFailure;
using json = nlohmann::ordered_json;

namespace {

constexpr std::time_t kCasesNow = 86400 * 365;  // what the cases' strftime_now expectations used

json load_cases() {
  std::ifstream f(std::string(FERRY_SOURCE_DIR) + "/tests/chat/template_cases.json");
  EXPECT_TRUE(f.good());
  return json::parse(f);
}

TemplateFailure failure_of(const std::string& src, const json& ctx = json::object()) {
  try {
    Template(src).render(ctx, 0);
  } catch (const TemplateError& e) {
    return e.failure();
  }
  ADD_FAILURE() << "no error for: " << src;
  return TemplateFailure::runtime;
}

}  // namespace

TEST(ChatTemplate, CasesMatchJinja2) {
  json cases = load_cases();
  ASSERT_GT(cases.size(), 40u);
  for (const auto& c : cases) {
    const std::string src = c["template"];
    SCOPED_TRACE(src);
    if (c.contains("expected")) {
      EXPECT_EQ(Template(src).render(c["context"], kCasesNow), c["expected"].get<std::string>());
    } else {
      EXPECT_THROW(Template(src).render(c["context"], kCasesNow), TemplateError);
    }
  }
}

TEST(ChatTemplate, UnsupportedConstructsNameTheLine) {
  struct Case {
    const char* src;
    int line;
    const char* what;
  };
  const Case cases[] = {
      {"a\n{% include 'x' %}", 2, "unsupported statement 'include'"},
      {"{% for x in y %}\n\n{{ x | frobnicate }}{% endfor %}", 3,
       "unsupported filter 'frobnicate'"},
      {"{% if true %}\n{{ 1 | from_json }}{% endif %}", 2,
       "unsupported filter 'from_json'"},  // checked when run
      {"{{ x is prime }}", 1, "unsupported test 'prime'"},
      {"\n\n\n{{ 'x'.zfill(3) }}", 4, "unsupported method str.zfill"},
      {"{{ '%s' % 1 }}", 1, "unsupported operator: printf-style string formatting"},
      {"{% for x in y recursive %}{% endfor %}", 1, "unsupported recursive for loop"},
      {"x\n{% extends 'base' %}", 2, "unsupported statement 'extends'"},
      {"{{ d.update({}) }}", 1, "unsupported method dict.update"},
      {"{% call m() %}{% endcall %}", 1, "unsupported statement 'call'"},
      {"{{ '{:>4}'.format(1) }}", 1, "unsupported str.format field '{:>4}'"},
      {"{{ 2 ** 64 }}", 1, "unsupported integer beyond 64 bits"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.src);
    try {
      Template(c.src).render(json{{"d", json::object()}}, 0);
      ADD_FAILURE() << "rendered";
    } catch (const TemplateError& e) {
      EXPECT_EQ(e.failure(), TemplateFailure::unsupported);
      EXPECT_EQ(e.kind(), ferry::ErrorKind::unsupported);
      EXPECT_EQ(e.line(), c.line);
      EXPECT_EQ(std::string(e.what()), fmt::format("template line {}: {}", c.line, c.what));
    }
  }
}

TEST(ChatTemplate, ErrorsAreTyped) {
  EXPECT_EQ(failure_of("{% if %}"), TemplateFailure::syntax);
  EXPECT_EQ(failure_of("{% for x in y %}"), TemplateFailure::syntax);
  EXPECT_EQ(failure_of("{{ raise_exception('no tools') }}"), TemplateFailure::raised);
  EXPECT_EQ(failure_of("{{ a.b }}"), TemplateFailure::runtime);
  EXPECT_EQ(failure_of("{{ 1 < 'a' }}"), TemplateFailure::runtime);
  try {
    Template("line one\n{{ raise_exception('System message must be first.') }}")
        .render(json::object(), 0);
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.detail(), "System message must be first.");
    EXPECT_EQ(e.line(), 2);
  }
}

// Whitespace control and trim/lstrip on generated layouts: the rendering of N nested blocks with
// random indentation and random signs equals a direct computation of jinja2's rules.
TEST(ChatTemplate, RandomIndentedBlocksKeepOnlyTheText) {
  std::mt19937 rng(27);
  for (int iter = 0; iter < 200; ++iter) {
    std::string src, want;
    int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) {
      src += std::string(rng() % 5, ' ') + "{% if true %}\n";
      std::string word = fmt::format("w{}", rng() % 100);
      src += std::string(rng() % 3, '\t') + "{{ '" + word + "' }}\n";
      want += word + "\n";
      src += std::string(rng() % 5, ' ') + "{% endif %}\n";
    }
    // trim_blocks eats the newline after each tag, lstrip_blocks the indentation before it, the
    // indentation before {{ stays, and the template's final newline is dropped.
    std::string got = Template(src).render(json::object(), 0);
    std::string stripped;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != ' ' && got[i] != '\t') stripped += got[i];
    EXPECT_EQ(stripped, want) << src;
  }
}

TEST(ChatTemplate, ValuesPrintAsPython) {
  using ferry::chat::py_float_repr;
  EXPECT_EQ(py_float_repr(1.0), "1.0");
  EXPECT_EQ(py_float_repr(0.1), "0.1");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(py_float_repr(1.5e-5), "1.5e-05");
  EXPECT_EQ(py_float_repr(-2.5), "-2.5");
  EXPECT_EQ(Template("{{ x }}").render(json{{"x", json{{"a", "it's"}, {"b", "q\"'"}}}}, 0),
            "{'a': \"it's\", 'b': 'q\"\\''}");
}

// Hostile templates: random edits of the committed templates, and deep nesting, either render or
// fail with a TemplateError; nothing else escapes (and under ASan, nothing reads out of bounds).
TEST(ChatTemplate, MutatedTemplatesFailCleanly) {
  const char* names[] = {"Qwen3.5-4B.jinja", "Qwen3-Coder.jinja",
                         "meta-llama-Llama-3.1-8B-Instruct.jinja"};
  const json ctx = json::parse(
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
    "add_generation_prompt": true})");
  const std::string alphabet = "{}%#-+()[]|.,:'\"\\ \nabcxyz019=<>~*/";
  std::mt19937 rng(27);
  int rendered = 0, failed = 0;
  for (const char* name : names) {
    std::ifstream f(std::string(FERRY_SOURCE_DIR) + "/tests/data/templates/" + name);
    std::string src((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(src.empty());
    for (int iter = 0; iter < 150; ++iter) {
      std::string s = src;
      for (int e = 1 + static_cast<int>(rng() % 4); e > 0; --e) {
        size_t at = rng() % s.size();
        switch (rng() % 3) {
          case 0:
            s.erase(at, 1 + rng() % 8);
            break;
          case 1:
            s.insert(at, 1, alphabet[rng() % alphabet.size()]);
            break;
          default:
            s[at] = alphabet[rng() % alphabet.size()];
        }
      }
      try {
        Template(s).render(ctx, 0);
        ++rendered;
      } catch (const TemplateError&) {
        ++failed;
      }
    }
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(failed, 0);
  EXPECT_EQ(failure_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
            TemplateFailure::syntax);
  EXPECT_EQ(failure_of("{{ " + std::string(5000, '-') + "1 }}"), TemplateFailure::syntax);
  std::string nested;
  for (int k = 0; k < 1000; ++k) nested += "{% if true %}";
  EXPECT_EQ(failure_of(nested), TemplateFailure::syntax);
  EXPECT_EQ(failure_of("{{ 99999999999999999999 }}"), TemplateFailure::unsupported);
  EXPECT_EQ(failure_of("{{ 'x' * 9223372036854775807 }}"), TemplateFailure::runtime);
  EXPECT_EQ(failure_of(
                "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
            TemplateFailure::runtime);
  EXPECT_EQ(
      failure_of("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}"),
      TemplateFailure::runtime);
  EXPECT_EQ(failure_of("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}"),
            TemplateFailure::runtime);
  EXPECT_EQ(failure_of("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns | tojson }}"),
            TemplateFailure::runtime);
  EXPECT_EQ(Template("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}")
                .render(json::object(), 0),
            "<Namespace {'a': 1, 'me': <Namespace {...}>}>");
}
