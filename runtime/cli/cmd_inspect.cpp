// `ferry inspect FILE [--json]`: what a GGUF holds — architecture, hyperparameters, tokenizer
// summary, bytes per quant type, expert vs non-expert bytes, per-expert size, largest tensors.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/cli/command.hpp"
#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::cli {
namespace {

using gguf::Array;
using gguf::File;
using gguf::TensorInfo;
using gguf::Value;
using gguf::ValueType;
using nlohmann::json;

// Arrays longer than this are summarised (type and count) instead of listed; the tokenizer's
// token/score/merge arrays (150k+ entries) always are.
constexpr uint64_t kMaxJsonArray = 64;
constexpr size_t kMaxTextArray = 8;
constexpr size_t kLargestShown = 10;

bool is_tokenizer_table(const std::string& key) {
  return key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.scores" ||
         key == "tokenizer.ggml.token_type" || key == "tokenizer.ggml.merges";
}

bool summarised(const std::string& key, const Value& v) {
  if (v.type != ValueType::array) return false;
  return is_tokenizer_table(key) || std::get<Array>(v.v).size() > kMaxJsonArray;
}

json array_to_json(const Array& a) {
  json out = json::array();
  switch (a.elem_type) {
    case ValueType::f32:
      for (double x : a.floats) out.push_back(static_cast<double>(static_cast<float>(x)));
      break;
    case ValueType::f64:
      for (double x : a.floats) out.push_back(x);
      break;
    case ValueType::string:
      for (const auto& s : a.strings) out.push_back(s);
      break;
    case ValueType::boolean:
      for (int64_t x : a.ints) out.push_back(x != 0);
      break;
    case ValueType::u64:  // stored bit-cast
      for (int64_t x : a.ints) out.push_back(static_cast<uint64_t>(x));
      break;
    default:
      for (int64_t x : a.ints) out.push_back(x);
      break;
  }
  return out;
}

// NaN and infinities have no JSON form; nlohmann writes them as null.
json value_to_json(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.v)) return *i;
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  if (const auto* b = std::get_if<bool>(&v.v)) return *b;
  if (const auto* s = std::get_if<std::string>(&v.v)) return *s;
  return array_to_json(std::get<Array>(v.v));
}

json shape_json(const TensorInfo& t) {
  json s = json::array();
  for (uint32_t i = 0; i < t.n_dims; ++i) s.push_back(t.ne[i]);
  return s;
}

std::string shape_text(const TensorInfo& t) {
  std::string s = "[";
  for (uint32_t i = 0; i < t.n_dims; ++i) s += fmt::format("{}{}", i ? ", " : "", t.ne[i]);
  return s + "]";
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(n);
  int u = 0;
  while (x >= 1024 && u < 4) x /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.2f} {}", x, units[u]);
}

bool is_expert_tensor(const TensorInfo& t) {
  return t.name.find("_exps") != std::string::npos;
}

// Layer index of "blk.N.…" names; nullopt otherwise.
std::optional<uint64_t> layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return std::nullopt;
  uint64_t n = 0;
  size_t i = 4;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) n = n * 10 + (name[i] - '0');
  if (i == 4 || i >= name.size() || name[i] != '.') return std::nullopt;
  return n;
}

// "gate" of "blk.3.ffn_gate_exps.weight" ("gate_up" for a fused one).
std::string projection_of(const std::string& name) {
  const size_t a = name.find("ffn_"), b = name.find("_exps");
  return a == std::string::npos || b == std::string::npos || b < a + 4 ? name
                                                                       : name.substr(a + 4, b - a - 4);
}

struct ExpertStats {
  std::map<uint64_t, uint64_t> bytes_per_layer;  // one expert's gate+up+down bytes, by layer
  std::map<uint64_t, std::map<std::string, GgmlType>> types_per_layer;  // projection → type
  uint64_t experts_per_layer = 0;                // ne[2] of the expert tensors (max seen)
  uint64_t typical = 0, min = 0, max = 0;        // over layers; typical = most common value
};

