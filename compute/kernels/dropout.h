// Inverted dropout (Keras): in training each element is kept with
// probability 1 - rate and scaled by 1 / (1 - rate), else zeroed; inference
// is the identity (never called). The mask is a pure function of a 64-bit
// key (the run's seed, the step and the layer, mixed by the caller) and the
// element's index in the whole batch, so it is the same on every backend,
// for any split of the batch across threads, and is recomputed by the
// backward pass instead of stored.
#ifndef PSCLUSTER_COMPUTE_KERNELS_DROPOUT_H_
#define PSCLUSTER_COMPUTE_KERNELS_DROPOUT_H_

#include <cstdint>

#include "compute/kernels/device.h"

#if defined(__CUDACC__)
#define PSCLUSTER_HOST_DEVICE __host__ __device__
#else
#define PSCLUSTER_HOST_DEVICE
#endif

namespace pscluster {
namespace kernels {

struct DropoutShape {
  int64_t first = 0;  // index in the whole batch of this slice's element 0
  int64_t n = 0;      // elements in this slice
  float rate = 0.0f;  // in [0, 1)
  uint64_t key = 0;
};

// Elements with a draw below this are dropped: rate * 2^32, rounded down.
inline uint32_t DropoutThreshold(float rate) {
  return static_cast<uint32_t>(static_cast<double>(rate) * 4294967296.0);
}

// Whether element `index` survives: the top 32 bits of splitmix64's
// finaliser over key + (index + 1) * golden ratio, compared with threshold.
PSCLUSTER_HOST_DEVICE inline bool DropoutKeeps(uint64_t key, int64_t index,
                                               uint32_t threshold) {
  uint64_t z = key + (static_cast<uint64_t>(index) + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<uint32_t>(z >> 32) >= threshold;
}

// y[i] = keeps(first + i) ? x[i] / (1 - rate) : 0. y may equal x.
template <typename Device>
struct DropoutForward;

template <>
struct DropoutForward<CpuDevice> {
  void operator()(const CpuDevice& d, const DropoutShape& s, const float* x,
                  float* y) const;
};

// dx[i] = keeps(first + i) ? dy[i] / (1 - rate) : 0. dx may equal dy.
template <typename Device>
struct DropoutBackward;

template <>
struct DropoutBackward<CpuDevice> {
  void operator()(const CpuDevice& d, const DropoutShape& s, const float* dy,
                  float* dx) const;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_DROPOUT_H_
