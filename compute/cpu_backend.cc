#include "compute/cpu_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compute/cpu_network.h"
#include "compute/kernels/cpu_blas.h"

namespace pscluster {
namespace {

class CpuBackend final : public ComputeBackend {
 public:
  explicit CpuBackend(std::unique_ptr<CpuNetwork> net) : net_(std::move(net)) {}

  absl::Status TrainStep(const float* params, const Batch& batch, const Batch&,
                         float* grads, float* loss, int* correct) override {
    const absl::Time start = absl::Now();
    absl::Status s = net_->TrainStep(params, batch.images, batch.targets,
                                     batch.size, grads, loss, correct, batch.key);
    if (s.ok()) {
      times_ = StepTimes();
      times_.compute_s = absl::ToDoubleSeconds(absl::Now() - start);
    }
    return s;
  }

  void SetGradientListener(std::function<void(int64_t)> listener) override {
    net_->set_gradient_listener(std::move(listener));
  }

  bool SetParamsWait(std::function<void(int64_t)> wait) override {
    net_->set_params_wait(std::move(wait));
    return true;
  }

  absl::Status Evaluate(const float* params, const Batch& batch,
                        double* loss_sum, int* correct, float* outputs) override {
    return net_->Evaluate(params, batch.images, batch.targets, batch.size,
                          loss_sum, correct, outputs);
  }

  StepTimes last_step_times() const override { return times_; }

  std::string name() const override {
    const int threads = net_->options().num_threads;
    return absl::StrCat("cpu (", threads, threads == 1 ? " thread" : " threads",
                        ", OpenBLAS ", kernels::BlasCoreName(), ")");
  }

 private:
  const std::unique_ptr<CpuNetwork> net_;
  StepTimes times_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCpuBackend(
    const ModelSpec& spec, int max_batch, int num_threads, uint64_t seed) {
  CpuNetworkOptions options;
  options.seed = seed;
  options.max_batch = max_batch;
  options.num_threads = num_threads;
  absl::StatusOr<std::unique_ptr<CpuNetwork>> net = CpuNetwork::Create(spec, options);
  if (!net.ok()) return net.status();
  return std::unique_ptr<ComputeBackend>(new CpuBackend(*std::move(net)));
}

}  // namespace pscluster
