#include "runtime/moe/placement_profile.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/core/error.hpp"

namespace ferry {

ExpertProfile::ExpertProfile(int32_t n_layer, int32_t n_expert)
    : n_layer_(n_layer), n_expert_(n_expert) {
  if (n_layer <= 0 || n_expert <= 0)
    fail(ErrorKind::invalid_arg, "expert profile of {} layers × {} experts", n_layer, n_expert);
  counts_.assign(static_cast<size_t>(n_layer) * static_cast<size_t>(n_expert), 0);
}

void ExpertProfile::add(int32_t layer, const int32_t* ids, int64_t n_tokens, int32_t top_k) {
  if (layer < 0 || layer >= n_layer_)
    fail(ErrorKind::internal, "expert profile: layer {} of {}", layer, n_layer_);
  for (int64_t i = 0; i < n_tokens * top_k; ++i) {
    if (ids[i] < 0 || ids[i] >= n_expert_)
      fail(ErrorKind::internal, "expert profile: layer {} expert id {} of {}", layer, ids[i],
           n_expert_);
    ++counts_[static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) +
              static_cast<size_t>(ids[i])];
  }
  if (layer == 0) tokens_ += static_cast<uint64_t>(n_tokens);
}

std::string ExpertProfile::to_json() const {
  nlohmann::json j;
  j["format"] = "ferry-expert-profile";
  j["version"] = 1;
  j["n_layer"] = n_layer_;
  j["n_expert"] = n_expert_;
  j["tokens"] = tokens_;
  nlohmann::json rows = nlohmann::json::array();
  for (int32_t l = 0; l < n_layer_; ++l) {
    nlohmann::json row = nlohmann::json::array();
    for (int32_t e = 0; e < n_expert_; ++e) row.push_back(count(l, e));
    rows.push_back(std::move(row));
  }
  j["counts"] = std::move(rows);
  return j.dump() + "\n";
}

void ExpertProfile::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail(ErrorKind::io, "cannot write expert profile {}", tmp);
    f << to_json();
    if (!f.flush()) fail(ErrorKind::io, "writing expert profile {} failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail(ErrorKind::io, "cannot rename {} to {}", tmp, path);
}

ExpertProfile ExpertProfile::read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::io, "cannot open expert profile {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    fail(ErrorKind::format, "expert profile {}: not a JSON object", path);
  if (j.value("format", std::string()) != "ferry-expert-profile")
    fail(ErrorKind::format, "expert profile {}: \"format\" is not \"ferry-expert-profile\"", path);
  if (j.value("version", 0) != 1)
    fail(ErrorKind::format, "expert profile {}: unsupported \"version\"", path);
  const auto get_int = [&](const char* key, int64_t lo, int64_t hi) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < lo ||
        j[key].get<int64_t>() > hi)
      fail(ErrorKind::format, "expert profile {}: \"{}\" missing or outside [{}, {}]", path, key,
           lo, hi);
    return j[key].get<int64_t>();
  };
  const auto L = static_cast<int32_t>(get_int("n_layer", 1, 4096));
  const auto E = static_cast<int32_t>(get_int("n_expert", 1, 65536));
  ExpertProfile p(L, E);
  p.tokens_ = static_cast<uint64_t>(get_int("tokens", 0, INT64_MAX));
  const auto& rows = j["counts"];
  if (!rows.is_array() || static_cast<int32_t>(rows.size()) != L)
    fail(ErrorKind::format, "expert profile {}: \"counts\" must be {} rows", path, L);
  for (int32_t l = 0; l < L; ++l) {
    const auto& row = rows[static_cast<size_t>(l)];
    if (!row.is_array() || static_cast<int32_t>(row.size()) != E)
      fail(ErrorKind::format, "expert profile {}: counts row {} must have {} entries", path, l, E);
    for (int32_t e = 0; e < E; ++e) {
      const auto& v = row[static_cast<size_t>(e)];
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        fail(ErrorKind::format, "expert profile {}: counts[{}][{}] is not a count", path, l, e);
      p.counts_[static_cast<size_t>(l) * static_cast<size_t>(E) + static_cast<size_t>(e)] =
          v.get<uint64_t>();
    }
  }
  return p;
}

}  // namespace ferry
