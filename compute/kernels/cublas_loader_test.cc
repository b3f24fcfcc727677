#include "compute/kernels/cublas_loader.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace pscluster {
namespace kernels {
namespace {

// Whether libcublas is mapped into this process.
bool CublasMapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("/libcublas.so") != std::string::npos;
}

// One test, in this order: linking the loader (and cudart) loads no cuBLAS;
// the first call opens the toolkit's library and answers with its texts;
// a handle is made where a GPU is, refused as not initialised where none is.
TEST(CublasLoaderTest, LoadsOnFirstUseAndForwardsToTheToolkitsLibrary) {
  EXPECT_FALSE(CublasLoaded());
  EXPECT_FALSE(CublasMapped()) << "libcublas was loaded before any cuBLAS call";

  const std::string name = cublasGetStatusName(CUBLAS_STATUS_ALLOC_FAILED);
  EXPECT_EQ(name, "CUBLAS_STATUS_ALLOC_FAILED");
  EXPECT_TRUE(CublasLoaded());
  EXPECT_TRUE(CublasMapped());
  ASSERT_TRUE(LoadCublas().ok()) << LoadCublas();
  EXPECT_EQ(std::string(CublasSoname()).rfind("libcublas.so.", 0), 0u) << CublasSoname();
  EXPECT_FALSE(std::string(cublasGetStatusString(CUBLAS_STATUS_SUCCESS)).empty());

  int devices = 0;
  const bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  cudaGetLastError();
  cublasHandle_t handle = nullptr;
  const cublasStatus_t created = cublasCreate(&handle);
  if (gpu) {
    ASSERT_EQ(created, CUBLAS_STATUS_SUCCESS) << cublasGetStatusName(created);
    EXPECT_EQ(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
  } else {
    EXPECT_EQ(created, CUBLAS_STATUS_NOT_INITIALIZED) << cublasGetStatusName(created);
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pscluster
