#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace pscluster {
namespace crc32c {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

// kTables[k][b]: the CRC of byte b followed by k zero bytes, which lets the
// loop below consume 8 bytes per iteration (slice-by-8).
struct Tables {
  uint32_t t[8][256];
};

constexpr Tables MakeTables() {
  Tables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ ((crc & 1u) ? kPolyReflected : 0u);
    }
    tables.t[0][b] = crc;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t prev = tables.t[k - 1][b];
      tables.t[k][b] = (prev >> 8) ^ tables.t[0][prev & 0xffu];
    }
  }
  return tables;
}

constexpr Tables kTables = MakeTables();

inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));  // x86-64 and every target we build: LE
  return v;
}

}  // namespace

uint32_t ExtendPortable(uint32_t init_crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = ~init_crc;
  while (n >= 8) {
    uint64_t word = LoadLE64(p) ^ crc;
    crc =
        kTables.t[7][word & 0xff] ^ kTables.t[6][(word >> 8) & 0xff] ^
        kTables.t[5][(word >> 16) & 0xff] ^ kTables.t[4][(word >> 24) & 0xff] ^
        kTables.t[3][(word >> 32) & 0xff] ^ kTables.t[2][(word >> 40) & 0xff] ^
        kTables.t[1][(word >> 48) & 0xff] ^ kTables.t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    crc = (crc >> 8) ^ kTables.t[0][(crc ^ *p) & 0xffu];
    ++p;
    --n;
  }
  return ~crc;
}

uint32_t Extend(uint32_t init_crc, const void* data, size_t n) {
#if defined(__SSE4_2__) && defined(__x86_64__)
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t crc = ~init_crc;
  while (n >= 8) {
    crc = _mm_crc32_u64(crc, LoadLE64(p));
    p += 8;
    n -= 8;
  }
  auto crc32 = static_cast<uint32_t>(crc);
  while (n > 0) {
    crc32 = _mm_crc32_u8(crc32, *p);
    ++p;
    --n;
  }
  return ~crc32;
#else
  return ExtendPortable(init_crc, data, n);
#endif
}

}  // namespace crc32c
}  // namespace pscluster
