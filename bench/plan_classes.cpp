// The offload plan of a synthetic model without its weights: slots held at given budgets with
// slot size classes and with the layout before them (every slot the size of the largest expert,
// plus the dead slot table the old plan charged). For real-size presets whose files are too big
// to write here (35b-a3b: 21 GB). The numbers are the placement's, as `ferry run --device sim
// --print-plan` would print them for the written file: dense bytes and per-layer expert bytes from
// the synth tensor table, KV cache, recurrent state and workspace from state_footprint on the
// config the file's metadata gives (built here from the preset's hyperparameters; --check FILE
// compares that config with read_config of a written file of the same options).
//
//   bench_plan_classes --arch qwen35moe --preset 35b-a3b --quant q4_k_m [--expert-types SPEC]
//                      [-c 512] [-b 64] [--vram 16G,12G] [--check FILE]
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "offload/placement.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/model.hpp"
#include "runtime/synth/synth.hpp"

namespace {

using namespace ferry;

// What read_config makes of the metadata synth writes (runtime/model/config.cpp).
ModelConfig config_of(const synth::Hparams& hp) {
  ModelConfig c;
  c.arch = hp.arch == synth::Arch::qwen3moe    ? Arch::qwen3moe
           : hp.arch == synth::Arch::qwen35moe ? Arch::qwen35moe
                                               : Arch::qwen3next;
  c.file = "(synth plan)";
  c.n_layer = static_cast<int32_t>(hp.n_layer);
  c.n_embd = static_cast<int32_t>(hp.n_embd);
  c.n_vocab = static_cast<int32_t>(hp.n_vocab);
  c.n_ctx_train = hp.n_ctx_train;
  c.rms_eps = hp.rms_eps;
  c.n_head = static_cast<int32_t>(hp.n_head);
  c.n_head_kv = static_cast<int32_t>(hp.n_head_kv);
  c.head_dim_k = c.head_dim_v = static_cast<int32_t>(hp.head_dim);
  c.n_rot = static_cast<int32_t>(hp.n_rot ? hp.n_rot : hp.head_dim);
  c.rope_freq_base = hp.rope_freq_base;
  c.attn_output_gate = hp.arch != synth::Arch::qwen3moe;
  c.n_expert = static_cast<int32_t>(hp.n_expert);
  c.n_expert_used = static_cast<int32_t>(hp.n_expert_used);
  c.n_ff_exp = static_cast<int32_t>(hp.n_ff_exp);
  c.n_ff_shexp = static_cast<int32_t>(hp.n_ff_shexp);
  c.ssm_conv_kernel = static_cast<int32_t>(hp.ssm_conv_kernel);
  c.ssm_state_size = static_cast<int32_t>(hp.ssm_state_size);
  c.ssm_group_count = static_cast<int32_t>(hp.ssm_group_count);
  c.ssm_time_step_rank = static_cast<int32_t>(hp.ssm_time_step_rank);
  c.ssm_inner_size = static_cast<int32_t>(hp.ssm_inner_size);
  for (uint32_t l = 0; l < hp.n_layer; ++l)
    c.layer_kind.push_back(hp.is_recurrent(l) ? LayerKind::deltanet : LayerKind::attention);
  validate_config(c);
  return c;
}

// The plan before size classes (placement.cpp at e4f59d1): slots of the largest expert rounded
// up to 256 bytes, and a slot table of 28 bytes per expert in the fixed part.
int64_t padded_slots(const Plan& p) {
  uint64_t largest = 0;
  for (uint64_t b : p.in.layer_expert_bytes) largest = std::max(largest, b);
  const uint64_t slot = (largest + 255) / 256 * 256;
  const auto total = static_cast<uint64_t>(p.total_experts());
  const uint64_t table = (total * 24 + 255) / 256 * 256 + (total * 4 + 255) / 256 * 256;
  const uint64_t fixed = p.fixed_bytes() + table;
  if (p.in.budget_bytes == 0) return static_cast<int64_t>(total);
  if (fixed > p.in.budget_bytes) return 0;
  return static_cast<int64_t>(std::min<uint64_t>(total, (p.in.budget_bytes - fixed) / slot));
}

int run(int argc, char** argv) {
  synth::Options o;
  o.arch = synth::Arch::qwen35moe;
  o.preset = synth::Preset::real;
  o.quant = synth::QuantMix::q4_k_m;
  std::string vram = "16G,12G", check;
  int64_t n_ctx = 512;
  int32_t n_batch = 64;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto val = [&]() -> std::string {
      if (i + 1 >= argc) fail(ErrorKind::invalid_arg, "{} needs a value", a);
      return argv[++i];
    };
    if (a == "--arch") {
      const auto x = synth::arch_from_name(val());
      if (!x) fail(ErrorKind::invalid_arg, "unknown --arch");
      o.arch = *x;
    } else if (a == "--preset") {
      const std::string v = val();
      const auto x = synth::preset_from_name(o.arch, v);
      if (!x) fail(ErrorKind::invalid_arg, "unknown --preset {}", v);
      o.preset = *x;
    } else if (a == "--quant") {
      const auto x = synth::quant_mix_from_name(val());
      if (!x) fail(ErrorKind::invalid_arg, "unknown --quant");
      o.quant = *x;
    } else if (a == "--expert-types") {
      o.expert_types = val();
    } else if (a == "-c") {
      n_ctx = std::stoll(val());
    } else if (a == "-b") {
      n_batch = std::stoi(val());
    } else if (a == "--vram") {
      vram = val();
    } else if (a == "--check") {
      check = val();
    } else {
      fail(ErrorKind::invalid_arg, "unknown argument {}", a);
    }
  }
  const synth::ModelPlan mp = synth::make_plan(o);
  const ModelConfig c = config_of(mp.hp);
  StateOptions so;
  so.n_ctx = n_ctx;
  so.n_batch = n_batch;
  const StateFootprint fp = state_footprint(c, so);
  if (!check.empty()) {
    const gguf::File f = gguf::File::open(check);
    const StateFootprint ref = state_footprint(read_config(f), so);
    if (ref.kv_bytes != fp.kv_bytes || ref.recurrent_bytes != fp.recurrent_bytes ||
        ref.workspace_bytes != fp.workspace_bytes)
      fail(ErrorKind::internal,
           "config of {} differs from the synth hyperparameters' ({}/{}/{} vs {}/{}/{})", check,
           ref.kv_bytes, ref.recurrent_bytes, ref.workspace_bytes, fp.kv_bytes, fp.recurrent_bytes,
           fp.workspace_bytes);
    std::printf("check: %s gives the same KV / state / workspace bytes\n", check.c_str());
  }

