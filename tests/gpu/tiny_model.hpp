#pragma once
// A tiny synthetic model (ferry synth's `tiny` preset, q4_k_m) written once per process into a
// temporary folder named after the test (`tag`) and the process id, for the engine-level GPU tests.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "runtime/synth/synth.hpp"

namespace ferry::gputest {

inline std::string tiny_model(synth::Arch arch, const std::string& tag, uint32_t seed) {
  const auto dir = std::filesystem::temp_directory_path() / ("ferry-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  synth::Options o;
  o.arch = arch;
  o.preset = synth::Preset::tiny;
  o.quant = synth::QuantMix::q4_k_m;
  o.seed = seed;
  const std::string path = (dir / (std::string(synth::arch_name(arch)) + ".gguf")).string();
  if (!std::filesystem::exists(path)) synth::write_model(synth::make_plan(o), path, synth::WriteOptions{2, {}});
  return path;
}

}  // namespace ferry::gputest
