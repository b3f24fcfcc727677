// KernelErrors keeps the first failure among a sequence of asynchronous
// kernel launches and library calls (CUDA, cuBLAS), which cannot return a
// status to the layer code that issues them. The backend that owns the
// device clears it before a step and turns it into an absl::Status after.
// Not thread-safe: one per stream of work.
#ifndef PSCLUSTER_COMPUTE_KERNELS_KERNEL_ERRORS_H_
#define PSCLUSTER_COMPUTE_KERNELS_KERNEL_ERRORS_H_

#include <string>
#include <utility>

namespace pscluster {
namespace kernels {

class KernelErrors {
 public:
  bool ok() const { return first_.empty(); }
  // "<call>: <error text>" of the first recorded failure; empty while ok().
  const std::string& first() const { return first_; }
  // Keeps `message` unless a failure is already recorded.
  void Record(std::string message) {
    if (first_.empty()) first_ = std::move(message);
  }
  void Clear() { first_.clear(); }

 private:
  std::string first_;
};

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_COMPUTE_KERNELS_KERNEL_ERRORS_H_
