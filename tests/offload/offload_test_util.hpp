#pragma once
// Shared by the tests/offload programs: synthetic models written once per program, a model run
// through any MoE executor, and offload options built straight from a GGUF.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "offload/offload_executor.hpp"
#include "runtime/backend/cpu_ops.hpp"
#include "runtime/backend/sim_device.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/model.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::test {

inline std::string scratch_dir() {
  const std::filesystem::path d = std::filesystem::path(FERRY_BINARY_DIR) / "test-scratch" /
                                  ("offload-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

inline void remove_scratch() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_dir(), ec);
}

inline std::string write_model(const synth::Options& o, const std::string& name) {
  const std::string path = scratch_dir() + "/" + name + ".gguf";
  if (!std::filesystem::exists(path))
    synth::write_model(synth::make_plan(o), path, synth::WriteOptions{2, {}});
  return path;
}

inline std::vector<int32_t> random_tokens(size_t n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Per-layer file offsets of the three expert tensors (for uring / mmap host stores).
inline std::vector<std::array<uint64_t, 3>> expert_file_offsets(const gguf::File& f,
                                                                int32_t n_layer) {
  std::vector<std::array<uint64_t, 3>> off;
  for (int32_t l = 0; l < n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".ffn_";
    off.push_back({f.tensor(p + "gate_exps.weight").file_offset,
                   f.tensor(p + "up_exps.weight").file_offset,
                   f.tensor(p + "down_exps.weight").file_offset});
  }
  return off;
}

// A placement input with a fixed part of `fixed_bytes` and a budget for `slots` expert slots,
// placed uniformly (slots / n_layer per layer, one more for the first slots % n_layer layers; each
// in its layer's size class). step_bytes: the step buffers (device_step_bytes).
inline PlacementInput input_for_slots(const std::vector<MoeLayerWeights>& layers, int32_t top_k,
                                      int64_t slots, uint64_t fixed_bytes = 1 << 20, uint64_t step_bytes = 0) {
  PlacementInput in;
  in.model = "test";
  in.n_layer = static_cast<int32_t>(layers.size());
  in.n_expert = layers[0].n_expert;
  in.n_expert_used = top_k;
  uint64_t largest = 0, slot_bytes = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const uint64_t b = expert_shape(layers[l]).expert_bytes();
    in.layer_expert_bytes.push_back(b);
    largest = std::max(largest, b);
    slot_bytes += b * static_cast<uint64_t>(slots / in.n_layer +
                                            (static_cast<int64_t>(l) < slots % in.n_layer));
  }
  in.dense_bytes = fixed_bytes;
  in.kv_types = "f16/f16";
  // fixed part of the plan: dense + step buffers + staging (2 slots of the largest expert)
  const uint64_t staging = 2 * ((largest + 255) / 256 * 256);
  in.step_bytes = step_bytes;
  in.budget_bytes =
      fixed_bytes + (step_bytes + 255) / 256 * 256 + staging + (slot_bytes + 255) / 256 * 256;
  return in;
}

// got against ref: Σ(got − ref)² / Σ ref² (NaN when got has NaNs) and the largest |got − ref|.
struct Diff {
  double nmse = 0, max_abs = 0;
};
inline Diff diff(const std::vector<float>& got, const std::vector<float>& ref) {
  double err = 0, norm = 0, max_abs = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    err += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
    max_abs = std::max(max_abs, std::abs(d));
  }
  return {err / norm, max_abs};
}

// Logits of every token: one prefill of `prefill` tokens, then the rest decoded one at a time.
inline std::vector<float> run_logits(Model& m, const std::vector<int32_t>& toks, size_t prefill) {
  StateOptions so;
  so.n_ctx = 256;
  auto st = m.new_state(so);
  const auto V = static_cast<size_t>(m.config().n_vocab);
  std::vector<float> out(toks.size() * V);
  m.forward(*st, std::span<const int32_t>(toks.data(), prefill), LogitsMode::all, out.data());
  for (size_t i = prefill; i < toks.size(); ++i)
    m.forward(*st, std::span<const int32_t>(toks.data() + i, 1), LogitsMode::last,
              out.data() + i * V);
  return out;
}

}  // namespace ferry::test
