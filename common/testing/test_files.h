// Whole-file helpers for tests that read back or corrupt what the code
// under test wrote. Plain std streams, deliberately independent of
// common/file_io.h, which those tests exercise. Test-only.
#ifndef PSCLUSTER_COMMON_TESTING_TEST_FILES_H_
#define PSCLUSTER_COMMON_TESTING_TEST_FILES_H_

#include <fstream>
#include <iterator>
#include <string>

namespace pscluster {
namespace testing {

// The file's bytes; empty when it cannot be read.
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces the file's contents with `bytes`.
inline void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace testing
}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_TESTING_TEST_FILES_H_
