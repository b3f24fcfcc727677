#include "compute/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/dataset.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "compute/fused_device_engine.h"
#include "compute/fused_plan.h"
#include "compute/graph_device_engine.h"
#include "compute/kernels/cublas_loader.h"
#include "compute/kernels/gpu_device.h"
#include "compute/kernels/gpu_kernels.h"
#include "compute/kernels/kernel_errors.h"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

using kernels::GpuDevice;

// Owners of CUDA resources. Destruction ignores errors: there is nobody
// left to tell, and a failed device reports the cause elsewhere.
struct FreeDevice {
  void operator()(void* p) const { cudaFree(p); }
};
struct FreePinned {
  void operator()(void* p) const { cudaFreeHost(p); }
};
struct DestroyStream {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct DestroyEvent {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
struct DestroyBlas {
  void operator()(cublasHandle_t h) const { cublasDestroy(h); }
};
using DeviceMemory = std::unique_ptr<void, FreeDevice>;
using PinnedMemory = std::unique_ptr<void, FreePinned>;
using Stream =
    std::unique_ptr<std::remove_pointer_t<cudaStream_t>, DestroyStream>;
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, DestroyEvent>;
using BlasHandle =
    std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, DestroyBlas>;

std::string Bytes(int64_t n) {
  if (n >= (int64_t{1} << 30))
    return absl::StrFormat("%.1f GiB", n / 1073741824.0);
  if (n >= (int64_t{1} << 20))
    return absl::StrFormat("%.1f MiB", n / 1048576.0);
  return absl::StrFormat("%.1f KiB", n / 1024.0);
}

// Seconds between two completed events on one stream; 0 if unmeasurable.
double Seconds(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  return cudaEventElapsedTime(&ms, from, to) == cudaSuccess ? ms / 1e3 : 0.0;
}

// The device-side results of a step: written by FusedDeviceEngine::Run or
// GraphDeviceEngine::Run (penalty: only for a model with regularizers).
struct StepResult {
  double loss_sum;
  int correct;
  float penalty;
};

class CudaBackend final : public ComputeBackend {
 public:
  // Exactly one of `fused` (the fused engine's layers,
  // compute/fused_device_engine.h) and `graph` (any other model,
  // compute/graph_device_engine.h) is set.
  CudaBackend(const ModelSpec& spec,
              std::unique_ptr<FusedDeviceEngine<GpuDevice>> fused,
              std::unique_ptr<GraphDeviceEngine> graph, int max_batch,
              int ordinal)
      : spec_(spec),
        max_batch_(max_batch),
        ordinal_(ordinal),
        pixels_(int64_t{spec.input_height} * spec.input_width *
                spec.input_channels),
        fused_(std::move(fused)),
        graph_(std::move(graph)) {}

  ~CudaBackend() override {
    // Resources belong to the device; finish queued work before freeing.
    cudaSetDevice(ordinal_);
    if (compute_ != nullptr) cudaStreamSynchronize(compute_.get());
    if (copy_ != nullptr) cudaStreamSynchronize(copy_.get());
    for (const PinnedRange& r : pinned_ranges_) cudaHostUnregister(r.begin);
  }

  void PinHostMemory(void* p, size_t bytes) override {
    if (p == nullptr || bytes == 0) return;
    cudaSetDevice(ordinal_);
    const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (e != cudaSuccess) {
      cudaGetLastError();
      spdlog::warn("cuda:{}: cannot page-lock {} of host buffers ({}): "
                   "batches are staged through pinned copies",
                   ordinal_, Bytes(static_cast<int64_t>(bytes)),
                   kernels::CudaErrorMessage("cudaHostRegister", e));
      return;
    }
    pinned_ranges_.push_back(
        PinnedRange{static_cast<char*>(p), static_cast<char*>(p) + bytes});
  }

