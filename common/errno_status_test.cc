#include "common/errno_status.h"

#include <cerrno>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(ErrnoStatusTest, MapsCodesAndNamesTheAction) {
  absl::Status s = ErrnoStatus(ENOSPC, "cannot write /x/y");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "cannot write /x/y: No space left on device");
  EXPECT_EQ(ErrnoStatus(ENOENT, "a").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(EEXIST, "a").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoStatus(EACCES, "a").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(EROFS, "a").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(EISDIR, "a").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoStatus(EIO, "a").code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace pscluster