  PlacementInput in;
  in.model = fmt::format("synth {} {} {}{}", synth::arch_name(o.arch),
                         synth::preset_name(o.arch, o.preset), synth::quant_mix_name(o.quant),
                         o.expert_types.empty() ? "" : " --expert-types " + o.expert_types);
  in.n_layer = c.n_layer;
  in.n_expert = c.n_expert;
  in.n_expert_used = c.n_expert_used;
  in.layer_expert_bytes.assign(static_cast<size_t>(c.n_layer), 0);
  std::vector<std::string> types(static_cast<size_t>(c.n_layer));
  for (const synth::TensorPlan& t : mp.tensors) {
    if (t.name.find("_exps.") == std::string::npos) {
      in.dense_bytes += t.n_bytes;
      continue;
    }
    in.layer_expert_bytes[static_cast<size_t>(t.layer)] += t.n_bytes / mp.hp.n_expert;
    auto& s = types[static_cast<size_t>(t.layer)];
    if (!s.empty()) s += '/';
    s += type_name(t.type);
  }
  in.kv_bytes = fp.kv_bytes;
  in.state_bytes = fp.recurrent_bytes;
  in.workspace_bytes = fp.workspace_bytes;
  in.n_ctx = n_ctx;
  in.kv_types = "F16/F16";
  // Expert types (gate/up/down) by layer, runs of equal layers merged.
  std::printf("%s: expert types (gate/up/down) by layer:", in.model.c_str());
  for (size_t l = 0; l < types.size();) {
    size_t j = l;
    while (j + 1 < types.size() && types[j + 1] == types[l]) ++j;
    std::printf(" %zu%s%s %s;", l, j > l ? "-" : "", j > l ? std::to_string(j).c_str() : "",
                types[l].c_str());
    l = j + 1;
  }
  std::printf("\n");
  for (size_t at = 0; at <= vram.size();) {
    const size_t comma = vram.find(',', at);
    const std::string v =
        vram.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? vram.size() + 1 : comma + 1;
    in.budget_bytes = parse_size(v);
    const Plan p = make_plan(in);
    std::printf(
        "--vram %s -c %lld -b %d: %d of %lld experts resident with size classes, %lld with one "
        "padded "
        "slot size (before)\n%s",
        v.c_str(), static_cast<long long>(n_ctx), n_batch, p.n_slots,
        static_cast<long long>(p.total_experts()), static_cast<long long>(padded_slots(p)),
        plan_text(p).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_plan_classes: %s\n", e.what());
    return 1;
  }
}
