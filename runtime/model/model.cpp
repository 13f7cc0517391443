#include "runtime/model/model.hpp"

#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"
#include "runtime/model/qwen35moe.hpp"
#include "runtime/model/qwen3moe.hpp"

namespace ferry {

bool ModelState::truncate(int64_t n) {
  if (n < 0 || n > n_past_)
    fail(ErrorKind::invalid_arg, "truncate to {} positions: the state holds {}", n, n_past_);
  n_past_ = n;
  return true;
}

std::unique_ptr<Model> load_model(const gguf::File& f, Ops& ops, const MoeExecutorFactory& moe,
                                  const LoadProgress& progress) {
  ModelConfig cfg = read_config(f);
  switch (cfg.arch) {
    case Arch::qwen3moe: return make_qwen3moe(f, std::move(cfg), ops, moe, progress);
    case Arch::qwen35moe: return make_qwen35moe(f, std::move(cfg), ops, moe, progress);
    case Arch::qwen3next: return make_qwen3next(f, std::move(cfg), ops, moe, progress);
    default: break;
  }
  fail(ErrorKind::unsupported, "architecture '{}' in {} is not supported (supported: {})",
       arch_name(cfg.arch), f.path(), supported_architectures());
}

}  // namespace ferry
