// Device tags for the layer kernels. Every kernel is a functor templated on
// the device (TensorFlow's training_ops.h style): `Kernel<CpuDevice>` is
// always built and is the oracle; a CUDA build adds `Kernel<GpuDevice>`
// specialisations in .cu files with the same raw-pointer signatures, where
// the pointers are device memory.
#ifndef PSCLUSTER_COMPUTE_KERNELS_DEVICE_H_
#define PSCLUSTER_COMPUTE_KERNELS_DEVICE_H_

namespace pscluster {
namespace kernels {

// Runs a kernel synchronously on the calling thread. Stateless: parallelism
// is the caller's business (compute/cpu_network.h splits the batch).
struct CpuDevice {};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_DEVICE_H_
