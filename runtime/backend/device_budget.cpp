#include "runtime/backend/device_budget.hpp"

#include "runtime/backend/device_size.hpp"
#include "runtime/core/error.hpp"

namespace ferry {

BudgetTracker::BudgetTracker(std::string device_name, uint64_t budget_bytes)
    : name_(std::move(device_name)), budget_(budget_bytes) {}

void BudgetTracker::charge(uint64_t bytes, std::string_view tag) {
  std::lock_guard lock(mu_);
  if (bytes > budget_ || used_ > budget_ - bytes)
    fail(ErrorKind::budget,
         "{}: allocating {} for '{}' would exceed the memory budget: {} in use of {} (peak {}); "
         "a larger --vram, or a smaller -c or KV type (-ctk/-ctv), lowers what is missing",
         name_, format_size(bytes), tag, format_size(used_), format_size(budget_), format_size(peak_));
  used_ += bytes;
  ++n_allocs_;
  if (used_ > peak_) peak_ = used_;
}

void BudgetTracker::release(uint64_t bytes) noexcept {
  std::lock_guard lock(mu_);
  used_ = bytes > used_ ? 0 : used_ - bytes;
  if (n_allocs_ > 0) --n_allocs_;
}

MemoryStats BudgetTracker::stats() const {
  std::lock_guard lock(mu_);
  return {used_, peak_, budget_, n_allocs_};
}

void BudgetTracker::reset_peak() {
  std::lock_guard lock(mu_);
  peak_ = used_;
}

}  // namespace ferry
