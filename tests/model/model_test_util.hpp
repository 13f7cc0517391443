#pragma once
// Shared by the tests/model programs: tiny synthetic models written once per program into a
// scratch directory under the build tree, and small numeric helpers.
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/synth/synth.hpp"

namespace ferry::test {

inline std::string scratch_dir() {
  const std::filesystem::path d =
      std::filesystem::path(FERRY_BINARY_DIR) / "test-scratch" / ("model-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

// Writes plan to DIR/name.gguf (once per process) and returns the path.
inline std::string write_plan(const synth::ModelPlan& plan, const std::string& name) {
  const std::string path = scratch_dir() + "/" + name + ".gguf";
  if (!std::filesystem::exists(path)) synth::write_model(plan, path, synth::WriteOptions{2, {}});
  return path;
}

inline synth::ModelPlan tiny_plan(synth::QuantMix q = synth::QuantMix::f32, uint64_t seed = 1) {
  synth::Options o;
  o.arch = synth::Arch::qwen3moe;
  o.preset = synth::Preset::tiny;
  o.quant = q;
  o.seed = seed;
  return synth::make_plan(o);
}

inline double nmse(const float* a, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double{a[i]} - ref[i]) * (double{a[i]} - ref[i]);
    den += double{ref[i]} * ref[i];
  }
  return num / den;
}

// The same against a float64 reference of ref.size() values.
inline double nmse(const float* a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return num / den;
}

inline void remove_scratch() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_dir(), ec);
}

}  // namespace ferry::test
