// `ferry gguf-copy IN OUT [--set KEY=TYPE:VALUE ...] [--drop KEY ...]`: streams IN through the
// GGUF reader and writer, optionally editing metadata. Tensor data is copied from the mapping,
// never held in memory; OUT appears atomically (OUT may be IN).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "runtime/cli/command.hpp"
#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::cli {
namespace {

using gguf::Value;

template <typename T>
T parse_int(const std::string& text, const std::string& spec) {
  T x{};
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, x);
  if (r.ec == std::errc::result_out_of_range)
    fail(ErrorKind::invalid_arg, "--set {}: value out of range", spec);
  if (r.ec != std::errc() || r.ptr != end || text.empty())
    fail(ErrorKind::invalid_arg, "--set {}: '{}' is not an integer", spec, text);
  return x;
}

double parse_float(const std::string& text, const std::string& spec, bool single) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size())
    fail(ErrorKind::invalid_arg, "--set {}: '{}' is not a number", spec, text);
  if (errno == ERANGE && std::isinf(x))
    fail(ErrorKind::invalid_arg, "--set {}: value out of range", spec);
  if (single && std::isfinite(x) && std::fabs(x) > std::numeric_limits<float>::max())
    fail(ErrorKind::invalid_arg, "--set {}: value out of range for f32", spec);
  return x;
}

// "KEY=TYPE:VALUE" → (key, value).
std::pair<std::string, Value> parse_set(const std::string& spec) {
  const size_t eq = spec.find('=');
  const size_t colon = eq == std::string::npos ? eq : spec.find(':', eq + 1);
  if (eq == 0 || eq == std::string::npos || colon == std::string::npos)
    fail(ErrorKind::invalid_arg, "--set {}: expected KEY=TYPE:VALUE", spec);
  const std::string key = spec.substr(0, eq);
  const std::string type = spec.substr(eq + 1, colon - eq - 1);
  const std::string text = spec.substr(colon + 1);
  if (type == "u8") return {key, Value::u8(parse_int<uint8_t>(text, spec))};
  if (type == "i8") return {key, Value::i8(parse_int<int8_t>(text, spec))};
  if (type == "u16") return {key, Value::u16(parse_int<uint16_t>(text, spec))};
  if (type == "i16") return {key, Value::i16(parse_int<int16_t>(text, spec))};
  if (type == "u32") return {key, Value::u32(parse_int<uint32_t>(text, spec))};
  if (type == "i32") return {key, Value::i32(parse_int<int32_t>(text, spec))};
  if (type == "u64") return {key, Value::u64(parse_int<uint64_t>(text, spec))};
  if (type == "i64") return {key, Value::i64(parse_int<int64_t>(text, spec))};
  if (type == "f32") return {key, Value::f32(static_cast<float>(parse_float(text, spec, true)))};
  if (type == "f64") return {key, Value::f64(parse_float(text, spec, false))};
  if (type == "str") return {key, Value::str(text)};
  if (type == "bool") {
    if (text == "true" || text == "1") return {key, Value::boolean(true)};
    if (text == "false" || text == "0") return {key, Value::boolean(false)};
    fail(ErrorKind::invalid_arg, "--set {}: bool must be true/false/1/0", spec);
  }
  fail(ErrorKind::invalid_arg,
       "--set {}: unknown type '{}' (u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str)", spec, type);
}

int run_gguf_copy(int argc, char** argv) {
  CLI::App app{"Copy a GGUF file through Ferry's reader and writer, editing metadata on the way.",
               "ferry gguf-copy"};
  std::string in_path, out_path;
  std::vector<std::string> sets, drops;
  app.add_option("in", in_path, "input GGUF")->required();
  app.add_option("out", out_path, "output GGUF (written to OUT.tmp, then renamed)")->required();
  app.add_option("--set", sets,
                 "set or replace a key: KEY=TYPE:VALUE, TYPE one of u8 i8 u16 i16 "
                 "u32 i32 u64 i64 f32 f64 bool str (repeatable)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--drop", drops, "remove a key (repeatable)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help → 0; usage errors → 2, like `ferry` itself
  }

  const gguf::File in = gguf::File::open(in_path);
  std::vector<std::pair<std::string, Value>> kv = in.metadata();
  for (const auto& key : drops) {
    const auto it =
        std::find_if(kv.begin(), kv.end(), [&](const auto& e) { return e.first == key; });
    if (it == kv.end()) fail(ErrorKind::invalid_arg, "--drop {}: key not in {}", key, in_path);
    kv.erase(it);
  }
  for (const auto& spec : sets) {
    auto [key, v] = parse_set(spec);
    const auto it =
        std::find_if(kv.begin(), kv.end(), [&](const auto& e) { return e.first == key; });
    if (it != kv.end())
      it->second = std::move(v);
    else
      kv.emplace_back(std::move(key), std::move(v));
  }

  // The output alignment is what its metadata says (the writer checks it is a power of two).
  uint32_t alignment = 32;
  for (const auto& [key, v] : kv) {
    if (key != "general.alignment") continue;
    const auto* x = std::get_if<uint64_t>(&v.v);
    if (v.type != gguf::ValueType::u32 || !x)
      fail(ErrorKind::invalid_arg, "general.alignment must be a u32 (got {})",
           gguf::value_type_string(v));
    alignment = static_cast<uint32_t>(*x);
  }

  gguf::Writer out(out_path, alignment);
  for (auto& [key, v] : kv) out.set(key, v);
  for (const auto& t : in.tensors())
    out.add_tensor(t.name, t.type,
                   std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + std::max(t.n_dims, 1u)));
  for (const auto& t : in.tensors()) out.write_data(in.data(t), t.n_bytes);
  out.finish();
  std::printf("wrote %s: %zu keys (%zu set, %zu dropped), %zu tensors\n", out_path.c_str(),
              kv.size(), sets.size(), drops.size(), in.tensors().size());
  return 0;
}

}  // namespace

FERRY_COMMAND("gguf-copy", "copy a GGUF file, optionally setting or dropping metadata keys",
              run_gguf_copy);

}  // namespace ferry::cli