  // Creates the streams, the cuBLAS handle and every buffer.
  absl::Status Init() {
    const std::string description = CudaDeviceDescription(ordinal_);
    name_ = absl::StrCat("cuda:", ordinal_, " (", description, ")");
    cudaStream_t stream = nullptr;
    if (absl::Status s =
            Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags (compute)");
        !s.ok()) {
      return s;
    }
    compute_.reset(stream);
    if (absl::Status s =
            Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags (copy)");
        !s.ok()) {
      return s;
    }
    copy_.reset(stream);
    if (absl::Status s = kernels::LoadCublas(); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("cuda:", ordinal_, ": ", s.message()));
    }
    cublasHandle_t handle = nullptr;
    if (absl::Status s = CheckBlas(cublasCreate(&handle), "cublasCreate");
        !s.ok()) {
      return s;
    }
    blas_.reset(handle);
    // IEEE fp32 GEMMs: no TF32 tensor-core math, so results match the CPU's
    // to fp32 rounding.
    if (absl::Status s = CheckBlas(cublasSetStream(blas_.get(), compute_.get()),
                                   "cublasSetStream");
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            CheckBlas(cublasSetMathMode(blas_.get(), CUBLAS_DEFAULT_MATH),
                      "cublasSetMathMode");
        !s.ok()) {
      return s;
    }
    for (Event* e : {&start_, &h2d_done_, &compute_done_, &d2h_done_}) {
      if (absl::Status s = MakeEvent(cudaEventDefault, e); !s.ok()) return s;
    }
    const int64_t params_bytes = spec_.num_parameters * int64_t{sizeof(float)};
    const int64_t arena_bytes =
        fused_ != nullptr ? fused_->arena_bytes() : graph_->arena_bytes();
    absl::Status s = AllocDevice(arena_bytes,
                                 "activations and workspaces", &arena_);
    if (s.ok()) s = AllocDevice(params_bytes, "weights", &params_d_);
    if (s.ok()) s = AllocDevice(params_bytes, "gradients", &grads_d_);
    if (s.ok()) s = AllocDevice(sizeof(StepResult), "step result", &result_d_);
    if (s.ok()) s = AllocPinned(params_bytes, "weights", &params_h_);
    if (s.ok()) s = AllocPinned(params_bytes, "gradients", &grads_h_);
    if (s.ok()) s = AllocPinned(sizeof(StepResult), "step result", &result_h_);
    const int64_t output_bytes = max_batch_ * int64_t{spec_.num_classes} * sizeof(float);
    if (s.ok()) s = AllocDevice(output_bytes, "outputs", &outputs_d_);
    if (s.ok()) s = AllocPinned(output_bytes, "outputs", &outputs_h_);
    const int64_t image_bytes = max_batch_ * pixels_ * int64_t{sizeof(float)};
    const int64_t target_bytes = TargetBytes(max_batch_);
    // An Embedding's ids, indexed on the host (GraphDeviceEngine::IndexIds).
    const int64_t index_bytes =
        graph_ != nullptr ? graph_->max_index_ints() * int64_t{sizeof(int32_t)} : 0;
    for (Slot& slot : slots_) {
      if (s.ok()) s = AllocDevice(image_bytes, "images", &slot.images_d);
      if (s.ok()) s = AllocDevice(target_bytes, "targets", &slot.labels_d);
      if (s.ok()) s = AllocPinned(image_bytes, "images", &slot.images_h);
      if (s.ok()) s = AllocPinned(target_bytes, "targets", &slot.labels_h);
      if (s.ok() && index_bytes > 0) s = AllocDevice(index_bytes, "ids' index", &slot.ids_d);
      if (s.ok() && index_bytes > 0) s = AllocPinned(index_bytes, "ids' index", &slot.ids_h);
      if (s.ok()) s = MakeEvent(cudaEventDisableTiming, &slot.ready);
    }
    if (!s.ok()) return s;
    if (fused_ != nullptr) {
      fused_->Bind(arena_.get());
    } else {
      graph_->Bind(arena_.get());
      graph_kernels_ = kernels::MakeGpuGraphKernels(Device());
    }
    return WarmUp();
  }

