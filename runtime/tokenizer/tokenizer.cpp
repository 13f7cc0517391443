// Tokenizer: vocabulary set-up (special-token attributes as llama.cpp derives them), special-token
// partitioning, encoding and decoding. The split is in pretokenizer.cpp, the merges in bpe.cpp.
#include "runtime/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <limits>
#include <span>

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/tokenizer/bpe.hpp"
#include "runtime/tokenizer/pretokenizer.hpp"
#include "runtime/tokenizer/unicode.hpp"

namespace ferry {
namespace {

// llama.cpp's token attributes (llama_token_attr); a token may carry several.
enum Attr : uint8_t {
  kUnknown = 1 << 0,
  kUnused = 1 << 1,
  kNormal = 1 << 2,
  kControl = 1 << 3,
  kUserDefined = 1 << 4,
  kByte = 1 << 5,
};

uint8_t attr_of(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::normal:
      return kNormal;
    case TokenType::unknown:
      return kUnknown;
    case TokenType::control:
      return kControl;
    case TokenType::user_defined:
      return kUserDefined;
    case TokenType::unused:
      return kUnused;
    case TokenType::byte:
      return kByte;
    default:
      return 0;  // undefined or out-of-range types: never rendered, never matched
  }
}

// Token texts llama.cpp (llama-vocab.cpp, load) recognises by name. In the lists it searches for
// one id (EOT, EOM, FIM), it takes whichever candidate its hash map yields first; Ferry takes the
// first in list order, which is the same whenever a vocabulary has one candidate (Qwen's do).
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         "<｜end▁of▁sentence｜>",
    "<end_of_utterance>"};
constexpr std::string_view kEomTexts[] = {"<|eom_id|>"};
constexpr std::string_view kFimPreTexts[] = {"<|fim_prefix|>",  "<fim-prefix>", "<fim_prefix>",
                                             "<｜fim▁begin｜>", "<PRE>",        "▁<PRE>",
                                             "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSufTexts[] = {"<|fim_suffix|>",  "<fim-suffix>", "<fim_suffix>",
                                             "<｜fim▁hole｜>",  "<SUF>",        "▁<SUF>",
                                             "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMidTexts[] = {"<|fim_middle|>",  "<fim-middle>", "<fim_middle>",
                                             "<｜fim▁end｜>",   "<MID>",        "▁<MID>",
                                             "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                             "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                             "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
// Every token with one of these texts ends generation (and is made a control token).
constexpr std::string_view kEogTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>",
                                          "<｜end▁of▁sentence｜>",
                                          "[e~["};

// Bytes of a normal token: each code point of its text is one byte of the GPT-2 alphabet. A code
// point outside it is rendered the way llama.cpp's llama_decode_text renders it.
std::string byte_decode(const std::string& text) {
  const tok::ByteLevel& bl = tok::ByteLevel::get();
  std::string out;
  for (uint32_t cp : tok::decode_utf8_lossy(text)) {
    const int b = bl.decode(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
      continue;
    }
    std::string utf8;
    tok::append_utf8(utf8, cp);
    out += "[UNK_BYTE_0x";
    for (char c : utf8) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
    out += text + "]";
  }
  return out;
}

// Byte-type tokens are spelled "<0xAB>" (llama.cpp reads the two hex digits at offset 3).
std::string byte_token(const std::string& text) {
  unsigned v = 0;
  for (size_t i = 3; i < std::min<size_t>(text.size(), 5); ++i) {
    const char c = text[i];
    const int d = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
    if (d < 0) break;
    v = v * 16 + static_cast<unsigned>(d);
  }
  return std::string(1, static_cast<char>(v));
}

}  // namespace

struct Tokenizer::Impl {
  std::string source, pre_name;
  tok::PreTokenizer pre;
  tok::Bpe bpe;
  std::vector<std::string> text;   // (n_vocab) vocabulary texts
  std::vector<int32_t> type;       // (n_vocab) GGUF token types
  std::vector<uint8_t> attr;       // (n_vocab) Attr bits after llama.cpp's adjustments
  std::vector<std::string> piece;  // (n_vocab) bytes each token renders as (when rendered)
  std::vector<uint8_t> eog;        // (n_vocab) 1 = ends generation
  std::vector<int32_t> specials;   // tokens matched in raw text first: longest text first
  int32_t bos = -1, eos = -1, eot = -1, pad = -1;
  bool add_bos = false, add_eos = false;

