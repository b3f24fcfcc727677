// The memory of reading TFRecord data larger than it should hold: MNIST
// repeated to over 1 GB of TFRecords (tests/tools/idx_to_tfrecord.py) in
// TEST_TMPDIR, read for a whole epoch through the worker's own path
// (OpenExampleSource, ChunkReader::Fill), keeps the process's peak resident
// memory (VmHWM) under the index (16 bytes a record) + two chunks + 64 MiB
// of baseline. The files are deleted at the end.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "model/chunk_reader.h"
#include "model/dataset.h"
#include "model/example_source.h"
#include "tests/local_cluster.h"

namespace pscluster {
namespace testing {
namespace {

// A field of /proc/self/status in bytes ("VmHWM:   1234 kB").
int64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1) * 1024;
  }
  return -1;
}

TEST(TFRecordMemoryTest, OneGigabyteEpochStaysBounded) {
  const std::string mnist = TestDataDir();
  PSCLUSTER_SKIP_WITHOUT_MNIST(mnist);
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/big_tfrecord";
  const int64_t target = int64_t{1100} << 20;
  const std::string cmd = absl::StrCat("/usr/bin/python3 tests/tools/idx_to_tfrecord.py '", mnist,
                                       "' '", dir, "' --train_only --shards=8 --target_bytes=",
                                       target);
  absl::Time t0 = absl::Now();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  int64_t bytes = 0;
  for (int s = 0; s < 8; ++s) {
    struct stat st;
    const std::string f = absl::StrFormat("%s/train-%05d-of-00008.tfrecord", dir, s);
    ASSERT_EQ(stat(f.c_str(), &st), 0) << f;
    bytes += st.st_size;
  }
  ASSERT_GE(bytes, int64_t{1} << 30);
  std::printf("wrote %.2f GB of TFRecords in %.1f s\n", bytes / 1e9,
              absl::ToDoubleSeconds(absl::Now() - t0));

  t0 = absl::Now();
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = OpenExampleSource(dir, Split::kTrain);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_EQ((*source)->in_memory(), nullptr);
  const int count = (*source)->count();
  const double open_s = absl::ToDoubleSeconds(absl::Now() - t0);
  const int batch = 1024;
  ChunkReader reader(source->get(), batch, /*seed=*/5);
  std::vector<float> images(size_t{batch} * reader.pixels()), targets(batch);
  t0 = absl::Now();
  double label_sum = 0;
  int64_t examples = 0;
  for (int k = 0; k < reader.chunks_per_epoch(); ++k) {
    absl::StatusOr<int> n = reader.Fill(k, images.data(), targets.data());
    ASSERT_TRUE(n.ok()) << n.status();
    for (int i = 0; i < *n; ++i) label_sum += targets[i];
    examples += *n;
  }
  const double epoch_s = absl::ToDoubleSeconds(absl::Now() - t0);
  EXPECT_EQ(examples, count);
  EXPECT_GT(label_sum / examples, 4.0);  // MNIST's mean label is 4.45
  EXPECT_LT(label_sum / examples, 5.0);

  const int64_t index = int64_t{count} * 16;
  const int64_t chunk = int64_t{batch} * (reader.pixels() + 1) * 4;
  const int64_t bound = index + 2 * chunk + (int64_t{64} << 20);
  const int64_t hwm = StatusBytes("VmHWM");
  std::printf("%d records (%.2f GB): open (index) %.1f s, one epoch in chunks of %d %.1f s; "
              "VmHWM %.1f MiB, bound %.1f MiB (index %.1f + 2 chunks %.1f + 64 baseline)\n",
              count, bytes / 1e9, open_s, batch, epoch_s, hwm / 1048576.0, bound / 1048576.0,
              index / 1048576.0, 2 * chunk / 1048576.0);
  EXPECT_GT(hwm, 0);
  EXPECT_LT(hwm, bound);
  EXPECT_LT(hwm, bytes / 8);  // nowhere near the data's size
  ASSERT_EQ(std::system(absl::StrCat("rm -rf '", dir, "'").c_str()), 0);
}

}  // namespace
}  // namespace testing
}  // namespace pscluster