  absl::Status TrainStep(const float* params, const Batch& batch,
                         const Batch& next, float* grads, float* loss,
                         int* correct) override {
    if (params == nullptr || grads == nullptr || loss == nullptr ||
        correct == nullptr) {
      return absl::InvalidArgumentError(
          "CudaBackend: a required pointer is null");
    }
    if (absl::Status s = CheckBatch(batch, "batch"); !s.ok()) return s;
    if (next.size != 0) {
      if (absl::Status s = CheckBatch(next, "next batch"); !s.ok()) return s;
    }
    if (!broken_.ok()) return broken_;
    const absl::Time begin = absl::Now();
    absl::Status s = Check(cudaSetDevice(ordinal_), "cudaSetDevice");
    if (s.ok()) {
      s = Check(cudaEventRecord(start_.get(), compute_.get()),
                "cudaEventRecord");
    }
    // Weights on the compute stream: from the caller's memory when it is
    // page-locked, else through the pinned buffer.
    if (s.ok()) s = CopyParamsIn(params);
    // The batch: staged by the previous step, else copied now.
    int slot = 0;
    if (s.ok()) {
      if (staged_slot_ >= 0 && staged_.images == batch.images &&
          staged_.targets == batch.targets && staged_.size == batch.size) {
        slot = staged_slot_;
        s = Check(
            cudaStreamWaitEvent(compute_.get(), slots_[slot].ready.get(), 0),
            "cudaStreamWaitEvent (prefetched batch)");
      } else {
        // Not the slot a copy may still be filling. The compute stream
        // is synchronised before TrainStep returns: the copy may read the
        // caller's memory directly.
        slot = staged_slot_ == 0 ? 1 : 0;
        s = CopyBatchIn(batch, slot, compute_.get(), /*direct_ok=*/true);
      }
      staged_slot_ = -1;
    }
    const double host_h2d_s = absl::ToDoubleSeconds(absl::Now() - begin);
    if (s.ok())
      s = Check(cudaEventRecord(h2d_done_.get(), compute_.get()),
                "cudaEventRecord");
    StepResult* result_d = static_cast<StepResult*>(result_d_.get());
    if (s.ok()) {
      errors_.Clear();
      RunGraph(slot, batch, static_cast<float*>(grads_d_.get()), result_d);
      s = KernelStatus();
    }
    if (s.ok())
      s = Check(cudaEventRecord(compute_done_.get(), compute_.get()),
                "cudaEventRecord");
    const size_t grad_bytes = spec_.num_parameters * sizeof(float);
    const bool grads_direct = Pinned(grads, grad_bytes);
    if (s.ok()) {
      s = Check(cudaMemcpyAsync(grads_direct ? grads : grads_h_.get(),
                                grads_d_.get(), grad_bytes,
                                cudaMemcpyDeviceToHost, compute_.get()),
                "cudaMemcpyAsync (gradients to the host)");
    }
    if (s.ok()) {
      s = Check(
          cudaMemcpyAsync(result_h_.get(), result_d_.get(), sizeof(StepResult),
                          cudaMemcpyDeviceToHost, compute_.get()),
          "cudaMemcpyAsync (loss to the host)");
    }
    if (s.ok())
      s = Check(cudaEventRecord(d2h_done_.get(), compute_.get()),
                "cudaEventRecord");
    // While the GPU computes: the next batch, on the copy stream, into the
    // other slot (whose last reader, the previous step, has finished).
    if (s.ok() && next.size != 0) {
      const int other = 1 - slot;
      s = CopyBatchIn(next, other, copy_.get(), /*direct_ok=*/false);
      if (s.ok()) {
        staged_ = next;
        staged_slot_ = other;
      }
      // An id out of range in the next batch: its own step says so.
      if (absl::IsDataLoss(s)) s = absl::OkStatus();
    }
    if (s.ok())
      s = Check(cudaStreamSynchronize(compute_.get()),
                "cudaStreamSynchronize (step)");
    if (!s.ok()) return Broken(s);
    const absl::Time copy_out = absl::Now();
    if (!grads_direct) std::memcpy(grads, grads_h_.get(), grad_bytes);
    const StepResult* r = static_cast<const StepResult*>(result_h_.get());
    *loss = static_cast<float>(LossSum(*r, batch.size) / batch.size);
    *correct = r->correct;
    times_.h2d_s = host_h2d_s + Seconds(start_.get(), h2d_done_.get());
    times_.compute_s = Seconds(h2d_done_.get(), compute_done_.get());
    times_.d2h_s = Seconds(compute_done_.get(), d2h_done_.get()) +
                   absl::ToDoubleSeconds(absl::Now() - copy_out);
    return absl::OkStatus();
  }