ExpertStats expert_stats(const File& f) {
  ExpertStats s;
  for (const auto& t : f.tensors()) {
    const auto layer = layer_of(t.name);
    if (!is_expert_tensor(t) || t.n_dims != 3 || !layer) continue;
    s.bytes_per_layer[*layer] += t.nb[2];
    s.types_per_layer[*layer][projection_of(t.name)] = t.type;
    s.experts_per_layer = std::max(s.experts_per_layer, t.ne[2]);
  }
  if (s.bytes_per_layer.empty()) return s;
  std::map<uint64_t, int> freq;
  s.min = ~uint64_t{0};
  for (const auto& [layer, bytes] : s.bytes_per_layer) {
    ++freq[bytes];
    s.min = std::min(s.min, bytes);
    s.max = std::max(s.max, bytes);
  }
  int best = 0;
  for (const auto& [bytes, n] : freq)
    if (n > best) best = n, s.typical = bytes;
  return s;
}

struct Summary {
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // type name → (tensors, bytes)
  uint64_t expert_bytes = 0, expert_tensors = 0, other_bytes = 0;
  std::vector<const TensorInfo*> largest;
};

Summary summarise(const File& f) {
  Summary s;
  for (const auto& t : f.tensors()) {
    auto& e = s.by_type[std::string(type_name(t.type))];
    e.first += 1;
    e.second += t.n_bytes;
    if (is_expert_tensor(t))
      s.expert_bytes += t.n_bytes, ++s.expert_tensors;
    else
      s.other_bytes += t.n_bytes;
    s.largest.push_back(&t);
  }
  std::stable_sort(
      s.largest.begin(), s.largest.end(),
      [](const TensorInfo* a, const TensorInfo* b) { return a->n_bytes > b->n_bytes; });
  if (s.largest.size() > kLargestShown) s.largest.resize(kLargestShown);
  return s;
}

// Keys shown as hyperparameters: general.* and {arch}.*.
bool is_hyperparameter(const std::string& key, const std::string& arch) {
  if (key.rfind("general.", 0) == 0) return true;
  return !arch.empty() && key.size() > arch.size() && key.rfind(arch + ".", 0) == 0;
}

std::string architecture_of(const File& f) {
  const Value* v = f.find("general.architecture");
  if (!v || v->type != ValueType::string) return {};
  return std::get<std::string>(v->v);
}

json tensor_json(const TensorInfo& t) {
  return {{"name", t.name},
          {"type", type_name(t.type)},
          {"shape", shape_json(t)},
          {"offset", t.offset},
          {"bytes", t.n_bytes}};
}

json tokenizer_json(const File& f) {
  const Value* model = f.find("tokenizer.ggml.model");
  if (!model) return nullptr;
  json j = {{"model", gguf::value_to_string(*model)}};
  if (model->type == ValueType::string) j["model"] = std::get<std::string>(model->v);
  if (const Value* pre = f.find("tokenizer.ggml.pre"); pre && pre->type == ValueType::string)
    j["pre"] = std::get<std::string>(pre->v);
  for (const auto& [key, name] : {std::pair{"tokenizer.ggml.tokens", "n_tokens"},
                                  std::pair{"tokenizer.ggml.merges", "n_merges"}}) {
    const Value* v = f.find(key);
    if (v && v->type == ValueType::array) j[name] = std::get<Array>(v->v).size();
  }
  for (const char* id : {"bos_token_id", "eos_token_id", "padding_token_id"}) {
    const Value* v = f.find(std::string("tokenizer.ggml.") + id);
    if (v && v->type != ValueType::array) j[id] = value_to_json(*v);
  }
  return j;
}

