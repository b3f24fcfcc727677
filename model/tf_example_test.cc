#include "model/tf_example.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// Bytes encoded by protoc from tests/fixtures/tfrecord/example.txt.
std::string Fixture(const std::string& name) {
  std::ifstream in("tests/fixtures/tfrecord/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void ExpectFixtureContents(const TFExample& e) {
  ASSERT_EQ(e.size(), 5u);
  const TFFeature& image = e.at("image");
  ASSERT_EQ(image.kind, TFFeature::Kind::kBytes);
  ASSERT_EQ(image.bytes.size(), 1u);
  EXPECT_EQ(image.bytes[0], std::string("\x00\x01\x7f\x80\xff\x0a", 6));
  ASSERT_EQ(e.at("label").kind, TFFeature::Kind::kInt64);
  EXPECT_EQ(e.at("label").ints, std::vector<int64_t>({7}));
  ASSERT_EQ(e.at("floats").kind, TFFeature::Kind::kFloat);
  EXPECT_EQ(e.at("floats").floats, std::vector<float>({1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(e.at("ints").ints,
            std::vector<int64_t>({-3, 0, 300, int64_t{9223372036854775807}}));
  EXPECT_EQ(e.at("empty").kind, TFFeature::Kind::kNone);
}

TEST(TFExample, PackedListsFromProtoc) {
  const std::string bytes = Fixture("packed.pb");
  ASSERT_GT(bytes.size(), 100u);
  absl::StatusOr<TFExample> e = ParseTFExample(bytes);
  ASSERT_TRUE(e.ok()) << e.status();
  ExpectFixtureContents(*e);
}

TEST(TFExample, UnpackedListsFromProtoc) {
  const std::string bytes = Fixture("unpacked.pb");
  ASSERT_GT(bytes.size(), 100u);
  ASSERT_NE(bytes, Fixture("packed.pb"));  // really another encoding
  absl::StatusOr<TFExample> e = ParseTFExample(bytes);
  ASSERT_TRUE(e.ok()) << e.status();
  ExpectFixtureContents(*e);
}

TEST(TFExample, EmptyMessageHasNoFeatures) {
  absl::StatusOr<TFExample> e = ParseTFExample("");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->empty());
}

TEST(TFExample, UnknownFieldsAreSkipped) {
  // field 5 varint 1, then field 1 (Features) empty.
  absl::StatusOr<TFExample> e = ParseTFExample(std::string("\x28\x01\x0a\x00", 4));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->empty());
}

TEST(TFExample, EveryTruncationIsAnError) {
  const std::string bytes = Fixture("packed.pb");
  for (size_t n = 1; n < bytes.size(); ++n) {
    absl::StatusOr<TFExample> e = ParseTFExample(bytes.substr(0, n));
    EXPECT_FALSE(e.ok()) << "cut to " << n << " bytes";
    if (!e.ok()) {
      EXPECT_NE(e.status().message().find("not a tf.train.Example"), std::string::npos);
    }
  }
}

TEST(TFExample, GarbageIsAnError) {
  EXPECT_FALSE(ParseTFExample("hello, world").ok());
  EXPECT_FALSE(ParseTFExample(std::string("\x0a\x05\x0a\x03\x0a\x01", 6)).ok());
  // Features as a varint, not a message.
  EXPECT_FALSE(ParseTFExample(std::string("\x08\x01", 2)).ok());
  // A packed float run whose length is not a multiple of 4.
  const std::string bad_floats("\x0a\x0e\x0a\x0c\x0a\x01x\x12\x07\x12\x05\x0a\x03\x00\x00\x00", 16);
  EXPECT_FALSE(ParseTFExample(bad_floats).ok());
}

}  // namespace
}  // namespace pscluster
