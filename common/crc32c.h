// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the
// checksum of TFRecord framing and of our checkpoints, and the masking that
// TFRecord (and leveldb) apply to a CRC stored next to the data it covers.
// Pure functions: safe to call from any thread.
#ifndef PSCLUSTER_COMMON_CRC32C_H_
#define PSCLUSTER_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pscluster {
namespace crc32c {

// Returns the CRC-32C of concat(A, data[0, n)) where `init_crc` is the
// CRC-32C of some string A: Extend(Extend(0, a), b) == Value(a + b).
// Uses the SSE4.2 crc32 instruction when the build targets it, else a
// slice-by-8 table; both give the same result.
uint32_t Extend(uint32_t init_crc, const void* data, size_t n);

// CRC-32C of data[0, n). Value("123456789", 9) == 0xE3069283.
inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::string_view s) {
  return Extend(0, s.data(), s.size());
}

// The portable table-driven implementation, exposed so that tests can check
// it against the hardware path. Same contract as Extend.
uint32_t ExtendPortable(uint32_t init_crc, const void* data, size_t n);

// A CRC computed over data that itself contains CRCs is weak, so stored CRCs
// are masked (TFRecord, leveldb): rotate right by 15 bits, add a constant.
inline constexpr uint32_t kMaskDelta = 0xa282ead8u;
inline uint32_t Mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}
// Inverse of Mask: Unmask(Mask(c)) == c.
inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace crc32c
}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_CRC32C_H_
