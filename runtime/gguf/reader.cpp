// File: mmap lifetime and the top-level parse (header → metadata → tensor table → data section).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/gguf/parse.hpp"

namespace ferry::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;
// Smallest encodings, used to bound counts by the bytes left before allocating:
// a KV is key length (8) + type (4) + at least a one-byte value; a tensor info is name length
// (8) + n_dims (4) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

std::string magic_string(uint32_t m) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const unsigned char c = static_cast<unsigned char>(m >> (8 * i));
    s += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c))
                                 : fmt::format("\\x{:02x}", c);
  }
  return s;
}

}  // namespace

File File::open(const std::string& path) {
  File f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) fail(ErrorKind::io, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0)
    fail(ErrorKind::io, "cannot stat {}: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(ErrorKind::io, "{} is not a regular file", path);
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ < kHeaderBytes)
    fail(ErrorKind::format, "{}: truncated: {} bytes is too small for a GGUF header ({} bytes)",
         path, f.size_, kHeaderBytes);
  void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, f.fd_, 0);
  if (p == MAP_FAILED) fail(ErrorKind::io, "cannot mmap {}: {}", path, std::strerror(errno));
  f.base_ = static_cast<const uint8_t*>(p);
  f.parse();
  return f;
}

void File::prefault() const {
  if (!base_ || size_ == 0) return;
  void* p = const_cast<uint8_t*>(base_);
#ifdef MADV_POPULATE_READ
  if (::madvise(p, size_, MADV_POPULATE_READ) == 0) return;
#endif
  (void)::madvise(p, size_, MADV_WILLNEED);
}

void File::release(const void* p, size_t bytes) const {
  const auto* b = static_cast<const uint8_t*>(p);
  if (!base_ || b < base_ || b + bytes > base_ + size_) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(b) + bytes) / page * page;
  // A private read-only mapping of the file: dropped pages fault in from the file again.
  if (hi > lo) (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

File::File(File&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      version_(o.version_),
      alignment_(o.alignment_),
      data_offset_(o.data_offset_),
      kv_(std::move(o.kv_)),
      kv_index_(std::move(o.kv_index_)),
      tensors_(std::move(o.tensors_)),
      tensor_index_(std::move(o.tensor_index_)) {}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    File tmp(std::move(o));
    std::swap(path_, tmp.path_);
    std::swap(fd_, tmp.fd_);
    std::swap(base_, tmp.base_);
    std::swap(size_, tmp.size_);
    std::swap(version_, tmp.version_);
    std::swap(alignment_, tmp.alignment_);
    std::swap(data_offset_, tmp.data_offset_);
    std::swap(kv_, tmp.kv_);
    std::swap(kv_index_, tmp.kv_index_);
    std::swap(tensors_, tmp.tensors_);
    std::swap(tensor_index_, tmp.tensor_index_);
  }
  return *this;
}

File::~File() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void File::parse() {
  detail::Cursor c(base_, size_, path_);

  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic)
    fail(ErrorKind::format, "{}: not a GGUF file (magic '{}', expected 'GGUF')", path_,
         magic_string(magic));
  version_ = c.read<uint32_t>("version");
  if (version_ == 1)
    fail(ErrorKind::unsupported, "{}: GGUF version 1 is not supported (Ferry reads v2 and v3)",
         path_);
  if (version_ != 0 && (version_ & 0xFFFF) == 0)
    fail(ErrorKind::unsupported,
         "{}: GGUF version {:#x} looks byte-swapped: big-endian GGUF files are not supported",
         path_, version_);
  // v2 and v3 share one layout (v3 only added big-endian files, rejected above).
  if (version_ != 2 && version_ != 3)
    fail(ErrorKind::unsupported, "{}: unsupported GGUF version {} (Ferry reads v2 and v3)", path_,
         version_);

  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  if (n_kv > c.remaining() / kMinKvBytes)
    fail(ErrorKind::format,
         "{}: header claims {} metadata entries, impossible in the {} bytes left", path_, n_kv,
         c.remaining());
  if (n_tensors > c.remaining() / kMinTensorInfoBytes)
    fail(ErrorKind::format, "{}: header claims {} tensors, impossible in the {} bytes left", path_,
         n_tensors, c.remaining());

  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    std::string key = c.read_string(fmt::format("key of metadata entry #{}", i));
    const uint32_t type = c.read<uint32_t>(fmt::format("value type of key '{}'", key));
    Value v = detail::read_value(c, type, key);
    if (!kv_index_.emplace(key, kv_.size()).second)
      fail(ErrorKind::format, "{}: duplicate key '{}' (metadata entry #{} at offset {})", path_,
           key, i, at);
    kv_.emplace_back(std::move(key), std::move(v));
  }

  alignment_ = kDefaultAlignment;
  if (const Value* a = find("general.alignment")) {
    if (a->type != ValueType::u32)
      fail(ErrorKind::format, "{}: key general.alignment has type {}, expected u32", path_,
           value_type_string(*a));
    const uint64_t al = std::get<uint64_t>(a->v);
    if (al == 0 || (al & (al - 1)) != 0)
      fail(ErrorKind::format, "{}: general.alignment {} is not a power of two", path_, al);
    alignment_ = static_cast<uint32_t>(al);
  }

  if (n_tensors > c.remaining() / kMinTensorInfoBytes)
    fail(ErrorKind::format, "{}: header claims {} tensors, impossible in the {} bytes left", path_,
         n_tensors, c.remaining());
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t = detail::read_tensor_info(c, i);
    if (!tensor_index_.emplace(t.name, tensors_.size()).second)
      fail(ErrorKind::format, "{}: duplicate tensor name '{}' (tensor #{})", path_, t.name, i);
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment; c.pos() <= size_ < 2^63 and
  // alignment <= 2^31, so this cannot overflow.
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  detail::place_tensors(tensors_, data_offset_, alignment_, size_, path_);
}

}  // namespace ferry::gguf
