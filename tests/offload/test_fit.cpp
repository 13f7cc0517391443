// Zero-flag fitting (runtime/engine/fit.hpp) on model sizes given directly: the budget is free
// memory minus the margin, the model stays resident when it fits, offloads when only its fixed part
// fits, shrinks the default context (never a -c) when even that does not fit, and refuses with the
// sizes named when nothing fits.
#include <gtest/gtest.h>

#include <string>

#include "runtime/core/error.hpp"
#include "runtime/engine/fit.hpp"

namespace ferry {
namespace {

constexpr uint64_t MiB = 1ull << 20;

// 4 layers of 16 experts (top-2), 1 MiB each: 64 MiB of experts; 100 MiB dense; KV 16 KiB a token.
PlacementInput sizes_at(int64_t n_ctx) {
  PlacementInput p;
  p.model = "test.gguf";
  p.n_layer = 4;
  p.n_expert = 16;
  p.n_expert_used = 2;
  p.layer_expert_bytes.assign(4, MiB);
  p.dense_bytes = 100 * MiB;
  p.kv_bytes = static_cast<uint64_t>(n_ctx) * 16 * 1024;
  p.state_bytes = 3 * MiB;
  p.workspace_bytes = 5 * MiB;
  return p;
}

FitSettings margin(uint64_t mib) {
  FitSettings s;
  s.target_bytes = mib * MiB;
  return s;
}

// The load's order: the card's budget once, then the fit of the model's sizes into it.
DeviceFit fit(uint64_t free_bytes, const FitSettings& s, int64_t n_ctx, int64_t default_ctx) {
  return fit_to_device(sizes_at, fit_budget(free_bytes, s), s, n_ctx, default_ctx);
}

TEST(Fit, ResidentWhenEverythingFits) {
  // 100 + 64 (KV at 4096) + 3 + 5 + 64 experts = 236 MiB; 300 free − 50 margin = 250.
  const DeviceFit f = fit(300 * MiB, margin(50), 0, 4096);
  EXPECT_EQ(f.budget_bytes, 250 * MiB);
  EXPECT_EQ(f.need_bytes, 236 * MiB);
  EXPECT_FALSE(f.offload);
  EXPECT_EQ(f.n_ctx, 4096);
  EXPECT_NE(fit_summary(f, "card").find("every expert resident"), std::string::npos) << fit_summary(f, "card");
}

TEST(Fit, OffloadsWhenOnlyTheFixedPartFits) {
  // Budget 200 MiB: the fixed part 100 + 64 + 3 + 5 + 2 (two prefill staging slots) + 2 (top-2 of
  // 1 MiB) = 176 fits, 236 does not.
  const DeviceFit f = fit(250 * MiB, margin(50), 0, 4096);
  EXPECT_TRUE(f.offload);
  EXPECT_EQ(f.fixed_bytes, 176 * MiB);
  // It is the least budget the offload plan accepts: the engine's step buffers count too.
  PlacementInput with_steps = sizes_at(4096);
  with_steps.step_bytes = 7 * MiB;
  EXPECT_EQ(offload_min_budget_bytes(with_steps), 183 * MiB);
  EXPECT_EQ(f.n_ctx, 4096);
  const std::string s = fit_summary(f, "card");
  // 200 − (236 − 64) = 28 of the 64 MiB of experts fit: 44%.
  EXPECT_NE(s.find("offloading — about 44%"), std::string::npos) << s;
  EXPECT_NE(s.find("--vram 200M"), std::string::npos) << s;
}

TEST(Fit, ShrinksTheDefaultContextNeverTheUsers) {
  // Budget 130 MiB: at 4096 the fixed part is 176; at 1024 it is 100 + 16 + 3 + 5 + 2 + 2 = 128.
  const DeviceFit f = fit(180 * MiB, margin(50), 0, 4096);
  EXPECT_EQ(f.n_ctx, 1024);
  EXPECT_EQ(f.n_ctx_asked, 4096);
  EXPECT_TRUE(f.offload);
  EXPECT_NE(fit_summary(f, "card").find("shrunk from 4096"), std::string::npos);
  // The user's -c 4096 is kept: the fixed part does not fit, a clear error.
  try {
    fit(180 * MiB, margin(50), 4096, 4096);
    FAIL() << "expected a budget error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::budget);
    EXPECT_NE(std::string(e.what()).find("smaller -c"), std::string::npos) << e.what();
  }
  // --fit-ctx bounds the shrinking: not below 2048, where 100 + 32 + 3 + 5 + 4 = 144 > 130.
  FitSettings s = margin(50);
  s.min_ctx = 2048;
  try {
    fit(180 * MiB, s, 0, 4096);
    FAIL() << "expected a budget error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::budget);
    EXPECT_NE(std::string(e.what()).find("--fit-ctx 2048"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dense weights 100.00 MiB"), std::string::npos) << e.what();
  }
}

TEST(Fit, NoMemoryBeyondTheMarginIsAnError) {
  try {
    fit(40 * MiB, margin(50), 0, 4096);
    FAIL() << "expected a budget error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::budget);
    EXPECT_NE(std::string(e.what()).find("-fitt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
