#include "common/tensorboard_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/crc32c.h"
#include "common/testing/test_files.h"
#include "common/tfrecord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/tb_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

using testing::ReadAll;
using testing::WriteAll;

uint64_t GetLE(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  }
  return v;
}

double Now() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

// The proto must encode exactly as TensorFlow's event.proto/summary.proto.
TEST(TensorBoardEventProto, UsesTensorFlowsFieldNumbers) {
  tensorflow::Event event;
  event.set_step(5);
  tensorflow::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag("a");
  v->set_simple_value(1.0f);
  // Event.step = 2 (varint), Event.summary = 5 { Summary.value = 1 {
  // Value.tag = 1 "a", Value.simple_value = 2 (fixed32 1.0f) } }.
  const std::string expected(
      "\x10\x05\x2a\x0a\x0a\x08\x0a\x01"
      "a"
      "\x15\x00\x00\x80\x3f",
      14);
  EXPECT_EQ(event.SerializeAsString(), expected);

  tensorflow::Event version;
  version.set_wall_time(1.5);
  version.set_file_version("brain.Event:2");
  // wall_time = 1 (fixed64 1.5), file_version = 3.
  const std::string expected_version =
      std::string("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f\x1a\x0d", 11) +
      "brain.Event:2";
  EXPECT_EQ(version.SerializeAsString(), expected_version);
}

TEST(TensorBoardWriter, WritesAReadableEventFile) {
  const std::string logdir = TestDir("basic") + "/nested/run1";  // created
  const double before = Now();
  auto writer = TensorBoardWriter::Create(logdir, ".chief");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(
      (*writer)->AddScalars(0, {{"loss", 2.5f}, {"accuracy", 0.0f}}).ok());
  ASSERT_TRUE(
      (*writer)->AddScalars(100, {{"loss", 0.25f}, {"accuracy", 0.9f}}).ok());
  ASSERT_TRUE((*writer)->AddScalar(200, "eval/accuracy", 0.99f).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  const double after = Now();
  const std::string path = (*writer)->path();

  // The name follows TensorFlow's pattern.
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const std::string name = std::filesystem::path(path).filename().string();
  EXPECT_EQ(std::filesystem::path(path).parent_path().string(), logdir);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(
      name, m, std::regex(R"(events\.out\.tfevents\.(\d{10})\.(.+)\.chief)")))
      << name;
  EXPECT_EQ(m[2].str(), host);
  const int64_t seconds = std::stoll(m[1].str());
  EXPECT_GE(seconds, static_cast<int64_t>(before));
  EXPECT_LE(seconds, static_cast<int64_t>(after));

  // Walk the raw bytes and check the framing and both CRCs of every record
  // without the library's reader.
  const std::string bytes = ReadAll(path);
  size_t offset = 0;
  int records = 0;
  while (offset < bytes.size()) {
    ASSERT_LE(offset + 12, bytes.size());
    const uint64_t length = GetLE(bytes, offset, 8);
    EXPECT_EQ(GetLE(bytes, offset + 8, 4),
              crc32c::Mask(crc32c::Value(bytes.data() + offset, 8)));
    ASSERT_LE(offset + 16 + length, bytes.size());
    EXPECT_EQ(GetLE(bytes, offset + 12 + length, 4),
              crc32c::Mask(crc32c::Value(bytes.data() + offset + 12, length)));
    offset += 16 + length;
    ++records;
  }
  EXPECT_EQ(offset, bytes.size());
  EXPECT_EQ(records, 4);

  // And through the reader.
  auto events = ReadEventFile(path);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 4u);
  const auto& first = (*events)[0];
  EXPECT_EQ(first.what_case(), tensorflow::Event::kFileVersion);
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  for (const auto& e : *events) {
    EXPECT_GE(e.wall_time(), before - 1e-3);
    EXPECT_LE(e.wall_time(), after + 1e-3);
  }
  const std::vector<int64_t> steps = {0, 100, 200};
  const std::vector<std::vector<std::pair<std::string, float>>> values = {
      {{"loss", 2.5f}, {"accuracy", 0.0f}},
      {{"loss", 0.25f}, {"accuracy", 0.9f}},
      {{"eval/accuracy", 0.99f}}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& e = (*events)[i + 1];
    EXPECT_EQ(e.what_case(), tensorflow::Event::kSummary);
    EXPECT_EQ(e.step(), steps[i]);
    ASSERT_EQ(e.summary().value_size(), static_cast<int>(values[i].size()));
    for (size_t j = 0; j < values[i].size(); ++j) {
      const auto& v = e.summary().value(j);
      EXPECT_EQ(v.tag(), values[i][j].first);
      // Also a 0.0 is written: simple_value sits in a oneof, as in TF.
      EXPECT_EQ(v.value_case(), tensorflow::Summary::Value::kSimpleValue);
      EXPECT_EQ(v.simple_value(), values[i][j].second);
    }
  }
  EXPECT_TRUE((*writer)->Close().ok());
}

TEST(TensorBoardWriter, EventsAreVisibleBeforeFlush) {
  auto writer = TensorBoardWriter::Create(TestDir("visible"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddScalar(7, "x", 1.0f).ok());
  auto events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[1].step(), 7);
}

