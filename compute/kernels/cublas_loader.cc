#include "compute/kernels/cublas_loader.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"

#define PSCLUSTER_STRINGIFY_(x) #x
#define PSCLUSTER_STRINGIFY(x) PSCLUSTER_STRINGIFY_(x)

namespace pscluster {
namespace kernels {
namespace {

constexpr char kSoname[] = "libcublas.so." PSCLUSTER_STRINGIFY(CUBLAS_VER_MAJOR);

// The real entry points, resolved once by Load().
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
};

std::once_flag once;
Cublas* table = nullptr;           // set once by Load(), when it succeeded
absl::Status* load_status = nullptr;  // set once by Load()
std::atomic<bool> loaded{false};

// Sets *out to `name` in `lib`; names it in *missing when absent.
template <typename F>
void Resolve(void* lib, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) absl::StrAppend(missing, missing->empty() ? "" : ", ", name);
}

void Load() {
  void* lib = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  std::string reasons;
  if (lib == nullptr) {
    reasons = dlerror();
#ifdef PSCLUSTER_CUDA_LIBDIR
    const std::string path = absl::StrCat(PSCLUSTER_CUDA_LIBDIR, "/", kSoname);
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) absl::StrAppend(&reasons, "; ", dlerror());
#endif
  }
  if (lib == nullptr) {
    load_status = new absl::Status(absl::FailedPreconditionError(absl::StrCat(
        "cuBLAS: cannot load ", kSoname, " (searched LD_LIBRARY_PATH, the binary's runpath, "
        "ld.so's cache",
#ifdef PSCLUSTER_CUDA_LIBDIR
        " and ", PSCLUSTER_CUDA_LIBDIR,
#endif
        "): ", reasons)));
    return;
  }
  auto* t = new Cublas;
  std::string missing;
  Resolve(lib, "cublasCreate_v2", &t->create, &missing);
  Resolve(lib, "cublasDestroy_v2", &t->destroy, &missing);
  Resolve(lib, "cublasSetStream_v2", &t->set_stream, &missing);
  Resolve(lib, "cublasSetMathMode", &t->set_math_mode, &missing);
  Resolve(lib, "cublasSgemm_v2", &t->sgemm, &missing);
  Resolve(lib, "cublasGetStatusString", &t->status_string, &missing);
  Resolve(lib, "cublasGetStatusName", &t->status_name, &missing);
  loaded.store(true);
  if (!missing.empty()) {
    load_status = new absl::Status(absl::FailedPreconditionError(
        absl::StrCat("cuBLAS: ", kSoname, " lacks ", missing)));
    delete t;
    return;
  }
  table = t;
  load_status = new absl::Status();
}

// The table, or null when libcublas cannot be used.
const Cublas* Table() {
  std::call_once(once, Load);
  return table;
}

}  // namespace

const char* CublasSoname() { return kSoname; }

absl::Status LoadCublas() {
  Table();
  return *load_status;
}

bool CublasLoaded() { return loaded.load(); }

}  // namespace kernels
}  // namespace pscluster

// The entry points, with cublas_v2.h's names and types. Without the
// library, the calls that return a status answer NOT_INITIALIZED, which
// the backend reports with LoadCublas()'s reason.
using pscluster::kernels::Table;

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  const auto* t = Table();
  return t != nullptr ? t->create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  const auto* t = Table();
  return t != nullptr ? t->destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  const auto* t = Table();
  return t != nullptr ? t->set_stream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  const auto* t = Table();
  return t != nullptr ? t->set_math_mode(handle, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                           cublasOperation_t transb, int m, int n, int k,
                                           const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C,
                                           int ldc) {
  const auto* t = Table();
  return t != nullptr ? t->sgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C,
                                 ldc)
                      : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  const auto* t = Table();
  return t != nullptr ? t->status_string(status) : "cuBLAS could not be loaded";
}

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  const auto* t = Table();
  return t != nullptr ? t->status_name(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

}  // extern "C"
