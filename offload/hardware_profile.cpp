#include "offload/hardware_profile.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/core/error.hpp"

namespace ferry {
namespace {

using nlohmann::json;

const std::vector<std::string>& required_figures(ProfileKind kind) {
  static const std::vector<std::string> gpu = {"vram_bytes",  "mem_bandwidth_gbps",
                                               "pcie_gen",    "pcie_lanes",
                                               "sm_count",    "boost_clock_mhz"};
  static const std::vector<std::string> host = {"dram_bandwidth_gbps", "cores", "threads", "isa"};
  static const std::vector<std::string> none;
  return kind == ProfileKind::gpu ? gpu : kind == ProfileKind::host ? host : none;
}

std::string string_field(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty())
    fail(ErrorKind::format, "hardware profile {}: field \"{}\" missing or not a non-empty string",
         path, key);
  return j[key].get<std::string>();
}

HardwareFigure parse_figure(const json& f, const std::string& key, const std::string& path,
                            bool simulator) {
  if (!f.is_object())
    fail(ErrorKind::format,
         "hardware profile {}: figure \"{}\" is not an object {{value, label, source}}", path, key);
  HardwareFigure out;
  if (!f.contains("value"))
    fail(ErrorKind::format, "hardware profile {}: figure \"{}\" has no \"value\"", path, key);
  const json& v = f["value"];
  if (v.is_number()) {
    out.value = v.get<double>();
    if (!std::isfinite(out.value) || out.value < 0)
      fail(ErrorKind::format, "hardware profile {}: figure \"{}\" value {} is negative or not finite",
           path, key, out.value);
  } else if (v.is_string()) {
    out.text = v.get<std::string>();
    out.is_text = true;
  } else {
    fail(ErrorKind::format, "hardware profile {}: figure \"{}\" value is neither a number nor a string",
         path, key);
  }
  const std::string label = f.contains("label") && f["label"].is_string() ? f["label"].get<std::string>() : "";
  // Hardware figures are published or measured; the simulator's parameters may also be stated
  // assumptions (docs/simulator.md lists them), never silently.
  const std::optional<FigureLabel> l = find_named(kFigureLabels, label);
  if (!l || (*l == FigureLabel::assumed && !simulator))
    fail(ErrorKind::format,
         "hardware profile {}: figure \"{}\" label \"{}\" must be \"spec\" or \"measured\"{}", path,
         key, label, simulator ? " (or \"assumed\")" : "");
  out.label = *l;
  out.source = f.contains("source") && f["source"].is_string() ? f["source"].get<std::string>() : "";
  if (out.source.empty())
    fail(ErrorKind::format, "hardware profile {}: figure \"{}\" has no \"source\"", path, key);
  return out;
}

}  // namespace

const HardwareFigure& HardwareProfile::figure(const std::string& key) const {
  const auto it = figures.find(key);
  if (it == figures.end())
    fail(ErrorKind::format, "hardware profile {} ({}): figure \"{}\" missing",
         path.empty() ? id : path, name_of(kProfileKinds, kind), key);
  return it->second;
}

double HardwareProfile::number(const std::string& key) const {
  const HardwareFigure& f = figure(key);
  if (f.is_text)
    fail(ErrorKind::format, "hardware profile {}: figure \"{}\" is text, expected a number",
         path.empty() ? id : path, key);
  return f.value;
}

double HardwareProfile::number_or(const std::string& key, double fallback) const {
  return has(key) ? number(key) : fallback;
}

const std::string& HardwareProfile::text(const std::string& key) const {
  const HardwareFigure& f = figure(key);
  if (!f.is_text)
    fail(ErrorKind::format, "hardware profile {}: figure \"{}\" is a number, expected text",
         path.empty() ? id : path, key);
  return f.text;
}

HardwareProfile parse_hardware_profile(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorKind::format, "hardware profile {}: not JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail(ErrorKind::format, "hardware profile {}: not a JSON object", path);
  if (string_field(j, "format", path) != "ferry-hardware-profile")
    fail(ErrorKind::format, "hardware profile {}: field \"format\" must be \"ferry-hardware-profile\"",
         path);
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() != 1)
    fail(ErrorKind::format, "hardware profile {}: field \"version\" must be 1", path);
  HardwareProfile p;
  p.path = path;
  const std::string kind = string_field(j, "kind", path);
  const std::optional<ProfileKind> k = find_named(kProfileKinds, kind);
  if (!k)
    fail(ErrorKind::format, "hardware profile {}: field \"kind\" \"{}\" (gpu, host or simulator)",
         path, kind);
  p.kind = *k;
  p.id = string_field(j, "id", path);
  p.name = string_field(j, "name", path);
  if (j.contains("hosts")) {
    if (!j["hosts"].is_array())
      fail(ErrorKind::format, "hardware profile {}: field \"hosts\" is not an array", path);
    for (const json& h : j["hosts"]) {
      if (!h.is_string())
        fail(ErrorKind::format, "hardware profile {}: field \"hosts\" holds a non-string", path);
      p.hosts.push_back(h.get<std::string>());
    }
  }
  if (!j.contains("figures") || !j["figures"].is_object())
    fail(ErrorKind::format, "hardware profile {}: field \"figures\" missing or not an object", path);
  for (const auto& [key, f] : j["figures"].items()) p.figures[key] = parse_figure(f, key, path, p.kind == ProfileKind::simulator);
  for (const std::string& key : required_figures(p.kind)) {
    if (!p.has(key))
      fail(ErrorKind::format, "hardware profile {}: {} figure \"{}\" missing", path,
           name_of(kProfileKinds, p.kind), key);
    if ((key == "isa") != p.figures[key].is_text)
      fail(ErrorKind::format, "hardware profile {}: figure \"{}\" must be {}", path, key,
           key == "isa" ? "text" : "a number");
  }
  return p;
}

HardwareProfile load_hardware_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::io, "cannot read hardware profile {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_hardware_profile(ss.str(), path);
}

std::vector<HardwareProfile> list_hardware_profiles(const std::string& dir, ProfileKind kind) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::path(dir) / name_of(kProfileKinds, kind);
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    fail(ErrorKind::io, "no hardware profile folder {}", folder.string());
  std::vector<HardwareProfile> out;
  for (const auto& e : fs::directory_iterator(folder)) {
    if (e.path().extension() != ".json") continue;
    HardwareProfile p = load_hardware_profile(e.path().string());
    if (p.kind != kind)
      fail(ErrorKind::format, "hardware profile {}: kind \"{}\" in the {} folder", p.path,
           name_of(kProfileKinds, p.kind), name_of(kProfileKinds, kind));
    out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(),
            [](const HardwareProfile& a, const HardwareProfile& b) { return a.id < b.id; });
  return out;
}

HardwareProfile find_hardware_profile(const std::string& dir, ProfileKind kind,
                                      const std::string& id) {
  const std::filesystem::path p = std::filesystem::path(dir) / name_of(kProfileKinds, kind) / (id + ".json");
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) {
    std::string known;
    for (const HardwareProfile& h : list_hardware_profiles(dir, kind))
      known += (known.empty() ? "" : ", ") + h.id;
    fail(ErrorKind::invalid_arg, "unknown {} profile '{}' (in {}: {})", name_of(kProfileKinds, kind), id,
         dir, known);
  }
  HardwareProfile h = load_hardware_profile(p.string());
  if (h.id != id)
    fail(ErrorKind::format, "hardware profile {}: id \"{}\" does not match its file name", h.path,
         h.id);
  return h;
}

}  // namespace ferry
