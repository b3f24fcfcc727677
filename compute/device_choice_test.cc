#include "compute/device_choice.h"

#include <string>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

using Kind = DeviceChoice::Kind;

TEST(ParseDeviceTest, AcceptsEveryForm) {
  struct Case {
    const char* text;
    Kind kind;
    int ordinal;
    const char* canonical;
  } cases[] = {{"auto", Kind::kAuto, 0, "auto"},
               {"cpu", Kind::kCpu, 0, "cpu"},
               {"cuda", Kind::kCuda, 0, "cuda:0"},
               {"cuda:0", Kind::kCuda, 0, "cuda:0"},
               {"cuda:3", Kind::kCuda, 3, "cuda:3"},
               {"cuda:07", Kind::kCuda, 7, "cuda:7"},
               {"cuda:255", Kind::kCuda, 255, "cuda:255"}};
  for (const Case& c : cases) {
    absl::StatusOr<DeviceChoice> d = ParseDevice(c.text);
    ASSERT_TRUE(d.ok()) << c.text << ": " << d.status();
    EXPECT_EQ(d->kind, c.kind) << c.text;
    EXPECT_EQ(d->ordinal, c.ordinal) << c.text;
    EXPECT_EQ(d->ToString(), c.canonical) << c.text;
    EXPECT_EQ(*ParseDevice(d->ToString()), *d) << c.text;
  }
}

TEST(ParseDeviceTest, RejectsOtherTextNamingIt) {
  for (const char* text :
       {"", "gpu", "CPU", "Cuda", " cpu", "cpu ", "cuda:", "cuda:-1", "cuda:+1",
        "cuda: 1", "cuda:1x", "cuda:0x1", "cuda:256", "cuda:99999", "cuda0",
        "cuda:1:2", "tpu:0"}) {
    absl::StatusOr<DeviceChoice> d = ParseDevice(text);
    ASSERT_FALSE(d.ok()) << "\"" << text << "\" was accepted";
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(d.status().message().find(std::string("\"") + text + "\""),
              std::string::npos)
        << d.status();
  }
  EXPECT_NE(
      ParseDevice("gpu").status().message().find("auto, cpu, cuda, cuda:N"),
      std::string::npos);
}

}  // namespace
}  // namespace pscluster
