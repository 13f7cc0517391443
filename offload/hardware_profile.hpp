#pragma once
// Hardware profiles (profiles/hardware/{gpu,host}/*.json, profiles/hardware/simulator.json): the
// figures `ferry plan` and the offload simulator compute with, each labelled `spec` (a published
// specification) or `measured` (a measurement, where and how), with its source. Format:
//
//   {"format": "ferry-hardware-profile", "version": 1, "kind": "gpu" | "host" | "simulator",
//    "id": "rtx3060-12g", "name": "NVIDIA GeForce RTX 3060 12 GB",
//    "hosts": ["ddr4-3200-2ch-6c", ...],          // gpu only, optional: the plausible hosts
//    "figures": {"mem_bandwidth_gbps": {"value": 360, "label": "spec", "source": "..."}, ...}}
//
// A figure's value is a number, or a string for names (a host's "isa"). Required figures:
//   gpu:  vram_bytes, mem_bandwidth_gbps, pcie_gen, pcie_lanes, sm_count, boost_clock_mhz
//   host: dram_bandwidth_gbps, cores, threads, isa (and, where known, channels, ram_bytes)
//   simulator: whatever docs/simulator.md lists (checked by the simulator when it reads them).
#include <cstdint>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/named.hpp"

namespace ferry {

// What a profile describes, and the folder of profiles/hardware it lives in.
enum class ProfileKind { gpu, host, simulator };
inline constexpr std::array<Named<ProfileKind>, 3> kProfileKinds{
    {{"gpu", ProfileKind::gpu}, {"host", ProfileKind::host}, {"simulator", ProfileKind::simulator}}};
// Where a figure comes from: a published specification, a measurement, or (the simulator's
// parameters only) an assumption.
enum class FigureLabel { spec, measured, assumed };
inline constexpr std::array<Named<FigureLabel>, 3> kFigureLabels{
    {{"spec", FigureLabel::spec}, {"measured", FigureLabel::measured}, {"assumed", FigureLabel::assumed}}};

struct HardwareFigure {
  double value = 0.0;
  std::string text;  // string-valued figures ("isa"); empty for numbers
  bool is_text = false;
  FigureLabel label = FigureLabel::spec;  // assumed: simulator parameters only
  std::string source;  // where the figure comes from
};

struct HardwareProfile {
  std::string path;  // file it was read from ("" when made in code, e.g. the measured `this`)
  ProfileKind kind = ProfileKind::gpu;
  std::string id, name;
  std::vector<std::string> hosts;  // gpu: ids of plausible host profiles
  std::map<std::string, HardwareFigure> figures;

  bool has(const std::string& key) const { return figures.count(key) != 0; }
  // ErrorKind::format naming the file and the field when missing or not a number / not text.
  double number(const std::string& key) const;
  double number_or(const std::string& key, double fallback) const;
  const std::string& text(const std::string& key) const;
  const HardwareFigure& figure(const std::string& key) const;
};

// Reads and validates one profile: ErrorKind::io when unreadable; ErrorKind::format naming the
// file and the field (a missing or malformed figure, a label other than spec/measured, an empty
// source, a negative or non-finite number, an unknown kind).
HardwareProfile load_hardware_profile(const std::string& path);
// The same from JSON text (`path` names it in errors).
HardwareProfile parse_hardware_profile(const std::string& json_text, const std::string& path);

// The profiles of one kind in DIR/<kind>/*.json, sorted by id. ErrorKind::io when the folder is
// missing; a bad file is the loader's error.
std::vector<HardwareProfile> list_hardware_profiles(const std::string& dir, ProfileKind kind);
// DIR/<kind>/<id>.json, or ErrorKind::invalid_arg naming the id and the ids that exist.
HardwareProfile find_hardware_profile(const std::string& dir, ProfileKind kind,
                                      const std::string& id);

}  // namespace ferry
