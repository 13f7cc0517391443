#pragma once
// Byte-level BPE tokenizer read from a GGUF (tokenizer.ggml.model = "gpt2"), with the qwen2 and
// qwen35 pre-tokenizer splits, special-token parsing and streaming detokenization.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::gguf {
class File;
}

namespace ferry {

// The tokenizer.ggml.* metadata of a GGUF, as plain data (tests build vocabularies in memory).
// Optional ids are absent when the key is; out-of-range ids are treated as absent (llama.cpp
// warns and ignores them too).
struct TokenizerVocab {
  std::string source = "<memory>";   // named in errors: the GGUF path
  std::string model = "gpt2";        // tokenizer.ggml.model
  std::string pre;                   // tokenizer.ggml.pre
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens, byte-level (GPT-2) alphabet
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type; empty = all normal
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right", rank = index
  std::optional<int32_t> bos, eos, eot, eom, pad;    // *_token_id
  std::optional<int32_t> fim_pad, fim_rep, fim_sep;  // fim_{pad,rep,sep}_token_id
  bool add_bos = false, add_eos = false;             // add_{bos,eos}_token
};

// GGUF token types (tokenizer.ggml.token_type values).
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6
};

class Tokenizer {
 public:
  // Throws ErrorKind::unsupported/format naming the file when the GGUF has no (usable) tokenizer.
  static Tokenizer from_gguf(const gguf::File& f);
  static TokenizerVocab read_vocab(const gguf::File& f);
  // Same checks as from_gguf; errors name v.source.
  static Tokenizer from_vocab(TokenizerVocab v);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // parse_special: text like "<|im_start|>" becomes the special token (as llama.cpp's
  // parse_special=true); user-defined tokens are matched either way, as in llama.cpp.
  // add_bos: llama.cpp's add_special -- prepend BOS when the vocabulary asks for it
  // (add_bos_token), append EOS when it asks for that (add_eos_token).
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false,
                              bool parse_special = true) const;
  // Bytes of one token (byte-level decoded); special tokens render as their text when
  // render_special, else as "".
  std::string token_bytes(int32_t id, bool render_special = false) const;
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t n_vocab() const;
  int32_t bos() const;  // -1 when absent
  int32_t eos() const;  // -1 when absent
  int32_t eot() const;  // <|im_end|> for Qwen chat models, -1 when absent
  int32_t pad() const;  // -1 when absent
  bool add_bos_token() const;
  bool is_eog(int32_t id) const;      // end of generation: eos, eot, <|endoftext|>, <|im_end|>
  bool is_control(int32_t id) const;  // control/unknown: rendered only when render_special
  TokenType token_type(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // raw vocabulary text (byte-level alphabet)
  std::optional<int32_t> token_id(std::string_view text) const;  // exact token text lookup
  const std::string& pre() const;                                // "qwen2", "qwen35", ...

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Streams detokenized text: feed ids, get back only complete UTF-8 (a multi-byte character split
// across tokens is held until it is complete); flush() returns what is left.
class TextStream {
 public:
  explicit TextStream(const Tokenizer& tok, bool render_special = false)
      : tok_(tok), special_(render_special) {}
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool special_;
  std::string pending_;
};

// ChatML (Qwen): "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
// "<|im_start|>assistant\n" when add_generation_prompt.
struct ChatMessage {
  std::string role, content;
};
std::string format_chatml(const std::vector<ChatMessage>& msgs, bool add_generation_prompt = true);

}  // namespace ferry
