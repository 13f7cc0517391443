// Programmatic dependent launch (`--cuda-pdl`, kernels/cuda/launch.cuh): the same logits, bit for
// bit, with the switch on and off — a prefill and decoded tokens of both tiny models, resident, and
// the qwen35moe one offloaded (copy streams and events between the kernels). On a GPU of sm_90+ this is the race check (each kernel may start while its
// predecessor runs and must wait for it at FERRY_PDL_WAIT); on the emulator, whose kernels run one
// after another, it checks the switch's plumbing (on while the Ops lives, off after). Added CI
// time: 6 loads of a few-MB model, 9 tokens each.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/cuda/launch_count.hpp"
#include "runtime/backend/device_size.hpp"
#include "runtime/engine/engine.hpp"
#include "tiny_model.hpp"

namespace ferry::gputest {
namespace {

// The logits after a 6-token prompt and after each of 3 decoded tokens, concatenated.
std::vector<float> logits_of(const std::string& path, bool pdl, uint64_t vram, bool* pdl_seen) {
  RunOptions ro;
  ro.device = DeviceKind::cuda;
  ro.backend.cuda.pdl = pdl;
  ro.vram_bytes = vram;
  std::vector<float> out;
  {
    auto m = LoadedModel::load(path, {}, ro);
    Session s(*m);
    std::vector<int32_t> prompt(6);
    std::iota(prompt.begin(), prompt.end(), 5);
    s.eval(prompt);
    auto keep = [&] { out.insert(out.end(), s.last_logits().begin(), s.last_logits().end()); };
    keep();
    for (int i = 0; i < 3; ++i) {
      const int32_t one[] = {static_cast<int32_t>(11 + 7 * i)};
      s.eval(one);
      keep();
    }
    *pdl_seen = cuda::pdl_enabled();
  }
  return out;
}

// offload_vram: a budget that offloads (test_launch_counts.cpp's, for the same seed); null: resident only.
void check_model(synth::Arch arch, const char* tag, const char* offload_vram) {
  const std::string path = tiny_model(arch, tag, 11);
  std::vector<uint64_t> budgets{0};
  if (offload_vram) budgets.push_back(parse_size(offload_vram));
  for (uint64_t vram : budgets) {
    bool on_seen = false, off_seen = true;
    const auto off = logits_of(path, false, vram, &off_seen);
    const auto on = logits_of(path, true, vram, &on_seen);
    const std::string what = std::string(tag) + (vram ? " offloaded" : " resident");
    EXPECT_FALSE(off_seen) << what << ": PDL on without the switch";
    // On a GPU below sm_90 the switch stays off (with a warning); the emulator reports it as asked.
    if (emulated()) {
      EXPECT_TRUE(on_seen) << what << ": the switch did not reach the launches";
    }
    EXPECT_FALSE(cuda::pdl_enabled()) << what << ": PDL still on after its Ops was destroyed";
    ASSERT_EQ(on.size(), off.size()) << what;
    report_exact("--cuda-pdl logits vs without", what + (on_seen ? " (pdl on)" : " (pdl unavailable)"),
                 std::memcmp(on.data(), off.data(), on.size() * sizeof(float)) == 0);
  }
}

TEST(GpuPdl, SameLogitsWithAndWithoutQwen35moe) {
  FERRY_REQUIRE_GPU();
  check_model(synth::Arch::qwen35moe, "pdl35", "132.5M");
}

TEST(GpuPdl, SameLogitsWithAndWithoutQwen3moe) {
  FERRY_REQUIRE_GPU();
  check_model(synth::Arch::qwen3moe, "pdl3", nullptr);
}

}  // namespace
}  // namespace ferry::gputest