  absl::Status Evaluate(const float* params, const Batch& batch,
                        double* loss_sum, int* correct, float* outputs) override {
    if (params == nullptr || loss_sum == nullptr || correct == nullptr) {
      return absl::InvalidArgumentError(
          "CudaBackend: a required pointer is null");
    }
    if (outputs != nullptr && graph_ == nullptr) {
      return absl::InvalidArgumentError(
          "CudaBackend: the fast path does not give the outputs' probabilities");
    }
    if (absl::Status s = CheckBatch(batch, "batch"); !s.ok()) return s;
    if (!broken_.ok()) return broken_;
    absl::Status s = Check(cudaSetDevice(ordinal_), "cudaSetDevice");
    if (s.ok()) s = CopyParamsIn(params);
    const int slot = staged_slot_ == 0 ? 1 : 0;
    if (s.ok()) s = CopyBatchIn(batch, slot, compute_.get(), /*direct_ok=*/true);
    StepResult* result_d = static_cast<StepResult*>(result_d_.get());
    if (s.ok()) {
      errors_.Clear();
      RunGraph(slot, batch, /*grads=*/nullptr, result_d,
               outputs != nullptr ? static_cast<float*>(outputs_d_.get()) : nullptr);
      s = KernelStatus();
    }
    if (s.ok()) {
      s = Check(
          cudaMemcpyAsync(result_h_.get(), result_d_.get(), sizeof(StepResult),
                          cudaMemcpyDeviceToHost, compute_.get()),
          "cudaMemcpyAsync (loss to the host)");
    }
    const size_t output_bytes = size_t(batch.size) * spec_.num_classes * sizeof(float);
    if (s.ok() && outputs != nullptr) {
      s = Check(cudaMemcpyAsync(outputs_h_.get(), outputs_d_.get(), output_bytes,
                                cudaMemcpyDeviceToHost, compute_.get()),
                "cudaMemcpyAsync (outputs to the host)");
    }
    if (s.ok())
      s = Check(cudaStreamSynchronize(compute_.get()),
                "cudaStreamSynchronize (evaluation)");
    if (!s.ok()) return Broken(s);
    const StepResult* r = static_cast<const StepResult*>(result_h_.get());
    *loss_sum = LossSum(*r, batch.size);
    *correct = r->correct;
    if (outputs != nullptr) std::memcpy(outputs, outputs_h_.get(), output_bytes);
    return absl::OkStatus();
  }

  bool computes_on_device() const override { return true; }
  StepTimes last_step_times() const override { return times_; }
  std::string name() const override { return name_; }

 private:
  // One batch's device buffers and the pinned buffers they are copied from.
  struct Slot {
    DeviceMemory images_d, labels_d;
    PinnedMemory images_h, labels_h;
    // A model with Embeddings: the batch's ids indexed on the host, and
    // their ints on the device.
    GraphDeviceEngine::IdIndex ids;
    DeviceMemory ids_d;
    PinnedMemory ids_h;
    Event ready;  // recorded after the last copy into this slot
  };

