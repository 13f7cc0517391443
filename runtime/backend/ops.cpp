#include "runtime/backend/ops.hpp"

#include "runtime/backend/gdn_ops.hpp"
#include "runtime/core/error.hpp"

namespace ferry {

bool kv_cache_type_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::IQ4_NL:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: return true;
    default: return false;
  }
}

const char* kv_cache_type_names() { return "f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1"; }

std::unique_ptr<GdnOps> Ops::make_gdn_ops() {
  fail(ErrorKind::unsupported,
       "the '{}' backend has no Gated DeltaNet ops (qwen35moe/qwen3next run on the cpu and cuda "
       "backends)",
       name());
}

}  // namespace ferry
