// FuzzInput: reads typed values off the front of a fuzzer's input, in the
// manner of LLVM's FuzzedDataProvider, but header-only and free of clang's
// headers, so the fuzz targets also build with gcc (as corpus replayers,
// see replay_main.cc). Reads past the end yield zeros: every input decodes
// to some sequence of operations. Not thread-safe; borrows the input, which
// must outlive it and every string_view it returns. Also the scratch
// folder and file writer of the targets that read files.
#ifndef PSCLUSTER_FUZZ_FUZZ_INPUT_H_
#define PSCLUSTER_FUZZ_FUZZ_INPUT_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

namespace pscluster {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return size_ == 0; }
  size_t remaining() const { return size_; }

  uint8_t Byte() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }

  bool Bool() { return (Byte() & 1) != 0; }

  // sizeof(T) bytes as they lie (little-endian on our machines).
  template <typename T>
  T Raw() {
    static_assert(std::is_trivially_copyable_v<T>);
    unsigned char bytes[sizeof(T)] = {};
    for (unsigned char& b : bytes) b = Byte();
    T value;
    std::memcpy(&value, bytes, sizeof(T));
    return value;
  }

  // A value in [lo, hi], reading only as many bytes as the range needs.
  int64_t IntInRange(int64_t lo, int64_t hi) {
    const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    uint64_t result = 0;
    for (int shift = 0; shift < 64 && (range >> shift) != 0; shift += 8) {
      result = (result << 8) | Byte();
    }
    if (range != std::numeric_limits<uint64_t>::max()) result %= range + 1;
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + result);
  }

  // Up to n bytes (fewer at the end of the input).
  std::string_view Bytes(size_t n) {
    if (n > size_) n = size_;
    std::string_view out(reinterpret_cast<const char*>(data_), n);
    data_ += n;
    size_ -= n;
    return out;
  }

  // A two-byte length (reduced to [0, max]), then that many bytes.
  std::string_view LengthPrefixed(size_t max) {
    return Bytes(static_cast<size_t>(IntInRange(0, static_cast<int64_t>(max))));
  }

  std::string_view Rest() { return Bytes(size_); }

  template <typename T, size_t N>
  const T& Pick(const T (&options)[N]) {
    return options[IntInRange(0, N - 1)];
  }

  // Any int64, with the edges (INT64_MIN, INT64_MAX, 0, -1, ...) often.
  int64_t Int64() {
    static constexpr int64_t kEdges[] = {
        std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min() + 1,
        std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 1,
        std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
        -1, 0, 1};
    const uint8_t kind = Byte();
    if (kind < 64) return kEdges[kind % (sizeof(kEdges) / sizeof(int64_t))];
    return Raw<int64_t>();
  }

  // Mostly small values a training run sends, sometimes the edge cases
  // (zero, huge, infinite, NaN, subnormal) or arbitrary bits.
  float Float() {
    static constexpr float kSpecial[] = {
        0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-3f, 0.9f, 0.999f, 1e-7f,
        1e30f, -1e30f, std::numeric_limits<float>::max(),
        std::numeric_limits<float>::min(),
        std::numeric_limits<float>::denorm_min(),
        std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()};
    const uint8_t kind = Byte();
    if (kind < 24) return kSpecial[kind % (sizeof(kSpecial) / sizeof(float))];
    if (kind < 32) return Raw<float>();
    return static_cast<float>(static_cast<int8_t>(Byte())) / 32.0f;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

// A folder of this process's own under $TMPDIR (or /tmp), for targets that
// hand their input to a reader as files; made on first use, removed when the
// process exits (a crash leaves it, beside libFuzzer's crash-* file).
inline const std::filesystem::path& FuzzScratchDir() {
  struct Scratch {
    std::filesystem::path path;
    Scratch() {
      const char* tmp = std::getenv("TMPDIR");
      path = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
             ("pscluster-fuzz-" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Scratch scratch;
  return scratch.path;
}

// `bytes` as the whole of the file at `path`.
inline void WriteFuzzFile(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// FuzzScratchDir()/name, emptied (an input's files start from nothing).
inline std::filesystem::path FreshFuzzDir(const char* name) {
  const std::filesystem::path dir = FuzzScratchDir() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace pscluster

#endif  // PSCLUSTER_FUZZ_FUZZ_INPUT_H_
