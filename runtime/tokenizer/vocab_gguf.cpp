// Reading the tokenizer.ggml.* metadata of a GGUF into a TokenizerVocab.
#include <limits>

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry {

TokenizerVocab Tokenizer::read_vocab(const gguf::File& f) {
  TokenizerVocab v;
  v.source = f.path();
  const auto model = f.get_string_opt("tokenizer.ggml.model");
  if (!model)
    fail(ErrorKind::unsupported, "{} has no tokenizer (tokenizer.ggml.model is missing)", f.path());
  v.model = *model;
  if (v.model != "gpt2")
    fail(ErrorKind::unsupported,
         "tokenizer model '{}' in {} is not supported (Ferry handles byte-level BPE, "
         "tokenizer.ggml.model = gpt2)",
         v.model, f.path());
  v.pre = f.get_string_opt("tokenizer.ggml.pre").value_or("");
  v.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (f.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
    v.token_types.reserve(types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] < std::numeric_limits<int32_t>::min() ||
          types[i] > std::numeric_limits<int32_t>::max())
        fail(ErrorKind::format, "tokenizer.ggml.token_type[{}] = {} in {} is out of range", i,
             types[i], f.path());
      v.token_types.push_back(static_cast<int32_t>(types[i]));
    }
  }
  if (!f.has("tokenizer.ggml.merges"))
    fail(ErrorKind::format, "{} has a gpt2 tokenizer without tokenizer.ggml.merges", f.path());
  v.merges = f.get_string_array("tokenizer.ggml.merges");

  auto id = [&](const char* key, std::optional<int32_t>& out) {
    if (auto x = f.get_u32_opt(key)) {
      // An id beyond int32 is certainly outside the vocabulary; keep it negative-free and let
      // from_vocab's range check report and drop it.
      out = *x > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())
                ? std::numeric_limits<int32_t>::max()
                : static_cast<int32_t>(*x);
    }
  };
  id("tokenizer.ggml.bos_token_id", v.bos);
  id("tokenizer.ggml.eos_token_id", v.eos);
  id("tokenizer.ggml.eot_token_id", v.eot);
  id("tokenizer.ggml.eom_token_id", v.eom);
  id("tokenizer.ggml.padding_token_id", v.pad);
  id("tokenizer.ggml.fim_pad_token_id", v.fim_pad);
  id("tokenizer.ggml.fim_rep_token_id", v.fim_rep);
  id("tokenizer.ggml.fim_sep_token_id", v.fim_sep);
  if (f.has("tokenizer.ggml.add_bos_token")) v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  if (f.has("tokenizer.ggml.add_eos_token")) v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
  return v;
}

Tokenizer Tokenizer::from_gguf(const gguf::File& f) {
  return from_vocab(read_vocab(f));
}

}  // namespace ferry
