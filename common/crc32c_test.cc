#include "common/crc32c.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace crc32c {
namespace {

// Both implementations must give the same answers; every vector runs on both.
using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

class Crc32cTest : public ::testing::TestWithParam<ExtendFn> {
 protected:
  uint32_t Crc(const void* data, size_t n) { return GetParam()(0, data, n); }
};

TEST_P(Crc32cTest, CheckValue) { EXPECT_EQ(Crc("123456789", 9), 0xE3069283u); }

TEST_P(Crc32cTest, Rfc3720Vectors) {
  // RFC 3720, B.4 (iSCSI CRC examples).
  std::vector<uint8_t> buf(32, 0x00);
  EXPECT_EQ(Crc(buf.data(), buf.size()), 0x8A9136AAu);
  buf.assign(32, 0xFF);
  EXPECT_EQ(Crc(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc(buf.data(), buf.size()), 0x113FDB5Cu);
  // An iSCSI read command PDU.
  const uint8_t pdu[48] = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
      0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(Crc(pdu, sizeof(pdu)), 0xD9963A56u);
}

TEST_P(Crc32cTest, EmptyIsZeroAndExtendIsIdentity) {
  EXPECT_EQ(Crc("", 0), 0u);
  EXPECT_EQ(GetParam()(0x12345678u, "", 0), 0x12345678u);
}

TEST_P(Crc32cTest, ExtendEqualsValueOfConcatenation) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>(i * 37 + 11));
  const uint32_t whole = Crc(s.data(), s.size());
  // Every split point, including unaligned ones, so both the 8-byte loop and
  // the byte tail are exercised on each side.
  for (size_t split = 0; split <= 40; ++split) {
    uint32_t a = GetParam()(0, s.data(), split);
    EXPECT_EQ(GetParam()(a, s.data() + split, s.size() - split), whole)
        << "split at " << split;
  }
}

INSTANTIATE_TEST_SUITE_P(Implementations, Crc32cTest,
                         ::testing::Values(&Extend, &ExtendPortable),
                         [](const ::testing::TestParamInfo<ExtendFn>& info) {
                           return info.index == 0 ? "Dispatch" : "Portable";
                         });

TEST(Crc32c, HardwareAndPortableAgreeOnUnalignedBuffers) {
  std::vector<uint8_t> buf(4096 + 16);
  uint32_t x = 1;
  for (auto& b : buf)
    b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 16);
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63},
                     size_t{4096}}) {
      EXPECT_EQ(Extend(0, buf.data() + offset, n),
                ExtendPortable(0, buf.data() + offset, n))
          << "offset " << offset << " length " << n;
    }
  }
}

TEST(Crc32c, ValueOfStringView) {
  EXPECT_EQ(Value(std::string_view("123456789")), 0xE3069283u);
  EXPECT_NE(Value(std::string_view("a")), Value(std::string_view("foo")));
}

TEST(Crc32c, MaskRoundTripsAndChangesTheValue) {
  const uint32_t crc = Value(std::string_view("foo"));
  EXPECT_NE(crc, Mask(crc));
  EXPECT_NE(crc, Mask(Mask(crc)));
  EXPECT_EQ(crc, Unmask(Mask(crc)));
  EXPECT_EQ(crc, Unmask(Unmask(Mask(Mask(crc)))));
  // The formula TFRecord specifies, spelled out.
  EXPECT_EQ(Mask(0x12345678u),
            static_cast<uint32_t>(((0x12345678u >> 15) | (0x12345678u << 17)) +
                                  0xa282ead8u));
}

}  // namespace
}  // namespace crc32c
}  // namespace pscluster
