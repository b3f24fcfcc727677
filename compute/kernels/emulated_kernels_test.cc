// The GPU backend's layer algorithms, run on the host (EmulatedGpuDevice),
// against the CPU kernels: checks the GPU code path's indexing, GEMM
// transpositions and workspace layouts on machines without a GPU.
// gpu_kernels_test.cc runs the same suite on a real GPU.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compute/kernels/emulated_device.h"
#include "compute/kernels/testing/graph_kernels_conformance.h"
#include "compute/kernels/testing/kernel_conformance.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

// kernel_conformance.h's harness on host memory.
class EmulatedHarness {
 public:
  using Device = EmulatedGpuDevice;
  static std::string SkipReason() { return ""; }

  EmulatedHarness() { device_.errors = &errors_; }
  const Device& device() const { return device_; }

  template <typename T>
  T* Upload(const std::vector<T>& host) {
    T* p = Allocate<T>(host.size());
    if (!host.empty()) std::memcpy(p, host.data(), host.size() * sizeof(T));
    return p;
  }
  template <typename T>
  T* Poisoned(int64_t n) {
    T* p = Allocate<T>(n);
    std::memset(p, 0xFF, n * sizeof(T));
    return p;
  }
  template <typename T>
  std::vector<T> Download(const T* p, int64_t n) {
    return std::vector<T>(p, p + n);
  }
  std::string Errors() { return errors_.first(); }

 private:
  template <typename T>
  T* Allocate(int64_t n) {
    // In doubles: aligned for every element type the kernels use.
    const int64_t words = (n * static_cast<int64_t>(sizeof(T)) + 7) / 8 + 1;
    blocks_.push_back(std::make_unique<double[]>(words));
    return reinterpret_cast<T*>(blocks_.back().get());
  }

  KernelErrors errors_;
  Device device_;
  std::vector<std::unique_ptr<double[]>> blocks_;
};

}  // namespace

// graph_kernels_conformance.h's suite reaches the kernels through GraphKernels.
std::unique_ptr<GraphKernels> MakeGraphKernelsFor(const EmulatedGpuDevice& d) {
  return MakeEmulatedGraphKernels(d);
}

namespace conformance {
INSTANTIATE_TYPED_TEST_SUITE_P(Emulated, KernelConformanceTest,
                               ::testing::Types<EmulatedHarness>);
INSTANTIATE_TYPED_TEST_SUITE_P(Emulated, GraphKernelsConformanceTest,
                               ::testing::Types<EmulatedHarness>);
}  // namespace conformance

namespace {

// The emulator itself must reject what cuBLAS rejects, or the suite above
// would pass GEMM arguments a real GPU refuses.
TEST(EmulatedDeviceTest, GemmWithTooSmallLeadingDimensionIsRecorded) {
  KernelErrors errors;
  EmulatedGpuDevice d{&errors};
  std::vector<float> x(6, 1.0f), w(6, 1.0f), b(3, 0.0f), y(4, 0.0f);
  // DenseShape{2, 3, 2} is fine; in = 0 would give lda 0 < 1.
  DenseForward<EmulatedGpuDevice>()(d, DenseShape{2, 3, 2}, x.data(), w.data(),
                                    b.data(), false, y.data());
  EXPECT_TRUE(errors.ok()) << errors.first();
  EXPECT_EQ(y, std::vector<float>(4, 3.0f));
  DenseForward<EmulatedGpuDevice>()(d, DenseShape{2, 0, 2}, x.data(), w.data(),
                                    b.data(), false, y.data());
  EXPECT_NE(errors.first().find("invalid value"), std::string::npos)
      << errors.first();
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
