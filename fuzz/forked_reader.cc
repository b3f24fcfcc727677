#include "fuzz/forked_reader.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "model/keras_weights.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define PSCLUSTER_FUZZ_ASAN 1
#endif
#endif

// The counters' section (-fsanitize=fuzzer-no-link), bounded by the
// linker; absent in a build without coverage.
extern "C" {
extern uint8_t __start___sancov_cntrs[] __attribute__((weak));
extern uint8_t __stop___sancov_cntrs[] __attribute__((weak));
}

namespace pscluster {
namespace {

uint8_t* shared_counters = nullptr;

size_t NumCounters() {
  if (__start___sancov_cntrs == nullptr) return 0;
  return static_cast<size_t>(__stop___sancov_cntrs - __start___sancov_cntrs);
}

void CopyCountersOut() {
  if (shared_counters != nullptr) {
    std::memcpy(shared_counters, __start___sancov_cntrs, NumCounters());
  }
}

#ifdef PSCLUSTER_FUZZ_ASAN
// In the child, sanitizer reports go to a memory file first (report_fd):
// one whose frame #1 (#0 is the interceptor) is libhdf5's ends the child
// by SIGSEGV, unprinted, as the same call does without ASan; any other is
// copied to stderr as the child dies.
int report_fd = -1;

void OnAsanReport(const char* report) {
  const char* frame = std::strstr(report, "\n    #1 ");
  if (frame == nullptr) return;
  const char* end = std::strchr(frame + 1, '\n');
  const std::string_view line(frame, end != nullptr ? end - frame : std::strlen(frame));
  if (line.find("/libhdf5") == std::string_view::npos) return;
  ::signal(SIGSEGV, SIG_DFL);
  ::raise(SIGSEGV);
}

void PrintReport() {
  char buf[4096];
  ssize_t n;
  ::lseek(report_fd, 0, SEEK_SET);
  while ((n = ::read(report_fd, buf, sizeof buf)) > 0) {
    if (::write(STDERR_FILENO, buf, static_cast<size_t>(n)) != n) break;
  }
}

void AtChildStart() {
  report_fd = ::memfd_create("sanitizer-report", 0);
  if (report_fd < 0) return;  // reports then go to stderr, as ever
  __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<intptr_t>(report_fd)));
  __sanitizer_set_death_callback(PrintReport);
  __asan_set_error_report_callback(OnAsanReport);
}
#endif

}  // namespace

void SetUpForkedReader() {
  if (const size_t n = NumCounters(); n > 0 && shared_counters == nullptr) {
    void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) shared_counters = static_cast<uint8_t*>(m);
  }
  WeightsReaderHooks hooks;
  hooks.before_exit = CopyCountersOut;
#ifdef PSCLUSTER_FUZZ_ASAN
  hooks.at_start = AtChildStart;
#endif
  SetWeightsReaderHooks(hooks);
}

void ClearForkedCoverage() {
  if (shared_counters != nullptr) std::memset(shared_counters, 0, NumCounters());
}

// The child's counters are this process's at the fork plus what the child
// ran; the maximum keeps what this process ran since as well.
void MergeForkedCoverage() {
  if (shared_counters == nullptr) return;
  for (size_t i = 0; i < NumCounters(); ++i) {
    __start___sancov_cntrs[i] = std::max(__start___sancov_cntrs[i], shared_counters[i]);
  }
}

}  // namespace pscluster
