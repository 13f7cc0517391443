#include "kernels/cpu/rows16.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstring>

#include "kernels/cpu/blocks.hpp"
#include "kernels/cpu/dot_kernels.hpp"
#include "kernels/cpu/row_check.hpp"
#include "runtime/core/error.hpp"

namespace ferry::cpu {
namespace {

constexpr size_t kQsBytes = kQK8_0 / 2;

// Bytes of the scale field at the start of each block (the nibbles follow it).
size_t scale_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return offsetof(BlockQ4_0, qs);
    case GgmlType::IQ4_NL: return offsetof(BlockIQ4NL, qs);
    case GgmlType::MXFP4: return offsetof(BlockMXFP4, qs);
    default: fail(ErrorKind::invalid_arg, "rows16: type {} has no interleaved layout", type_name(t));
  }
}

// Calls f.template operator()<SB>(file, scale, qs) for every block of every row, SB the type's
// scale bytes: the block's offset in the file layout, its scale field's offset in the interleaved
// one, and the offset of its nibble bytes 0..3 there (bytes 4j..4j+3 sit 64·j further).
template <size_t SB, typename F>
void each_block_sb(int64_t rows, int64_t nb, F&& f) {
  constexpr size_t block = SB + kQsBytes, chunk = kRows16 * block;
  const size_t row_b = static_cast<size_t>(nb) * block;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows / kRows16), [&](const auto& range) {
    for (int64_t g = range.begin(); g < range.end(); ++g) {
      const size_t g0 = static_cast<size_t>(g * kRows16) * row_b;
      for (int64_t i = 0; i < nb; ++i) {
        const size_t c = g0 + static_cast<size_t>(i) * chunk;
        for (size_t r = 0; r < kRows16; ++r)
          f.template operator()<SB>(g0 + r * row_b + static_cast<size_t>(i) * block, c + r * SB,
                                    c + kRows16 * SB + 4 * r);
      }
    }
  });
}

template <typename F>
void each_block(GgmlType t, int64_t rows, int64_t cols, const char* what, F&& f) {
  const int64_t nb = check_row(t, cols, what);
  if (rows < 0 || rows % kRows16 != 0)
    fail(ErrorKind::invalid_arg, "{}: {} rows is not a multiple of {}", what, rows, kRows16);
  if (scale_bytes(t) == 1) each_block_sb<1>(rows, nb, f);
  else each_block_sb<2>(rows, nb, f);
}

}  // namespace

bool rows16_type(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::IQ4_NL || t == GgmlType::MXFP4;
}

bool rows16_fast(GgmlType t, int64_t rows) {
  return rows16_type(t) && rows > 0 && rows % kRows16 == 0 &&
         detail::dot_rows16_fn(detail::dot_kernels(active_isa()), t) != nullptr;
}

void repack_rows16(GgmlType t, const void* src, int64_t rows, int64_t cols, void* dst) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  each_block(t, rows, cols, "repack_rows16", [&]<size_t SB>(size_t file, size_t scale, size_t qs) {
    std::memcpy(d + scale, s + file, SB);
    for (size_t j = 0; j < 4; ++j) std::memcpy(d + qs + 64 * j, s + file + SB + 4 * j, 4);
  });
}

void unpack_rows16(GgmlType t, const void* src, int64_t rows, int64_t cols, void* dst) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  each_block(t, rows, cols, "unpack_rows16", [&]<size_t SB>(size_t file, size_t scale, size_t qs) {
    std::memcpy(d + file, s + scale, SB);
    for (size_t j = 0; j < 4; ++j) std::memcpy(d + file + SB + 4 * j, s + qs + 64 * j, 4);
  });
}

}  // namespace ferry::cpu