TEST(TensorBoardWriter, CorruptedByteIsDataLoss) {
  auto writer = TensorBoardWriter::Create(TestDir("corrupt"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddScalar(1, "loss", 0.5f).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  const std::string path = (*writer)->path();
  const std::string good = ReadAll(path);
  ASSERT_TRUE(ReadEventFile(path).ok());

  std::string bad = good;
  bad[bad.size() - 6] ^= 0x20;  // inside the last record's data (the value)
  WriteAll(path, bad);
  auto events = ReadEventFile(path);
  ASSERT_FALSE(events.ok());
  EXPECT_EQ(events.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(events.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(events.status().message()), HasSubstr("offset"));
  EXPECT_THAT(std::string(events.status().message()),
              HasSubstr("data CRC mismatch"));
}

TEST(TensorBoardWriter, ConcurrentWritersProduceWholeEvents) {
  auto writer = TensorBoardWriter::Create(TestDir("threads"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  constexpr int kThreads = 4, kEach = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        ASSERT_TRUE((*writer)
                        ->AddScalars(t * 1000 + i,
                                     {{"thread", float(t)}, {"i", float(i)}})
                        .ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  auto events = ReadEventFile((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u + kThreads * kEach);
  std::set<int64_t> steps;
  for (size_t i = 1; i < events->size(); ++i) {
    const auto& e = (*events)[i];
    ASSERT_EQ(e.summary().value_size(), 2);
    EXPECT_EQ(e.step(), int64_t(e.summary().value(0).simple_value()) * 1000 +
                            int64_t(e.summary().value(1).simple_value()));
    steps.insert(e.step());
  }
  EXPECT_EQ(steps.size(), size_t{kThreads * kEach});
}

TEST(TensorBoardWriter, RejectsBadCalls) {
  auto writer = TensorBoardWriter::Create(TestDir("bad_calls"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto& w = **writer;
  absl::Status s = w.AddScalars(3, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("step 3"));
  s = w.AddScalars(4, {{"ok", 1.0f}, {"", 2.0f}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("empty tag"));
  ASSERT_TRUE(w.Close().ok());
  ASSERT_TRUE(w.Close().ok());  // idempotent
  EXPECT_TRUE(w.Flush().ok());
  s = w.AddScalar(5, "x", 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  // Nothing of the rejected calls reached the file.
  auto events = ReadEventFile(w.path());
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1u);
}

TEST(TensorBoardWriter, RejectsBadLogdirAndSuffix) {
  auto bad_suffix = TensorBoardWriter::Create(TestDir("suffix"), "a/b");
  EXPECT_EQ(bad_suffix.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_suffix.status().message()), HasSubstr("a/b"));

  EXPECT_EQ(TensorBoardWriter::Create("").status().code(),
            absl::StatusCode::kInvalidArgument);

  const std::string file = TestDir("not_a_dir");
  WriteAll(file, "x");
  auto on_file = TensorBoardWriter::Create(file);
  ASSERT_FALSE(on_file.ok());
  EXPECT_THAT(std::string(on_file.status().message()), HasSubstr(file));
  auto under_file = TensorBoardWriter::Create(file + "/sub");
  ASSERT_FALSE(under_file.ok());
  EXPECT_THAT(std::string(under_file.status().message()), HasSubstr(file));
}

TEST(TensorBoardWriter, NeverOverwritesAnExistingFile) {
  const std::string logdir = TestDir("exists");
  // Two writers with the same suffix collide when created in the same second;
  // retry across a second boundary.
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto a = TensorBoardWriter::Create(logdir, ".same");
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = TensorBoardWriter::Create(logdir, ".same");
    if (b.ok()) continue;  // the clock ticked between the two
    EXPECT_EQ(b.status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_THAT(std::string(b.status().message()), HasSubstr((*a)->path()));
    // The first writer's file is intact.
    ASSERT_TRUE((*a)->AddScalar(1, "x", 1.0f).ok());
    auto events = ReadEventFile((*a)->path());
    ASSERT_TRUE(events.ok());
    EXPECT_EQ(events->size(), 2u);
    return;
  }
  FAIL() << "no two writers landed in the same second";
}

TEST(TensorBoardWriter, ListEventFilesFindsOnlyEventFiles) {
  const std::string logdir = TestDir("list");
  auto a = TensorBoardWriter::Create(logdir, ".a");
  auto b = TensorBoardWriter::Create(logdir, ".b");
  ASSERT_TRUE(a.ok() && b.ok());
  WriteAll(logdir + "/other.txt", "x");
  std::filesystem::create_directory(logdir + "/events.out.tfevents.dir");
  auto files = ListEventFiles(logdir);
  ASSERT_TRUE(files.ok()) << files.status();
  std::vector<std::string> expected = {(*a)->path(), (*b)->path()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(*files, expected);

  auto missing = ListEventFiles(logdir + "/none");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(ReadEventFile, RecordThatIsNotAnEventIsDataLoss) {
  const std::string dir = TestDir("not_event");
  std::filesystem::create_directories(dir);
  std::string bytes;
  AppendTFRecord("\xff\xff\xff", &bytes);  // invalid protobuf
  WriteAll(dir + "/f", bytes);
  auto events = ReadEventFile(dir + "/f");
  EXPECT_EQ(events.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(events.status().message()), HasSubstr("record 0"));
}

}  // namespace
}  // namespace pscluster