  Impl(TokenizerVocab& v, tok::PreKind kind)
      : source(v.source), pre_name(v.pre), pre(kind), bpe(v.tokens, v.merges) {}

  std::optional<int32_t> find_text(std::span<const std::string_view> texts) const {
    for (std::string_view t : texts)
      if (auto id = bpe.token_id(t)) return id;
    return std::nullopt;
  }
  void check_id(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(text.size()))
      fail(ErrorKind::invalid_arg, "token id {} out of range [0, {}) for the vocabulary of {}", id,
           text.size(), source);
  }
};

Tokenizer Tokenizer::from_vocab(TokenizerVocab v) {
  if (v.model != "gpt2")
    fail(ErrorKind::unsupported,
         "tokenizer model '{}' in {} is not supported (Ferry handles byte-level BPE, "
         "tokenizer.ggml.model = gpt2)",
         v.model, v.source);
  const auto kind = tok::pre_kind_from_name(v.pre);
  if (!kind)
    fail(ErrorKind::unsupported,
         "pre-tokenizer '{}' (tokenizer.ggml.pre) in {} is not supported; Ferry knows qwen2 (and "
         "its llama.cpp aliases "
         "deepseek-r1-qwen, kormo, f2llmv2, hunyuan, solar-open) and qwen35",
         v.pre, v.source);
  if (v.tokens.empty()) fail(ErrorKind::format, "tokenizer.ggml.tokens in {} is empty", v.source);
  if (v.tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail(ErrorKind::format,
         "tokenizer.ggml.tokens in {} has {} entries, more than int32 ids can address", v.source,
         v.tokens.size());
  if (!v.token_types.empty() && v.token_types.size() < v.tokens.size())
    fail(ErrorKind::format, "tokenizer.ggml.token_type in {} has {} entries for {} tokens",
         v.source, v.token_types.size(), v.tokens.size());
  const auto n = static_cast<int32_t>(v.tokens.size());
  for (int32_t i = 0; i < n; ++i)
    if (v.tokens[i].empty()) v.tokens[i] = fmt::format("[EMPTY_{}]", i);  // as llama.cpp
  auto valid = [&](std::optional<int32_t>& id, const char* what) {
    if (id && (*id < 0 || *id >= n)) {
      log::warn("{}: {} = {} is outside the vocabulary ({} tokens); ignored", v.source, what, *id,
                n);
      id.reset();
    }
  };
  valid(v.bos, "bos_token_id");
  valid(v.eos, "eos_token_id");
  valid(v.eot, "eot_token_id");
  valid(v.eom, "eom_token_id");
  valid(v.pad, "padding_token_id");
  valid(v.fim_pad, "fim_pad_token_id");
  valid(v.fim_rep, "fim_rep_token_id");
  valid(v.fim_sep, "fim_sep_token_id");
  if (v.add_bos && !v.bos)
    fail(ErrorKind::format, "{} sets add_bos_token but has no valid bos_token_id", v.source);
  if (v.add_eos && !v.eos)
    fail(ErrorKind::format, "{} sets add_eos_token but has no valid eos_token_id", v.source);

  auto impl = std::make_unique<Impl>(v, *kind);
  Impl& m = *impl;
  m.text = std::move(v.tokens);
  m.type.resize(n, static_cast<int32_t>(TokenType::normal));
  m.attr.resize(n, kNormal);
  if (!v.token_types.empty())
    for (int32_t i = 0; i < n; ++i) {
      m.type[i] = v.token_types[i];
      m.attr[i] = attr_of(v.token_types[i]);
    }

  // Ids llama.cpp finds by text when the metadata lacks them; each found token becomes a
  // control token (llama.cpp: "control-looking token ... its type will be overridden").
  auto detect = [&](std::optional<int32_t>& id, std::span<const std::string_view> texts) {
    if (id) return;
    id = m.find_text(texts);
    if (id) m.attr[*id] |= kControl;
  };
  std::optional<int32_t> fim_pre, fim_suf, fim_mid;
  detect(v.eot, kEotTexts);
  detect(v.eom, kEomTexts);
  detect(fim_pre, kFimPreTexts);
  detect(fim_suf, kFimSufTexts);
  detect(fim_mid, kFimMidTexts);
  detect(v.fim_pad, kFimPadTexts);
  detect(v.fim_rep, kFimRepTexts);
  detect(v.fim_sep, kFimSepTexts);

  m.eog.assign(n, 0);
  for (std::string_view t : kEogTexts)
    if (auto id = m.bpe.token_id(t)) {
      m.eog[*id] = 1;
      m.attr[*id] |= kControl;
    }
  for (const auto& id : {v.fim_pad, v.fim_rep, v.fim_sep, v.eos, v.eot, v.eom})
    if (id) m.eog[*id] = 1;

  m.bos = v.bos.value_or(-1);
  m.eos = v.eos.value_or(-1);
  m.eot = v.eot.value_or(-1);
  m.pad = v.pad.value_or(-1);
  m.add_bos = v.add_bos;
  m.add_eos = v.add_eos;

  m.piece.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    if (m.attr[i] & (kUnknown | kControl | kUserDefined))
      m.piece[i] = m.text[i];
    else if (m.attr[i] & kNormal)
      m.piece[i] = byte_decode(m.text[i]);
    else if (m.attr[i] & kByte)
      m.piece[i] = byte_token(m.text[i]);
  }
  for (int32_t i = 0; i < n; ++i)
    if (m.attr[i] & (kControl | kUserDefined | kUnknown)) m.specials.push_back(i);
  // Longest first, so "<|im_start|>" wins over any special token it contains. (llama.cpp's sort
  // is unstable among equal lengths; equal-length texts cannot both match at one position.)
  std::stable_sort(m.specials.begin(), m.specials.end(),
                   [&](int32_t a, int32_t b) { return m.text[a].size() > m.text[b].size(); });
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  const Impl& m = *impl_;
  // Fragments of the text: a special token (id >= 0) or a raw byte range still to split. As
  // llama.cpp's tokenizer_st_partition: each special token, longest first, cuts every raw
  // fragment at all its occurrences, left to right.
  struct Fragment {
    int32_t id;  // -1: raw text [off, off + len)
    size_t off, len;
  };
  std::vector<Fragment> frags, next;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  for (int32_t id : m.specials) {
    // Control and unknown tokens are plain text without parse_special; user-defined tokens are
    // matched regardless (as in llama.cpp and HF tokenizers).
    if (!parse_special && (m.attr[id] & (kControl | kUnknown))) continue;
    const std::string& st = m.text[id];
    if (text.find(st) == std::string_view::npos) continue;  // cheap scan skips most tokens
    next.clear();
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view window = text.substr(0, f.off + f.len);
      size_t off = f.off;
      for (size_t at; (at = window.find(st, off)) != std::string_view::npos; off = at + st.size()) {
        if (at > off) next.push_back({-1, off, at - off});
        next.push_back({id, at, st.size()});
      }
      if (off < f.off + f.len) next.push_back({-1, off, f.off + f.len - off});
    }
    frags.swap(next);
  }

  std::vector<int32_t> out;
  if (add_bos && m.add_bos) out.push_back(m.bos);
  std::vector<std::string> words;
  for (const Fragment& f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
      continue;
    }
    words.clear();
    m.pre.split(text.substr(f.off, f.len), words);
    for (const std::string& w : words) m.bpe.encode_word(w, out);
  }
  if (add_bos && m.add_eos) out.push_back(m.eos);
  return out;
}

