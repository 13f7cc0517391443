#include "runtime/backend/ops.hpp"

#include "runtime/backend/gdn_ops.hpp"
#include "runtime/core/error.hpp"

namespace ferry {

std::unique_ptr<GdnOps> Ops::make_gdn_ops() {
  fail(ErrorKind::unsupported,
       "the '{}' backend has no Gated DeltaNet ops (qwen35moe/qwen3next run on the cpu and cuda "
       "backends)",
       name());
}

}  // namespace ferry
