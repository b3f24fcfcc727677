#include "model/gradient_watermark.h"

#include <thread>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(GradientWatermarkTest, SuffixesBecomeFinalAsBackpropLowersTheMark) {
  GradientWatermark w;
  w.Reset(100);
  const absl::Time soon = absl::Now() + absl::Milliseconds(20);
  EXPECT_TRUE(absl::IsDeadlineExceeded(w.WaitFinalFrom(99, soon)));
  w.MarkFinalFrom(60);
  EXPECT_TRUE(w.WaitFinalFrom(60, absl::InfinitePast()).ok());
  EXPECT_TRUE(w.WaitFinalFrom(99, absl::InfinitePast()).ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(w.WaitFinalFrom(59, absl::InfinitePast())));
  EXPECT_TRUE(w.FinalFrom(60));
  EXPECT_FALSE(w.FinalFrom(59));
  w.MarkFinalFrom(80);  // would raise it: ignored
  EXPECT_TRUE(w.WaitFinalFrom(60, absl::InfinitePast()).ok());
  w.MarkAllFinal();
  EXPECT_TRUE(w.WaitFinalFrom(0, absl::InfinitePast()).ok());
  w.Reset(100);  // the next step
  EXPECT_TRUE(absl::IsDeadlineExceeded(w.WaitFinalFrom(0, absl::InfinitePast())));
}

TEST(GradientWatermarkTest, AWaiterWakesWhenItsSuffixIsFinal) {
  GradientWatermark w;
  w.Reset(10);
  absl::Status got = absl::UnknownError("not run");
  std::thread waiter([&] { got = w.WaitFinalFrom(3, absl::InfiniteFuture()); });
  w.MarkFinalFrom(5);
  w.MarkFinalFrom(3);
  waiter.join();
  EXPECT_TRUE(got.ok()) << got;
}

TEST(GradientWatermarkTest, FailWakesWaitersWithTheReason) {
  GradientWatermark w;
  w.Reset(10);
  absl::Status got;
  std::thread waiter([&] { got = w.WaitFinalFrom(0, absl::InfiniteFuture()); });
  w.Fail("backend failed");
  waiter.join();
  EXPECT_TRUE(absl::IsAborted(got));
  EXPECT_NE(got.message().find("backend failed"), std::string::npos);
}

}  // namespace
}  // namespace pscluster
