#pragma once
// Budget accounting shared by the device implementations: a hard limit, the bytes in use, the
// peak. Thread-safe. Exceeding the limit throws ErrorKind::budget; nothing is charged then.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace ferry {

struct MemoryStats {
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t budget_bytes = 0;  // UINT64_MAX = unlimited
  uint64_t n_allocs = 0;      // live allocations
};

class BudgetTracker {
 public:
  BudgetTracker(std::string device_name, uint64_t budget_bytes);
  // Charges `bytes` for `tag` or throws ErrorKind::budget ("<device>: allocating <n> for '<tag>'
  // would exceed the budget: <used> in use of <budget> (peak <peak>)").
  void charge(uint64_t bytes, std::string_view tag);
  void release(uint64_t bytes) noexcept;
  MemoryStats stats() const;
  void reset_peak();
  uint64_t budget() const { return budget_; }

 private:
  std::string name_;
  uint64_t budget_;
  mutable std::mutex mu_;
  uint64_t used_ = 0, peak_ = 0, n_allocs_ = 0;
};

}  // namespace ferry
