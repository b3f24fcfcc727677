#include "common/bad_input.h"

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(BadInputTest, MarksKeepTheCodeAndMessage) {
  const absl::Status plain = absl::InvalidArgumentError("layer emb: Embedding");
  EXPECT_FALSE(IsBadInput(plain));
  const absl::Status marked = MarkBadInput(plain);
  EXPECT_TRUE(IsBadInput(marked));
  EXPECT_EQ(marked.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(marked.message(), "layer emb: Embedding");
  EXPECT_FALSE(IsBadInput(absl::InternalError("x")));
  EXPECT_FALSE(IsBadInput(absl::OkStatus()));
}

TEST(BadInputTest, ExitCodes) {
  EXPECT_EQ(ExitCodeOfFailure(MarkBadInput(absl::InvalidArgumentError("x"))), kExitBadInput);
  EXPECT_EQ(ExitCodeOfFailure(absl::DataLossError("x")), kExitBadData);
  EXPECT_EQ(ExitCodeOfFailure(MarkBadInput(absl::DataLossError("x"))), kExitBadInput);
  EXPECT_EQ(ExitCodeOfFailure(absl::InvalidArgumentError("x")), kExitError);
  EXPECT_EQ(ExitCodeOfFailure(absl::UnavailableError("x")), kExitError);
}

}  // namespace
}  // namespace pscluster