json inspect_json(const File& f) {
  const std::string arch = architecture_of(f);
  const Summary s = summarise(f);
  const ExpertStats es = expert_stats(f);
  json j;
  j["file"] = f.path();
  j["file_size"] = f.file_size();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["architecture"] = arch.empty() ? json(nullptr) : json(arch);
  json hp = json::object(), md = json::array();
  for (const auto& [key, v] : f.metadata()) {
    json e = {{"key", key}, {"type", gguf::value_type_string(v)}};
    if (summarised(key, v))
      e["count"] = std::get<Array>(v.v).size();
    else
      e["value"] = value_to_json(v);
    md.push_back(e);
    if (is_hyperparameter(key, arch) && !summarised(key, v)) hp[key] = value_to_json(v);
  }
  j["hyperparameters"] = hp;
  j["metadata"] = md;
  j["tokenizer"] = tokenizer_json(f);
  j["tensor_count"] = f.tensors().size();
  json by_type = json::object();
  for (const auto& [name, e] : s.by_type)
    by_type[name] = {{"tensors", e.first}, {"bytes", e.second}};
  j["bytes_by_type"] = by_type;
  j["expert_bytes"] = s.expert_bytes;
  j["expert_tensor_count"] = s.expert_tensors;
  j["non_expert_bytes"] = s.other_bytes;
  if (es.bytes_per_layer.empty()) {
    j["per_expert"] = nullptr;
  } else {
    json layers = json::object(), types = json::object();
    for (const auto& [layer, bytes] : es.bytes_per_layer) layers[std::to_string(layer)] = bytes;
    for (const auto& [layer, by_proj] : es.types_per_layer) {
      json t = json::object();
      for (const auto& [proj, type] : by_proj) t[proj] = std::string(type_name(type));
      types[std::to_string(layer)] = t;
    }
    j["per_expert"] = {{"typical_bytes", es.typical},
                       {"min_bytes", es.min},
                       {"max_bytes", es.max},
                       {"layers", es.bytes_per_layer.size()},
                       {"experts_per_layer", es.experts_per_layer},
                       {"bytes_by_layer", layers},
                       {"types_by_layer", types}};
  }
  json largest = json::array(), tensors = json::array();
  for (const TensorInfo* t : s.largest) largest.push_back(tensor_json(*t));
  for (const auto& t : f.tensors()) tensors.push_back(tensor_json(t));
  j["largest_tensors"] = largest;
  j["tensors"] = tensors;
  return j;
}

// Runs of layers whose experts have the same types and bytes, one line each:
//   layers 0-4    gate Q6_K  up Q6_K  down Q6_K   2.46 MiB per expert
void print_expert_layers(const ExpertStats& es) {
  auto describe = [&](uint64_t layer) {
    std::string d;
    const auto& by_proj = es.types_per_layer.at(layer);
    std::vector<std::string> order = {"gate_up", "gate", "up", "down"};
    for (const auto& [proj, type] : by_proj)
      if (std::find(order.begin(), order.end(), proj) == order.end()) order.push_back(proj);
    for (const std::string& proj : order)
      if (auto t = by_proj.find(proj); t != by_proj.end())
        d += fmt::format("{} {:<7}", proj, type_name(t->second));
    return d + fmt::format(" {:>12} per expert", human_bytes(es.bytes_per_layer.at(layer)));
  };
  std::printf("experts by layer:\n");
  auto it = es.bytes_per_layer.begin();
  while (it != es.bytes_per_layer.end()) {
    const uint64_t first = it->first;
    const std::string d = describe(first);
    uint64_t last = first;
    for (++it; it != es.bytes_per_layer.end() && it->first == last + 1 && describe(it->first) == d; ++it)
      last = it->first;
    const std::string range = first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last);
    std::printf("  layers %-7s %s\n", range.c_str(), d.c_str());
  }
}

