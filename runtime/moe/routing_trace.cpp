#include "runtime/moe/routing_trace.hpp"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/core/error.hpp"

namespace ferry {

namespace {

constexpr char kMagic[4] = {'F', 'R', 'R', 'T'};
constexpr uint32_t kVersion = 1;
// Bounds that keep a hostile header from asking for absurd allocations.
constexpr int32_t kMaxLayers = 4096, kMaxExperts = 65536, kMaxTopK = 1024;

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

void check_header(const RoutingTraceHeader& h, const std::string& path) {
  if (h.n_layer < 1 || h.n_layer > kMaxLayers || h.n_expert < 1 || h.n_expert > kMaxExperts ||
      h.top_k < 1 || h.top_k > h.n_expert || h.top_k > kMaxTopK)
    fail(ErrorKind::format, "routing trace {}: bad header (n_layer {}, n_expert {}, top_k {})", path,
         h.n_layer, h.n_expert, h.top_k);
}

}  // namespace

RoutingTraceWriter::RoutingTraceWriter(std::string path, const RoutingTraceHeader& h)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), h_(h) {
  check_header(h_, path_);
  f_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!f_) fail(ErrorKind::io, "cannot create routing trace {}: {}", tmp_path_, std::strerror(errno));
  std::string hdr(kMagic, 4);
  put_u32(hdr, kVersion);
  put_u32(hdr, static_cast<uint32_t>(h_.n_layer));
  put_u32(hdr, static_cast<uint32_t>(h_.n_expert));
  put_u32(hdr, static_cast<uint32_t>(h_.top_k));
  put_u32(hdr, 0);
  if (std::fwrite(hdr.data(), 1, hdr.size(), f_) != hdr.size())
    fail(ErrorKind::io, "writing routing trace {}: {}", tmp_path_, std::strerror(errno));
}

RoutingTraceWriter::~RoutingTraceWriter() {
  if (f_) {
    std::fclose(f_);
    std::error_code ec;
    std::filesystem::remove(tmp_path_, ec);
  }
}

void RoutingTraceWriter::append(int32_t layer, int32_t n_tokens, const int32_t* ids, const float* weights) {
  if (!f_) fail(ErrorKind::internal, "routing trace {} already finished", path_);
  if (layer < 0 || layer >= h_.n_layer || n_tokens < 0)
    fail(ErrorKind::internal, "routing trace {}: record for layer {} ({} tokens) outside the header", path_,
         layer, n_tokens);
  // The format is little-endian; so are the machines Ferry targets (x86-64, aarch64 LE).
  static_assert(std::endian::native == std::endian::little, "routing traces assume a little-endian host");
  const size_t n = static_cast<size_t>(n_tokens) * static_cast<size_t>(h_.top_k);
  const int32_t rec[2] = {layer, n_tokens};
  bool ok = std::fwrite(rec, sizeof rec, 1, f_) == 1;
  ok = ok && (n == 0 || std::fwrite(ids, sizeof(int32_t), n, f_) == n);
  ok = ok && (n == 0 || std::fwrite(weights, sizeof(float), n, f_) == n);
  if (!ok) fail(ErrorKind::io, "writing routing trace {}: {}", tmp_path_, std::strerror(errno));
  ++records_;
}

void RoutingTraceWriter::finish() {
  if (!f_) return;
  const bool ok = std::fflush(f_) == 0;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  std::error_code ec;
  if (!ok || !closed) {
    std::filesystem::remove(tmp_path_, ec);
    fail(ErrorKind::io, "writing routing trace {}: {}", tmp_path_, std::strerror(errno));
  }
  std::filesystem::rename(tmp_path_, path_, ec);
  if (ec) {
    std::filesystem::remove(tmp_path_, ec);
    fail(ErrorKind::io, "cannot rename {} to {}: {}", tmp_path_, path_, ec.message());
  }
}

RoutingTrace read_routing_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::io, "cannot open routing trace {}: {}", path, std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(ErrorKind::io, "reading routing trace {}", path);
  if (bytes.size() < 24 || std::memcmp(bytes.data(), kMagic, 4) != 0)
    fail(ErrorKind::format, "{} is not a Ferry routing trace (magic FRRT expected)", path);
  if (get_u32(bytes.data() + 4) != kVersion)
    fail(ErrorKind::format, "routing trace {}: version {} (this build reads {})", path, get_u32(bytes.data() + 4),
         kVersion);
  RoutingTrace t;
  const auto as_i32 = [](uint32_t v) { return v > 0x7fffffffu ? -1 : static_cast<int32_t>(v); };
  t.header.n_layer = as_i32(get_u32(bytes.data() + 8));
  t.header.n_expert = as_i32(get_u32(bytes.data() + 12));
  t.header.top_k = as_i32(get_u32(bytes.data() + 16));
  check_header(t.header, path);
  const size_t k = static_cast<size_t>(t.header.top_k);
  t.ids.resize(static_cast<size_t>(t.header.n_layer));
  t.weights.resize(static_cast<size_t>(t.header.n_layer));
  size_t off = 24;
  while (off < bytes.size()) {
    if (bytes.size() - off < 8) fail(ErrorKind::format, "routing trace {}: truncated record at byte {}", path, off);
    const int32_t layer = as_i32(get_u32(bytes.data() + off));
    const uint32_t n_tokens = get_u32(bytes.data() + off + 4);
    if (layer < 0 || layer >= t.header.n_layer)
      fail(ErrorKind::format, "routing trace {}: record at byte {} has layer {} (n_layer {})", path, off, layer,
           t.header.n_layer);
    const size_t n = static_cast<size_t>(n_tokens) * k;
    // n ≤ 2^32 · 2^10, so 8·n cannot overflow size_t; compare against what is left.
    if ((bytes.size() - off - 8) / 8 < n)
      fail(ErrorKind::format, "routing trace {}: record at byte {} ({} tokens) runs past the end", path, off,
           n_tokens);
    const uint8_t* p = bytes.data() + off + 8;
    t.records.emplace_back(layer, static_cast<int32_t>(n_tokens));
    auto& ids = t.ids[static_cast<size_t>(layer)];
    auto& ws = t.weights[static_cast<size_t>(layer)];
    const size_t base = ids.size();
    ids.resize(base + n);
    ws.resize(base + n);
    std::memcpy(ids.data() + base, p, n * sizeof(int32_t));
    std::memcpy(ws.data() + base, p + n * sizeof(int32_t), n * sizeof(float));
    for (size_t r = 0; r < n_tokens; ++r) {
      const int32_t* row = ids.data() + base + r * k;
      for (size_t j = 0; j < k; ++j) {
        if (row[j] < 0 || row[j] >= t.header.n_expert)
          fail(ErrorKind::format, "routing trace {}: layer {} has expert id {} (n_expert {})", path, layer, row[j],
               t.header.n_expert);
        for (size_t i = 0; i < j; ++i)
          if (row[i] == row[j])
            fail(ErrorKind::format, "routing trace {}: layer {} repeats expert {} within one token", path, layer,
                 row[j]);
      }
    }
    off += 8 + n * 8;
  }
  return t;
}

}  // namespace ferry
