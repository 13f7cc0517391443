#pragma once
// A small byte-level BPE vocabulary in Qwen's GGUF form (tokenizer.ggml.model "gpt2"): the 256
// byte tokens in GPT-2 bytes_to_unicode form and order, merges learned deterministically from an
// embedded English/code text, Qwen's special tokens, and "[PADn]" filler tokens (type UNUSED, as
// convert_hf_to_gguf.py writes them) up to the vocabulary size of the preset.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::synth {

// tokenizer.ggml.token_type values (llama.cpp llama_token_type).
enum TokenType : int32_t { kTokenNormal = 1, kTokenControl = 3, kTokenUserDefined = 4, kTokenUnused = 5 };

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;  // "left right", ranked by index
  int32_t endoftext = -1, im_start = -1, im_end = -1;
};

// The GPT-2 byte → printable code point mapping, as UTF-8.
std::string byte_to_unicode(uint8_t b);
// The 256 bytes in GPT-2 vocabulary order (printable ones first), i.e. token id → byte.
const std::vector<uint8_t>& byte_token_order();

// Splits ASCII-dominated text roughly as the qwen2 pre-tokenizer regex does (contractions, an
// optional leading non-letter before letters, single digits, punctuation runs, whitespace), treating
// bytes ≥ 0x80 as letters. Used only to learn merges; llama.cpp applies its own regex at run time.
std::vector<std::string> pretokenize(std::string_view text);

struct BpeModel {
  std::vector<std::string> tokens;  // 256 byte tokens, then one per new merged string
  std::vector<std::string> merges;
};
// Learns up to max_merges merges (most frequent pair first, ties by token strings; stops when no
// pair occurs twice). Deterministic.
BpeModel train_bpe(std::string_view text, int max_merges);

// The embedded training text.
std::string_view training_corpus();

// Builds the vocabulary: BPE tokens, then the specials <|endoftext|>, <|im_start|>, <|im_end|>
// at special_base (or right after the BPE tokens when special_base < 0), then the user-defined
// <tool_call>, </tool_call>, <think>, </think> (at Qwen's ids when special_base is given, else
// right after <|im_end|>), padding elsewhere.
Vocab build_vocab(uint32_t n_vocab, int32_t special_base, int max_merges);

}  // namespace ferry::synth
