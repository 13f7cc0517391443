#include "runtime/synth/expert_types.hpp"

#include <charconv>
#include <string>

#include "runtime/core/error.hpp"
#include "runtime/synth/encode.hpp"

namespace ferry::synth {
namespace {

// Lower-case ggml type names (type_from_name also takes upper case: not here).
std::optional<GgmlType> supported_type(std::string_view s) {
  const std::optional<GgmlType> t = type_from_name(s);
  if (!t || !encoding_of(*t)) return std::nullopt;
  for (char c : s)
    if (c >= 'A' && c <= 'Z') return std::nullopt;
  return t;
}

[[noreturn]] void bad_rule(std::string_view spec, std::string_view rule, const std::string& why) {
  fail(ErrorKind::invalid_arg, "--expert-types '{}': rule '{}': {}", spec, rule, why);
}

std::optional<uint32_t> parse_layer(std::string_view s) {
  uint32_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

std::vector<LayerExpertTypes> parse_expert_types(std::string_view spec, uint32_t n_layer) {
  std::vector<LayerExpertTypes> out(n_layer);
  uint32_t first = 0, last = n_layer - 1;  // the layers of the rule before: all at first
  size_t at = 0;
  if (spec.empty()) fail(ErrorKind::invalid_arg, "--expert-types: empty spec");
  while (at <= spec.size()) {
    const size_t comma = spec.find(',', at);
    const std::string_view rule =
        spec.substr(at, comma == std::string_view::npos ? spec.npos : comma - at);
    at = comma == std::string_view::npos ? spec.size() + 1 : comma + 1;
    const auto bad = [&](const std::string& why) { bad_rule(spec, rule, why); };
    if (rule.empty()) bad("empty rule (two commas, or a comma at an end)");
    std::string_view assign = rule;
    if (const size_t colon = rule.find(':'); colon != std::string_view::npos) {
      const std::string_view layers = rule.substr(0, colon);
      assign = rule.substr(colon + 1);
      if (layers == "*") {
        first = 0, last = n_layer - 1;
      } else {
        const size_t dash = layers.find('-');
        const auto a = parse_layer(layers.substr(0, dash));
        const auto b = dash == std::string_view::npos ? a : parse_layer(layers.substr(dash + 1));
        if (!a || !b) bad_rule(spec, rule, fmt::format("layers '{}' are not N, N-M or *", layers));
        if (*a > *b) bad(fmt::format("layer range {}-{} runs backwards", *a, *b));
        if (*b >= n_layer)
          bad(fmt::format("layer {} is out of range: the model has layers 0-{}", *b, n_layer - 1));
        first = *a, last = *b;
      }
    }
    std::string_view proj = "all", type_s = assign;
    if (const size_t eq = assign.find('='); eq != std::string_view::npos) {
      proj = assign.substr(0, eq);
      type_s = assign.substr(eq + 1);
    }
    if (proj == "gate" || proj == "up")
      bad("gate and up must share a type (the CUDA expert kernels read both with one type): use "
          "gate_up=TYPE");
    if (proj != "all" && proj != "gate_up" && proj != "down")
      bad(fmt::format("unknown projection '{}' (gate_up, down, or none for all three)", proj));
    const std::optional<GgmlType> type = supported_type(type_s);
    if (!type)
      bad_rule(spec, rule,
               fmt::format("type '{}' is not one the synthesizer writes ({})", type_s,
                           writable_type_names()));
    for (uint32_t l = first; l <= last; ++l) {
      if (proj != "down") out[l].gate_up = type;
      if (proj != "gate_up") out[l].down = type;
    }
  }
  return out;
}

void apply_expert_types(std::vector<TensorPlan>& tensors,
                        const std::vector<LayerExpertTypes>& types) {
  for (TensorPlan& t : tensors) {
    if (t.layer < 0 || static_cast<size_t>(t.layer) >= types.size()) continue;
    const LayerExpertTypes& lt = types[static_cast<size_t>(t.layer)];
    std::optional<GgmlType> type;
    if (t.name.find("ffn_gate_exps.") != std::string::npos ||
        t.name.find("ffn_up_exps.") != std::string::npos)
      type = lt.gate_up;
    else if (t.name.find("ffn_down_exps.") != std::string::npos)
      type = lt.down;
    if (!type) continue;
    if (t.row_len() % type_info(*type).block_values != 0)
      fail(ErrorKind::invalid_arg,
           "--expert-types: tensor {} has rows of {} values, not a multiple of the {} block ({})",
           t.name, t.row_len(), type_name(*type), type_info(*type).block_values);
    t.type = *type;
  }
}

}  // namespace ferry::synth
