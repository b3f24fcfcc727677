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

}  // namespace
}  // namespace pscluster