  // One training step on zeros at the largest batch, before the first real
  // one: CUDA loads each kernel at its first launch and cuBLAS picks and
  // loads its GEMM kernels at its first call of a shape, about 0.1 s in
  // all on an H100, which would otherwise land in the first step (a
  // quarter of a short run's compute time).
  absl::Status WarmUp() {
    const absl::Time begin = absl::Now();
    const int64_t params_bytes = spec_.num_parameters * int64_t{sizeof(float)};
    Slot& slot = slots_[0];
    absl::Status s = Check(
        cudaMemsetAsync(params_d_.get(), 0, params_bytes, compute_.get()),
        "cudaMemsetAsync (warm-up weights)");
    if (s.ok()) {
      s = Check(cudaMemsetAsync(slot.images_d.get(), 0,
                                max_batch_ * pixels_ * sizeof(float),
                                compute_.get()),
                "cudaMemsetAsync (warm-up images)");
    }
    if (s.ok()) {
      s = Check(cudaMemsetAsync(slot.labels_d.get(), 0, TargetBytes(max_batch_),
                                compute_.get()),
                "cudaMemsetAsync (warm-up targets)");
    }
    if (s.ok() && graph_ != nullptr && graph_->has_embeddings()) {
      // Zero ids: row 0 of each table.
      const std::vector<float> zero_ids(max_batch_ * pixels_, 0.0f);
      s = graph_->IndexIds(zero_ids.data(), max_batch_, &slot.ids);
      if (s.ok()) {
        s = Check(cudaMemcpy(slot.ids_d.get(), slot.ids.ints.data(),
                             slot.ids.ints.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
                  "cudaMemcpy (warm-up ids)");
      }
    }
    if (s.ok()) {
      Batch zeros;
      zeros.size = max_batch_;
      errors_.Clear();
      RunGraph(0, zeros, static_cast<float*>(grads_d_.get()),
               static_cast<StepResult*>(result_d_.get()));
      s = KernelStatus();
    }
    if (s.ok()) {
      s = Check(cudaStreamSynchronize(compute_.get()),
                "cudaStreamSynchronize (warm-up step)");
    }
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("warm-up step: ", s.message()));
    }
    spdlog::info("{}: warm-up step at batch {} took {:.0f} ms", name_,
                 max_batch_, absl::ToDoubleMilliseconds(absl::Now() - begin));
    return absl::OkStatus();
  }

  // Queues the model on the batch in `slot`: training when grads is set.
  void RunGraph(int slot, const Batch& batch, float* grads,
                StepResult* result_d, float* outputs_d = nullptr) {
    const float* params = static_cast<const float*>(params_d_.get());
    const float* images = static_cast<const float*>(slots_[slot].images_d.get());
    const float* labels = static_cast<const float*>(slots_[slot].labels_d.get());
    if (fused_ != nullptr) {
      fused_->Run(Device(), params, images, labels, batch.size, grads,
                  &result_d->loss_sum, &result_d->correct);
    } else {
      const Slot& sl = slots_[slot];
      graph_->Run(*graph_kernels_, params, images, labels, batch.size, batch.key, grads,
                  &result_d->loss_sum, &result_d->correct, outputs_d, &result_d->penalty, &sl.ids,
                  static_cast<const int32_t*>(sl.ids_d.get()));
    }
  }

  // The examples' losses and, as Keras adds them to the mean loss, `batch`
  // times the regularizers'.
  double LossSum(const StepResult& r, int batch) const {
    const bool penalised = graph_ != nullptr && graph_->has_penalties();
    return r.loss_sum + (penalised ? double{r.penalty} * batch : 0.0);
  }

  // Bytes of `examples` examples' targets.
  int64_t TargetBytes(int64_t examples) const {
    return examples * TargetsOf(spec_) * static_cast<int64_t>(sizeof(float));
  }

  GpuDevice Device() {
    GpuDevice d;
    d.stream = compute_.get();
    d.blas = blas_.get();
    d.errors = &errors_;
    return d;
  }

