#include "compute/kernels/reshaping.h"

#include <cstdint>
#include <cstring>

namespace pscluster {
namespace kernels {

void ZeroPad2DForward(const PaddingShape& s, const float* x, float* y) {
  const int oh = s.out_h(), ow = s.out_w(), c = s.channels;
  std::memset(y, 0, sizeof(float) * int64_t{s.batch} * oh * ow * c);
  for (int n = 0; n < s.batch; ++n) {
    for (int h = 0; h < s.in_h; ++h) {
      const float* from = x + (int64_t{n} * s.in_h + h) * s.in_w * c;
      float* to = y + ((int64_t{n} * oh + h + s.top) * ow + s.left) * c;
      std::memcpy(to, from, sizeof(float) * int64_t{s.in_w} * c);
    }
  }
}

void ZeroPad2DBackward(const PaddingShape& s, const float* dy, float* dx) {
  const int oh = s.out_h(), ow = s.out_w(), c = s.channels;
  for (int n = 0; n < s.batch; ++n) {
    for (int h = 0; h < s.in_h; ++h) {
      const float* from = dy + ((int64_t{n} * oh + h + s.top) * ow + s.left) * c;
      float* to = dx + (int64_t{n} * s.in_h + h) * s.in_w * c;
      std::memcpy(to, from, sizeof(float) * int64_t{s.in_w} * c);
    }
  }
}

}  // namespace kernels
}  // namespace pscluster
