#include "runtime/synth/encode.hpp"

#include <array>
#include <cctype>
#include <cstring>

#include "runtime/core/error.hpp"
#include "runtime/core/fp16.hpp"
#include "runtime/synth/init.hpp"
#include "runtime/synth/quantize_extra.hpp"
#include "runtime/synth/quantize_fast.hpp"
#include "runtime/synth/random_blocks.hpp"

namespace ferry::synth {
namespace {

constexpr std::array kWritable = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,   GgmlType::Q4_1,   GgmlType::Q5_0,
    GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::MXFP4, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
};

// Stream of a random-block tensor's rows: its own, apart from the generated values' stream.
uint64_t random_block_seed(uint64_t seed, const std::string& name) {
  return hash_combine(tensor_seed(seed, name), 0xB10C5EEDull);
}

}  // namespace

std::optional<Encoding> encoding_of(GgmlType t) {
  bool writable = false;
  for (GgmlType w : kWritable) writable |= w == t;
  if (!writable) return std::nullopt;
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) return Encoding::convert;
  return is_random_block_type(t) ? Encoding::random_blocks : Encoding::quantize;
}

std::string writable_type_names() {
  std::string s;
  for (GgmlType t : kWritable) {
    if (!s.empty()) s += ", ";
    for (char c : type_name(t)) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return s;
}

void encode_rows(const ModelPlan& plan, const TensorPlan& t, uint64_t row_begin, uint64_t n_rows,
                 const float* f32, uint8_t* dst) {
  const uint64_t row_len = t.row_len();
  const uint64_t n = n_rows * row_len;
  const auto rows = static_cast<int64_t>(n_rows), len = static_cast<int64_t>(row_len);
  switch (t.type) {
    case GgmlType::F32:
      std::memcpy(dst, f32, n * sizeof(float));
      return;
    case GgmlType::F16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_fp16(f32[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_bf16(f32[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      quantize_rows(t.type, f32, dst, rows, len);
      return;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::MXFP4:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      quantize_extra_rows(t.type, f32, dst, rows, len);
      return;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
      random_block_rows(t.type, random_block_seed(plan.options.seed, t.name), row_begin, n_rows, row_len,
                        t.scale, dst);
      return;
    default:
      fail(ErrorKind::unsupported, "tensor {}: ferry synth cannot write {} (it writes {})", t.name,
           type_name(t.type), writable_type_names());
  }
}

}  // namespace ferry::synth
