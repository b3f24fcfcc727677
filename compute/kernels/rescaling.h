// Keras's Rescaling layer on the CPU; parallel_elementwise.h holds the
// device version, tested against this.
// Stateless functions; each call works on its own arguments.
#ifndef PSCLUSTER_COMPUTE_KERNELS_RESCALING_H_
#define PSCLUSTER_COMPUTE_KERNELS_RESCALING_H_

#include <cstdint>

namespace pscluster {
namespace kernels {

// Rescaling: y = x * scale + offset (x may equal y); dx = dy * scale.
void RescaleForward(int64_t n, float scale, float offset, const float* x, float* y);
void RescaleBackward(int64_t n, float scale, const float* dy, float* dx);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_RESCALING_H_
