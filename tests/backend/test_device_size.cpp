#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/backend/device.hpp"
#include "runtime/core/error.hpp"

namespace ferry {
namespace {

TEST(DeviceSize, ParsesBinarySuffixes) {
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("64k"), 64u << 10);
  EXPECT_EQ(parse_size("512M"), 512ull << 20);
  EXPECT_EQ(parse_size("16G"), 16ull << 30);
  EXPECT_EQ(parse_size("16g"), 16ull << 30);
  EXPECT_EQ(parse_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_size("100MB"), 100ull << 20);
  EXPECT_EQ(parse_size("1T"), 1ull << 40);
  EXPECT_EQ(parse_size(" 8G "), 8ull << 30);
  EXPECT_EQ(parse_size("7B"), 7u);
  EXPECT_EQ(parse_size("0"), 0u);
}

TEST(DeviceSize, ParsesFractions) {
  EXPECT_EQ(parse_size("1.5G"), 3ull << 29);
  EXPECT_EQ(parse_size("0.5M"), 512ull << 10);
  EXPECT_EQ(parse_size("2.25K"), 2304u);
}

TEST(DeviceSize, RejectsJunk) {
  for (const char* s : {"", " ", "G", "abc", "-1G", "16X", "16GG", "1.2.3G", "16 Gigs", "1.5", "0x10",
                        "99999999999999999999", "20000000000G", "16Gi"}) {
    try {
      parse_size(s);
      ADD_FAILURE() << "accepted '" << s << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_arg) << s;
      EXPECT_NE(std::string(e.what()).find("invalid size"), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceSize, Formats) {
  EXPECT_EQ(format_size(17), "17 B");
  EXPECT_EQ(format_size(1536), "1.50 KiB");
  EXPECT_EQ(format_size(3ull << 29), "1.50 GiB");
  EXPECT_EQ(format_size(512ull << 20), "512.00 MiB");
}

TEST(DeviceKindTest, ParsesNames) {
  EXPECT_EQ(parse_device_kind("cuda"), DeviceKind::cuda);
  EXPECT_EQ(parse_device_kind("cpu"), DeviceKind::cpu);
  EXPECT_EQ(parse_device_kind("sim"), DeviceKind::sim);
  EXPECT_EQ(parse_device_kind("auto"), default_device_kind());
  EXPECT_THROW(parse_device_kind("gpu0"), Error);
  // Without a GPU (CI) auto means cpu; with one, cuda.
#if defined(FERRY_CUDA_EMU)
  // The emulator answers auto with cuda only when the run names its card's memory.
  const bool card = std::getenv("FERRY_CUDA_EMU_MEMORY") != nullptr;
  EXPECT_EQ(default_device_kind(), card && cuda_available() ? DeviceKind::cuda : DeviceKind::cpu);
#else
  EXPECT_EQ(default_device_kind(), cuda_available() ? DeviceKind::cuda : DeviceKind::cpu);
#endif
}

TEST(DeviceKindTest, CpuHasNoDevice) {
  try {
    make_device(DeviceKind::cpu);
    ADD_FAILURE() << "cpu device created";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_arg);
  }
}

}  // namespace
}  // namespace ferry