void print_text(const File& f) {
  const std::string arch = architecture_of(f);
  const Summary s = summarise(f);
  const ExpertStats es = expert_stats(f);
  std::printf("file          %s\n", f.path().c_str());
  std::printf("size          %s (%llu bytes)\n", human_bytes(f.file_size()).c_str(),
              static_cast<unsigned long long>(f.file_size()));
  std::printf("gguf          v%u, alignment %u, data at offset %llu\n", f.version(), f.alignment(),
              static_cast<unsigned long long>(f.data_offset()));
  std::printf("architecture  %s\n", arch.empty() ? "(none)" : arch.c_str());

  auto print_kv = [](const std::string& key, const Value& v) {
    std::printf("  %-44s %-14s %s\n", key.c_str(), gguf::value_type_string(v).c_str(),
                is_tokenizer_table(key)
                    ? fmt::format("({} entries)", std::get<Array>(v.v).size()).c_str()
                    : gguf::value_to_string(v, kMaxTextArray).c_str());
  };
  std::printf("\nhyperparameters:\n");
  for (const auto& [key, v] : f.metadata())
    if (is_hyperparameter(key, arch)) print_kv(key, v);
  std::printf("\nother metadata:\n");
  for (const auto& [key, v] : f.metadata())
    if (!is_hyperparameter(key, arch)) print_kv(key, v);

  const json tok = tokenizer_json(f);
  if (!tok.is_null()) {
    std::printf("\ntokenizer     %s", tok["model"].dump().c_str());
    if (tok.contains("pre")) std::printf(", pre %s", tok["pre"].dump().c_str());
    if (tok.contains("n_tokens")) std::printf(", %s tokens", tok["n_tokens"].dump().c_str());
    if (tok.contains("n_merges")) std::printf(", %s merges", tok["n_merges"].dump().c_str());
    if (tok.contains("bos_token_id")) std::printf(", bos %s", tok["bos_token_id"].dump().c_str());
    if (tok.contains("eos_token_id")) std::printf(", eos %s", tok["eos_token_id"].dump().c_str());
    std::printf("\n");
  }

  std::printf("\ntensors       %zu\n", f.tensors().size());
  for (const auto& [name, e] : s.by_type)
    std::printf("  %-8s %6llu tensors  %12s\n", name.c_str(),
                static_cast<unsigned long long>(e.first), human_bytes(e.second).c_str());
  std::printf("expert bytes      %s in %llu tensors (names containing \"_exps\")\n",
              human_bytes(s.expert_bytes).c_str(),
              static_cast<unsigned long long>(s.expert_tensors));
  std::printf("non-expert bytes  %s\n", human_bytes(s.other_bytes).c_str());
  if (!es.bytes_per_layer.empty()) {
    std::printf(
        "per expert        %s typical (gate+up+down of one expert; %zu layers x %llu experts",
        human_bytes(es.typical).c_str(), es.bytes_per_layer.size(),
        static_cast<unsigned long long>(es.experts_per_layer));
    if (es.min != es.max)
      std::printf("; %s to %s by layer", human_bytes(es.min).c_str(), human_bytes(es.max).c_str());
    std::printf(")\n");
    print_expert_layers(es);
  }
  std::printf("\nlargest tensors:\n");
  for (const TensorInfo* t : s.largest)
    std::printf("  %-40s %-7s %-22s %12s\n", t->name.c_str(),
                std::string(type_name(t->type)).c_str(), shape_text(*t).c_str(),
                human_bytes(t->n_bytes).c_str());
}

int run_inspect(int argc, char** argv) {
  CLI::App app{
      "Show what a GGUF file holds: architecture, hyperparameters, tokenizer, tensor "
      "bytes by type, expert sizes, largest tensors.",
      "ferry inspect"};
  std::string path;
  bool as_json = false;
  app.add_option("file", path, "GGUF file")->required();
  app.add_flag("--json", as_json, "print one JSON object instead of text");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help → 0; usage errors → 2, like `ferry` itself
  }
  const File f = File::open(path);
  if (as_json) {
    // Strings in a hostile file need not be UTF-8: replace invalid bytes rather than fail.
    std::printf("%s\n",
                inspect_json(f).dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    print_text(f);
  }
  return 0;
}

}  // namespace

FERRY_COMMAND("inspect", "show a GGUF file's metadata, tensors and expert sizes", run_inspect);

}  // namespace ferry::cli