std::string Tokenizer::token_bytes(int32_t id, bool render_special) const {
  impl_->check_id(id);
  if (!render_special && (impl_->attr[id] & (kControl | kUnknown))) return {};
  return impl_->piece[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id, render_special);
  return out;
}

int32_t Tokenizer::n_vocab() const {
  return static_cast<int32_t>(impl_->text.size());
}
int32_t Tokenizer::bos() const {
  return impl_->bos;
}
int32_t Tokenizer::eos() const {
  return impl_->eos;
}
int32_t Tokenizer::eot() const {
  return impl_->eot;
}
int32_t Tokenizer::pad() const {
  return impl_->pad;
}
bool Tokenizer::add_bos_token() const {
  return impl_->add_bos;
}
bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && id < n_vocab() && impl_->eog[id] != 0;
}
bool Tokenizer::is_control(int32_t id) const {
  impl_->check_id(id);
  return (impl_->attr[id] & (kControl | kUnknown)) != 0;
}
TokenType Tokenizer::token_type(int32_t id) const {
  impl_->check_id(id);
  return static_cast<TokenType>(impl_->type[id]);
}
const std::string& Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id);
  return impl_->text[id];
}
std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  return impl_->bpe.token_id(text);
}
const std::string& Tokenizer::pre() const {
  return impl_->pre_name;
}

}  // namespace ferry