  absl::Status CheckBatch(const Batch& b, const char* what) const {
    if (b.images == nullptr || b.targets == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("CudaBackend: the ", what, " has a null pointer"));
    }
    if (b.size < 1 || b.size > max_batch_) {
      return absl::InvalidArgumentError(
          absl::StrCat("CudaBackend: ", what, " size ", b.size,
                       " is not in [1, max_batch ", max_batch_, "]"));
    }
    const int per = TargetsOf(spec_);
    for (int64_t i = 0; i < int64_t{b.size} * per; ++i) {
      if (absl::Status s = CheckTarget(spec_, b.targets[i]); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("CudaBackend: label ", b.targets[i],
                                                       " of example ", i / per, " ",
                                                       s.message()));
      }
    }
    return absl::OkStatus();
  }

  // Whether [p, p + bytes) lies in memory PinHostMemory page-locked.
  bool Pinned(const void* p, size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    for (const PinnedRange& r : pinned_ranges_) {
      if (c >= r.begin && c + bytes <= r.end) return true;
    }
    return false;
  }

  // The step's weights to the device, on the compute stream.
  absl::Status CopyParamsIn(const float* params) {
    const size_t bytes = spec_.num_parameters * sizeof(float);
    const void* from = params;
    if (!Pinned(params, bytes)) {
      std::memcpy(params_h_.get(), params, bytes);
      from = params_h_.get();
    }
    return Check(cudaMemcpyAsync(params_d_.get(), from, bytes,
                                 cudaMemcpyHostToDevice, compute_.get()),
                 "cudaMemcpyAsync (weights to the device)");
  }

  // Host batch -> device slot buffers on `stream`, straight from the
  // caller's memory when it is page-locked and `direct_ok` (the caller
  // waits for `stream` before its memory may change), else through the
  // slot's pinned buffers; records the slot's `ready` event after. Waits
  // first for any earlier copy out of the slot's pinned buffers.
  absl::Status CopyBatchIn(const Batch& b, int slot, cudaStream_t stream,
                           bool direct_ok) {
    Slot& sl = slots_[slot];
    absl::Status s = Check(cudaEventSynchronize(sl.ready.get()),
                           "cudaEventSynchronize (batch buffer)");
    if (!s.ok()) return s;
    const size_t image_bytes = b.size * pixels_ * sizeof(float);
    const void* images = b.images;
    const void* labels = b.targets;
    const size_t target_bytes = TargetBytes(b.size);
    if (!direct_ok || !Pinned(b.images, image_bytes)) {
      std::memcpy(sl.images_h.get(), b.images, image_bytes);
      images = sl.images_h.get();
    }
    if (!direct_ok || !Pinned(b.targets, target_bytes)) {
      std::memcpy(sl.labels_h.get(), b.targets, target_bytes);
      labels = sl.labels_h.get();
    }
    if (graph_ != nullptr && graph_->has_embeddings()) {
      // Checked (an id out of range: DataLoss, as on the CPU) and indexed
      // before anything of this batch is queued.
      s = graph_->IndexIds(b.images, b.size, &sl.ids);
      if (!s.ok()) return s;
    }
    s = Check(cudaMemcpyAsync(sl.images_d.get(), images, image_bytes,
                              cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (images to the device)");
    if (s.ok()) {
      s = Check(cudaMemcpyAsync(sl.labels_d.get(), labels, target_bytes,
                                cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync (targets to the device)");
    }
    if (s.ok() && !sl.ids.ints.empty()) {
      const size_t bytes = sl.ids.ints.size() * sizeof(int32_t);
      std::memcpy(sl.ids_h.get(), sl.ids.ints.data(), bytes);
      s = Check(
          cudaMemcpyAsync(sl.ids_d.get(), sl.ids_h.get(), bytes, cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync (ids' index to the device)");
    }
    if (s.ok())
      s = Check(cudaEventRecord(sl.ready.get(), stream), "cudaEventRecord");
    return s;
  }

  absl::Status AllocDevice(int64_t bytes, const char* what, DeviceMemory* out) {
    void* p = nullptr;
    absl::Status s =
        Check(cudaMalloc(&p, std::max<int64_t>(bytes, 1)),
              absl::StrCat("cudaMalloc (", what, ", ", Bytes(bytes), ")"));
    if (s.ok()) out->reset(p);
    return s;
  }

  absl::Status AllocPinned(int64_t bytes, const char* what, PinnedMemory* out) {
    void* p = nullptr;
    absl::Status s = Check(
        cudaMallocHost(&p, std::max<int64_t>(bytes, 1)),
        absl::StrCat("cudaMallocHost (pinned ", what, ", ", Bytes(bytes), ")"));
    if (s.ok()) out->reset(p);
    return s;
  }

  absl::Status MakeEvent(unsigned flags, Event* out) {
    cudaEvent_t e = nullptr;
    absl::Status s =
        Check(cudaEventCreateWithFlags(&e, flags), "cudaEventCreateWithFlags");
    if (s.ok()) out->reset(e);
    return s;
  }

  // OK, or the failed call named with this backend's device.
  absl::Status Check(cudaError_t e, const std::string& call) const {
    if (e == cudaSuccess) return absl::OkStatus();
    cudaGetLastError();  // clears a non-sticky error for the next call
    const std::string message = absl::StrCat(
        "cuda:", ordinal_, ": ", kernels::CudaErrorMessage(call, e));
    return e == cudaErrorMemoryAllocation
               ? absl::ResourceExhaustedError(message)
               : absl::InternalError(message);
  }

  absl::Status CheckBlas(cublasStatus_t status, const std::string& call) const {
    if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    const std::string message = absl::StrCat(
        "cuda:", ordinal_, ": ", kernels::CublasErrorMessage(call, status));
    return status == CUBLAS_STATUS_ALLOC_FAILED
               ? absl::ResourceExhaustedError(message)
               : absl::InternalError(message);
  }

  // The first failed kernel launch or cuBLAS call of the last Run.
  absl::Status KernelStatus() const {
    if (errors_.ok()) return absl::OkStatus();
    return absl::InternalError(
        absl::StrCat("cuda:", ordinal_, ": ", errors_.first()));
  }

  // A failed step may leave the device unusable (CUDA's errors during a
  // kernel are sticky): later calls report this one.
  absl::Status Broken(absl::Status s) {
    broken_ = absl::Status(
        s.code(),
        absl::StrCat(s.message(),
                     " (the GPU backend is unusable after this error)"));
    staged_slot_ = -1;
    return broken_;
  }

  // Const after construction.
  const ModelSpec spec_;
  const int max_batch_;
  const int ordinal_;
  const int64_t pixels_;  // floats per image
  const std::unique_ptr<FusedDeviceEngine<GpuDevice>> fused_;
  const std::unique_ptr<GraphDeviceEngine> graph_;
  std::string name_;

  // Declared before what uses them, so destroyed after.
  Stream compute_;   // the step: copies in, kernels, copies out
  Stream copy_;      // the next batch, concurrently
  BlasHandle blas_;  // bound to compute_
  Event start_, h2d_done_, compute_done_, d2h_done_;  // on compute_
  DeviceMemory arena_;                                // the engine's buffers
  // The graph engine's kernels on compute_ and blas_ (graph_ only).
  std::unique_ptr<kernels::GraphKernels> graph_kernels_;
  DeviceMemory params_d_, grads_d_, result_d_;
  PinnedMemory params_h_, grads_h_, result_h_;
  DeviceMemory outputs_d_;  // Evaluate's outputs (probabilities)
  PinnedMemory outputs_h_;
  Slot slots_[2];
  // The caller's host memory PinHostMemory page-locked.
  struct PinnedRange {
    char* begin;
    char* end;
  };
  std::vector<PinnedRange> pinned_ranges_;

  kernels::KernelErrors errors_;  // of the Run in progress
  Batch staged_;                  // the batch copied into slots_[staged_slot_]
  int staged_slot_ = -1;          // -1: nothing staged
  StepTimes times_;
  absl::Status broken_;  // OK until a device failure
};

}  // namespace

int CudaDeviceCount(std::string* why_none) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *why_none = kernels::CudaErrorMessage("cudaGetDeviceCount", e);
    if (e == cudaErrorInsufficientDriver) {
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      *why_none += absl::StrFormat(
          "; no NVIDIA driver is loaded, or it is older than this binary's "
          "CUDA runtime %d.%d",
          runtime / 1000, runtime % 1000 / 10);
    }
    return 0;
  }
  if (count == 0) *why_none = "the CUDA driver reports no device";
  return count;
}

std::string CudaDeviceDescription(int ordinal) {
  cudaDeviceProp p;
  const cudaError_t e = cudaGetDeviceProperties(&p, ordinal);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return kernels::CudaErrorMessage("cudaGetDeviceProperties", e);
  }
  return absl::StrFormat("%s, compute capability %d.%d, %s", p.name, p.major,
                         p.minor,
                         Bytes(static_cast<int64_t>(p.totalGlobalMem)));
}

namespace {

// The engine that runs `spec`, planned on the host: the fused engine for its
// layers, any other model (PlanFusedLayers says Unimplemented) on the graph
// engine, as on the CPU. Exactly one of *fused and *graph is set on success.
absl::Status PlanEngines(const ModelSpec& spec, int max_batch, uint64_t seed,
                         std::unique_ptr<FusedDeviceEngine<GpuDevice>>* fused,
                         std::unique_ptr<GraphDeviceEngine>* graph) {
  absl::StatusOr<std::vector<FusedLayer>> layers = PlanFusedLayers(spec);
  if (layers.ok()) {
    *fused = std::make_unique<FusedDeviceEngine<GpuDevice>>(*std::move(layers), max_batch);
    return absl::OkStatus();
  }
  if (layers.status().code() != absl::StatusCode::kUnimplemented) return layers.status();
  absl::StatusOr<std::unique_ptr<GraphDeviceEngine>> g =
      GraphDeviceEngine::Create(spec, max_batch, seed);
  if (!g.ok()) return g.status();
  *graph = *std::move(g);
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaBackendRunsModel(const ModelSpec& spec) {
  std::unique_ptr<FusedDeviceEngine<GpuDevice>> fused;
  std::unique_ptr<GraphDeviceEngine> graph;
  return PlanEngines(spec, /*max_batch=*/1, /*seed=*/0, &fused, &graph);
}

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(
    const ModelSpec& spec, int max_batch, int ordinal, uint64_t seed) {
  if (max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaBackend: max_batch ", max_batch, " must be at least 1"));
  }
  std::unique_ptr<FusedDeviceEngine<GpuDevice>> fused;
  std::unique_ptr<GraphDeviceEngine> graph;
  if (absl::Status s = PlanEngines(spec, max_batch, seed, &fused, &graph); !s.ok()) return s;
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda:", ordinal, ": ", kernels::CudaErrorMessage("cudaSetDevice", e)));
  }
  if (cudaError_t e = kernels::GpuKernelsLoadable(); e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda:", ordinal, " (", CudaDeviceDescription(ordinal),
        ") cannot run this binary's kernels, built for compute capability ",
        kernels::GpuKernelArchs(), " (rebuild with --define=cuda_arch=...): ",
        kernels::CudaErrorMessage("cudaFuncGetAttributes", e)));
  }
  auto backend = std::make_unique<CudaBackend>(
      spec, std::move(fused), std::move(graph), max_batch, ordinal);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return std::unique_ptr<ComputeBackend>(std::move(backend));
}

}  // namespace pscluster
