#include "runtime/tokenizer/pretokenizer.hpp"

// clang-format off
#define PCRE2_CODE_UNIT_WIDTH 8  // pcre2.h needs the code unit width before it is included
#include <pcre2.h>
// clang-format on
#include <fmt/format.h>

#include <cstdint>
#include <span>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/unicode.hpp"

namespace ferry::tok {
namespace {
#include "runtime/tokenizer/unicode_delta.inc"

// llama.cpp's regexes (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_QWEN2 / _QWEN35): the tokenizer.json
// originals with the case-insensitive group (?i:'s|...) spelled out.
constexpr std::string_view kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Stand-in matched in place of a surrogate code point (which PCRE2's UTF mode cannot hold):
// a private-use character is, like a surrogate in llama.cpp's tables, neither whitespace,
// letter, number nor mark, and both take 3 UTF-8 bytes, so byte offsets stay aligned.
constexpr uint32_t kSurrogateStandIn = 0xE000;

void append_ranges(std::string& out, std::span<const CodepointRange> ranges) {
  for (const auto& r : ranges) {
    if (r.first == r.last)
      out += fmt::format("\\x{{{:X}}}", r.first);
    else
      out += fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", r.first, r.last);
  }
}

// Class items (without brackets) for \s, \p{L}, \p{N}, \p{M} as llama.cpp defines them.
std::string class_items(char what) {
  std::string s;
  switch (what) {
    case 's':
      for (uint32_t cp : kLlamaWhitespace) s += fmt::format("\\x{{{:X}}}", cp);
      break;
    case 'L':
      s = "\\p{L}";
      append_ranges(s, kExtra_letter);
      break;
    case 'N':
      s = "\\p{N}";
      append_ranges(s, kExtra_number);
      break;
    case 'M':
      s = "\\p{M}";
      append_ranges(s, kExtra_mark);
      break;
    default:
      fail(ErrorKind::internal, "pre-tokenizer: no class for '{}'", what);
  }
  return s;
}

// Rewrites \s, \S, \p{L}, \p{N}, \p{M} into explicit classes (see the header). Handles the
// subset of regex syntax the split patterns use: escapes, classes without nested brackets.
std::string rewrite_classes(std::string_view re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char e = re[i + 1];
      if (e == 's' || e == 'S') {
        if (e == 'S' && in_class) fail(ErrorKind::internal, "pre-tokenizer: \\S inside a class");
        if (in_class)
          out += class_items('s');
        else
          out += (e == 's' ? "[" : "[^") + class_items('s') + "]";
        i += 1;
        continue;
      }
      if (e == 'p' && i + 4 < re.size() && re[i + 2] == '{' && re[i + 4] == '}' &&
          (re[i + 3] == 'L' || re[i + 3] == 'N' || re[i + 3] == 'M')) {
        const std::string items = class_items(re[i + 3]);
        out += in_class ? items : "[" + items + "]";
        i += 4;
        continue;
      }
      out += c;
      out += e;
      i += 1;
      continue;
    }
    if (c == '[' && !in_class)
      in_class = true;
    else if (c == ']' && in_class)
      in_class = false;
    out += c;
  }
  if (in_class) fail(ErrorKind::internal, "pre-tokenizer: unterminated class in split regex");
  return out;
}

}  // namespace

std::optional<PreKind> pre_kind_from_name(std::string_view pre) {
  // llama.cpp maps these names to LLAMA_VOCAB_PRE_TYPE_QWEN2 with clean_spaces = false (names
  // that also change detokenization, e.g. "megrez" or "stablelm2", are left out on purpose).
  for (std::string_view alias :
       {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"})
    if (pre == alias) return PreKind::qwen2;
  if (pre == "qwen35") return PreKind::qwen35;
  return std::nullopt;
}

std::string_view pre_regex(PreKind kind) {
  return kind == PreKind::qwen2 ? kQwen2Regex : kQwen35Regex;
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

PreTokenizer::PreTokenizer(PreKind kind)
    : kind_(kind), pattern_(rewrite_classes(pre_regex(kind))), re_(std::make_unique<Regex>()) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  re_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &err_off, nullptr);
  if (!re_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail(ErrorKind::internal, "pre-tokenizer: PCRE2 rejects the split regex at offset {}: {}",
         err_off, reinterpret_cast<const char*>(msg));
  }
  // Anchored at compile time (each word starts where the previous ended) because JIT code does
  // not honour PCRE2_ANCHORED passed at match time. JIT is an optimisation only: without it
  // (platform or build lacks it) the interpreter runs.
  (void)pcre2_jit_compile(re_->code, PCRE2_JIT_COMPLETE);
}

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string>& out) const {
  if (text.empty()) return;
  // canon: the text re-encoded from llama.cpp's decoding (what the words are cut from);
  // subject: the same bytes with surrogates replaced by a stand-in PCRE2 accepts.
  const std::vector<uint32_t> cps = decode_utf8_lossy(text);
  std::string canon, subject;
  canon.reserve(text.size() + 8);
  bool has_surrogate = false;
  for (uint32_t cp : cps) {
    append_utf8(canon, cp);
    has_surrogate |= (cp >= 0xD800 && cp <= 0xDFFF);
  }
  if (has_surrogate) {
    subject.reserve(canon.size());
    for (uint32_t cp : cps)
      append_utf8(subject, (cp >= 0xD800 && cp <= 0xDFFF) ? kSurrogateStandIn : cp);
  }
  const std::string& subj = has_surrogate ? subject : canon;

  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(re_->code, nullptr), &pcre2_match_data_free);
  if (!md) fail(ErrorKind::internal, "pre-tokenizer: out of memory for PCRE2 match data");

  const auto* s = reinterpret_cast<PCRE2_SPTR>(subj.data());
  const size_t n = subj.size();
  size_t pos = 0;
  while (pos < n) {
    const int rc = pcre2_match(re_->code, s, n, pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    size_t end;
    if (rc == PCRE2_ERROR_NOMATCH) {
      // llama.cpp's matchers emit an unmatched code point as a word of its own. (Every code
      // point matches one of the alternatives, so this is a safeguard.)
      end = pos + utf8_len(static_cast<uint8_t>(subj[pos]));
    } else if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail(ErrorKind::internal, "pre-tokenizer: PCRE2 match failed at byte {} of {}: {}", pos, n,
           reinterpret_cast<const char*>(msg));
    } else {
      end = pcre2_get_ovector_pointer(md.get())[1];
      if (end <= pos) end = pos + utf8_len(static_cast<uint8_t>(subj[pos]));  // empty match guard
    }
    out.emplace_back(canon, pos, end - pos);
    pos = end;
  }
}

std::string pcre2_unicode_version() {
  char buf[32] = {};
  if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf) < 0) return "unknown";
  return buf;
}

}  // namespace ferry::tok
