// The ring all-reduce over real gRPC servers in one process: every member
// ends with the same bits, equal bit for bit to the sum taken in the
// header's documented order (recomputed here on its own); bf16 and fp16
// stay within their codecs' bounds; the bytes sent are 2(P-1)/P of the
// buffer; a dead or silent member, Abort() (direct or the chief's call), a
// stale ring, a missing token and mismatched buffers each end the call with
// the error that names them, never a hang.
#include "worker/ring_allreduce.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "wire/codec.h"
#include "common/rpc.h"
#include "common/security.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordination.grpc.pb.h"
#include "proto/ring.grpc.pb.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

// Gradient-like values spanning decades, so that the order of a sum
// changes its rounding.
std::vector<float> Values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-4.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng) * std::pow(10.0f, decade(rng));
  return x;
}

int Mod(int64_t a, int p) { return static_cast<int>(((a % p) + p) % p); }

// Where value i goes in the documented layout: its direction (0 clockwise,
// 1 counter-clockwise) and segment.
struct Place {
  int direction;
  int segment;
};
Place PlaceOf(int64_t i, int64_t n, int members, bool bidirectional) {
  const int64_t clockwise = bidirectional ? n - n / 2 : n;
  const int d = i < clockwise ? 0 : 1;
  const int64_t begin = d == 0 ? 0 : clockwise;
  const int64_t length = d == 0 ? clockwise : n - clockwise;
  const int64_t j = i - begin;
  for (int s = 0; s < members; ++s) {
    if (j < length * (s + 1) / members) return {d, s};
  }
  ADD_FAILURE() << "value " << i << " has no segment";
  return {d, 0};
}

// The header's order: segment s summed from rank s on, along its direction:
// (...((x_s + x_{s+sign}) + x_{s+2 sign}) + ...), one float32 addition each.
std::vector<float> ReferenceSum(const std::vector<std::vector<float>>& x, bool bidirectional) {
  const int members = static_cast<int>(x.size());
  const int64_t n = static_cast<int64_t>(x[0].size());
  std::vector<float> sum(n);
  for (int64_t i = 0; i < n; ++i) {
    const Place p = PlaceOf(i, n, members, bidirectional);
    const int sign = p.direction == 0 ? 1 : -1;
    float acc = x[p.segment][i];
    for (int t = 1; t < members; ++t) acc = acc + x[Mod(p.segment + sign * t, members)][i];
    sum[i] = acc;
  }
  return sum;
}

// The index of the first value whose bits differ, or -1.
int64_t FirstBitDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

std::shared_ptr<const SecurityConfig> Plaintext() {
  return std::make_shared<const SecurityConfig>();
}

// A member's server: a RingService on 127.0.0.1, an ephemeral port, beside
// a synchronous service as on a TaskServer (which serves TaskControl).
struct Member {
  std::unique_ptr<RingService> service;
  std::unique_ptr<TaskControl::Service> control;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::unique_ptr<RingAllReducer> reducer;
};

class RingTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (Member& m : members_) m.service->SetReducer(nullptr);
    members_.clear();  // reducers, then servers
    SetProcessSecurity(SecurityConfig{});
  }

  // Starts `count` servers with `rpc`'s credentials.
  void StartServers(int count, const RpcOptions& rpc = {}) {
    for (int i = 0; i < count; ++i) {
      Member m;
      m.service = std::make_unique<RingService>();
      grpc::ServerBuilder builder;
      ConfigureServer(builder, rpc);
      int port = 0;
      builder.AddListeningPort("127.0.0.1:0", ListeningCredentials(rpc), &port);
      builder.RegisterService(m.service.get());
      m.control = std::make_unique<TaskControl::Service>();
      builder.RegisterService(m.control.get());
      m.server = builder.BuildAndStart();
      ASSERT_TRUE(m.server != nullptr && port != 0) << "cannot start member " << i;
      m.address = absl::StrCat("127.0.0.1:", port);
      members_.push_back(std::move(m));
    }
  }

  // New reducers on every member with `options`, and a new ring of the
  // members `ranks` (in that order), with a fresh ring_id.
  void NewRing(const RingOptions& options, std::vector<int> ranks = {}) {
    if (ranks.empty()) {
      for (size_t i = 0; i < members_.size(); ++i) ranks.push_back(static_cast<int>(i));
    }
    for (Member& m : members_) {
      absl::StatusOr<std::unique_ptr<RingAllReducer>> r =
          RingAllReducer::Create(m.service.get(), options);
      ASSERT_TRUE(r.ok()) << r.status();
      m.service->SetReducer(nullptr);
      m.reducer = *std::move(r);
      m.service->SetReducer(m.reducer.get());  // for Abort calls
    }
    SetRing(ranks);
  }

  // Installs a ring of `ranks` with the next ring_id on those members.
  void SetRing(const std::vector<int>& ranks) {
    ++ring_id_;
    std::vector<std::string> addresses;
    for (int i : ranks) addresses.push_back(members_[i].address);
    ring_ = ranks;
    for (size_t k = 0; k < ranks.size(); ++k) {
      absl::Status s =
          members_[ranks[k]].reducer->SetRing(ring_id_, addresses, static_cast<int>(k));
      ASSERT_TRUE(s.ok()) << s;
    }
  }

  // AllReduce of `step` on every member of the ring at once, buffers[k] on
  // the ring's k-th member; the statuses in ring order.
  std::vector<absl::Status> Reduce(int64_t step, std::vector<std::vector<float>>* buffers) {
    std::vector<absl::Status> status(ring_.size());
    std::vector<std::thread> threads;
    for (size_t k = 0; k < ring_.size(); ++k) {
      threads.emplace_back([this, k, step, buffers, &status] {
        std::vector<float>& b = (*buffers)[k];
        status[k] =
            members_[ring_[k]].reducer->AllReduce(step, b.data(), static_cast<int64_t>(b.size()));
      });
    }
    for (std::thread& t : threads) t.join();
    return status;
  }

  // One step with fresh values: every member OK, bit-identical, and equal
  // bit for bit to the documented order's sum.
  void ExpectExactStep(int64_t step, int64_t n, bool bidirectional, const std::string& what) {
    const int members = static_cast<int>(ring_.size());
    std::vector<std::vector<float>> x;
    for (int k = 0; k < members; ++k) {
      x.push_back(Values(n, static_cast<uint32_t>(1000 * step + 31 * k + n)));
    }
    const std::vector<float> want = ReferenceSum(x, bidirectional);
    std::vector<absl::Status> status = Reduce(step, &x);
    for (int k = 0; k < members; ++k) {
      ASSERT_TRUE(status[k].ok()) << what << ", rank " << k << ": " << status[k];
      const int64_t at = FirstBitDifference(x[k], want);
      ASSERT_EQ(at, -1) << what << ", rank " << k << ": value " << at << " is " << x[k][at]
                        << ", the documented order gives " << want[at];
    }
  }

  std::vector<Member> members_;
  std::vector<int> ring_;  // the members of the ring installed, in order
  int64_t ring_id_ = 0;
};

// Without this the exactness checks below could not fail: the order of a
// float32 sum changes its bits on these values.
TEST(ReferenceSumTest, OrderChangesTheBits) {
  for (int members = 3; members <= 5; ++members) {
    std::vector<std::vector<float>> x;
    for (int k = 0; k < members; ++k) x.push_back(Values(1000, 7 + k));
    const std::vector<float> want = ReferenceSum(x, true);
    std::vector<float> in_rank_order(1000, 0.0f);
    for (int64_t i = 0; i < 1000; ++i) {
      for (int k = 0; k < members; ++k) in_rank_order[i] = in_rank_order[i] + x[k][i];
    }
    EXPECT_NE(FirstBitDifference(want, in_rank_order), -1) << members << " members";
  }
}

class RingSizeTest : public RingTest, public ::testing::WithParamInterface<int> {};

// Every size, chunking and direction; two successive steps on each ring.
TEST_P(RingSizeTest, EveryReplicaHoldsTheDocumentedSumBitForBit) {
  const int members = GetParam();
  StartServers(members);
  struct Case {
    int64_t n;
    int64_t chunk_bytes;
  };
  std::vector<Case> cases;
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{members - 1}}) {
    for (int64_t chunk : {4, 12, 400}) cases.push_back({n, chunk});
  }
  cases.push_back({1000, 12});
  cases.push_back({1000, 400});
  cases.push_back({(1 << 20) + 3, 64 << 10});
  int64_t step = 0;
  for (bool bidirectional : {false, true}) {
    for (const Case& c : cases) {
      RingOptions options;
      options.chunk_bytes = c.chunk_bytes;
      options.bidirectional = bidirectional;
      options.timeout = absl::Seconds(20);
      NewRing(options);
      const std::string what =
          absl::StrCat(members, " members, n=", c.n, ", chunk_bytes=", c.chunk_bytes,
                       bidirectional ? ", both ways" : ", clockwise");
      for (int s = 0; s < 2; ++s) ExpectExactStep(++step, c.n, bidirectional, what);
      if (HasFatalFailure()) return;
      const RingAllReducer::Stats st = members_[0].reducer->last_stats();
      if (members == 1) {
        EXPECT_EQ(st.messages_sent, 0) << what;
        EXPECT_EQ(st.bytes_sent, 0) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Members, RingSizeTest, ::testing::Range(1, 6),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return absl::StrCat(i.param, "members");
                         });

TEST_F(RingTest, OneMemberLeavesTheBufferAsItIs) {
  StartServers(1);
  NewRing(RingOptions{});
  std::vector<std::vector<float>> x = {Values(100, 1)};
  const std::vector<float> before = x[0];
  std::vector<absl::Status> s = Reduce(1, &x);
  ASSERT_TRUE(s[0].ok()) << s[0];
  EXPECT_EQ(FirstBitDifference(x[0], before), -1);
  EXPECT_EQ(members_[0].reducer->last_stats().messages_sent, 0);
}

// bf16: each of the P - 1 reduce-scatter hops rounds the partial sum to
// bf16 (relative error <= 2^-8) and the final sum is rounded once more, so
// |result - exact| <= P * 2^-8 * sum_k |x_k| (plus float32's own rounding,
// 2^-24 a hop, covered by the 1.01). Exactly: the documented order with a
// bf16 round trip before each hop and at the end.
TEST_F(RingTest, Bfloat16WireKeepsReplicasIdenticalWithinTheCodecsBound) {
  constexpr int kMembers = 4;
  constexpr int64_t kN = 20011;
  StartServers(kMembers);
  RingOptions options;
  options.wire.codec = Codec::kBfloat16;
  options.chunk_bytes = 4096;
  NewRing(options);
  std::vector<std::vector<float>> x;
  for (int k = 0; k < kMembers; ++k) x.push_back(Values(kN, 50 + k));
  const std::vector<std::vector<float>> in = x;
  std::vector<absl::Status> s = Reduce(1, &x);
  for (int k = 0; k < kMembers; ++k) ASSERT_TRUE(s[k].ok()) << s[k];
  CodecOptions bf16;
  bf16.codec = Codec::kBfloat16;
  auto round_trip = [&bf16](float v) {
    std::string bytes;
    Encode(bf16, &v, 1, &bytes);
    absl::string_view view(bytes);
    float out = 0;
    EXPECT_TRUE(Decode(bf16, &view, 1, &out).ok());
    return out;
  };
  for (int64_t i = 0; i < kN; ++i) {
    const Place p = PlaceOf(i, kN, kMembers, true);
    const int sign = p.direction == 0 ? 1 : -1;
    float acc = in[p.segment][i];
    double exact = in[p.segment][i];
    double magnitude = std::fabs(in[p.segment][i]);
    for (int t = 1; t < kMembers; ++t) {
      const float v = in[Mod(p.segment + sign * t, kMembers)][i];
      acc = round_trip(acc) + v;
      exact += v;
      magnitude += std::fabs(v);
    }
    const float want = round_trip(acc);
    for (int k = 0; k < kMembers; ++k) {
      ASSERT_EQ(std::memcmp(&x[k][i], &want, sizeof(float)), 0)
          << "rank " << k << ", value " << i << ": " << x[k][i] << " vs " << want;
    }
    ASSERT_LE(std::fabs(x[0][i] - exact), kMembers * std::ldexp(1.0, -8) * magnitude * 1.01)
        << "value " << i;
  }
  // Half the bytes of fp32.
  const RingAllReducer::Stats st = members_[0].reducer->last_stats();
  const double ideal = 2.0 * (kMembers - 1) / kMembers * 2 * kN;
  EXPECT_NEAR(st.payload_bytes_sent, ideal, 0.05 * ideal);
}

// fp16 with a scale per chunk: each rounding is within 2^-11 of the value,
// or 2^-25 / scale absolutely, and the scale brings the chunk's largest
// |value| m to [2^14, 2^15), so 2^-25 / scale <= m * 2^-39; P roundings
// (P - 1 hops and the final sum) give
// |result - exact| <= P * (2^-11 * sum_k |x_k| + 2^-38 * max sum_k |x_k|).
TEST_F(RingTest, Float16WireKeepsReplicasIdenticalWithinTheCodecsBound) {
  constexpr int kMembers = 3;
  constexpr int64_t kN = 30007;
  StartServers(kMembers);
  RingOptions options;
  options.wire.codec = Codec::kFloat16;
  options.chunk_bytes = 2000;
  NewRing(options);
  std::vector<std::vector<float>> x;
  for (int k = 0; k < kMembers; ++k) x.push_back(Values(kN, 70 + k));
  const std::vector<std::vector<float>> in = x;
  std::vector<absl::Status> s = Reduce(1, &x);
  for (int k = 0; k < kMembers; ++k) ASSERT_TRUE(s[k].ok()) << s[k];
  for (int k = 1; k < kMembers; ++k) {
    const int64_t at = FirstBitDifference(x[k], x[0]);
    ASSERT_EQ(at, -1) << "rank " << k << " differs from rank 0 at " << at;
  }
  double largest = 0;
  std::vector<double> exact(kN, 0.0), magnitude(kN, 0.0);
  for (int64_t i = 0; i < kN; ++i) {
    for (int k = 0; k < kMembers; ++k) {
      exact[i] += in[k][i];
      magnitude[i] += std::fabs(in[k][i]);
    }
    largest = std::max(largest, magnitude[i]);
  }
  int64_t inexact = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const double bound =
        kMembers * (std::ldexp(1.0, -11) * magnitude[i] + std::ldexp(1.0, -38) * largest) * 1.01;
    ASSERT_LE(std::fabs(x[0][i] - exact[i]), bound) << "value " << i;
    inexact += static_cast<double>(x[0][i]) != static_cast<double>(static_cast<float>(exact[i]));
  }
  EXPECT_GT(inexact, 0) << "fp16 on the wire should round some sums";
  const RingAllReducer::Stats st = members_[0].reducer->last_stats();
  const double ideal = 2.0 * (kMembers - 1) / kMembers * 2 * kN;
  EXPECT_NEAR(st.payload_bytes_sent, ideal, 0.05 * ideal);
}

// M = 4 MiB of fp32: each member sends and receives 2(P-1)/P * M of
// payload; the wire adds RingChunk's header fields, a few dozen bytes a
// message.
TEST_F(RingTest, BytesAreTwoTimesPMinusOneOverPOfTheBuffer) {
  constexpr int kMembers = 4;
  constexpr int64_t kN = 1 << 20;
  constexpr int64_t kHeaderBytes = 64;
  StartServers(kMembers);
  RingOptions options;
  options.chunk_bytes = 256 << 10;
  NewRing(options);
  std::vector<std::vector<float>> x;
  for (int k = 0; k < kMembers; ++k) x.push_back(Values(kN, 90 + k));
  std::vector<absl::Status> s = Reduce(1, &x);
  const double ideal = 2.0 * (kMembers - 1) / kMembers * 4 * kN;
  for (int k = 0; k < kMembers; ++k) {
    ASSERT_TRUE(s[k].ok()) << s[k];
    const RingAllReducer::Stats st = members_[k].reducer->last_stats();
    EXPECT_NEAR(st.payload_bytes_sent, ideal, 0.05 * ideal) << "rank " << k;
    EXPECT_NEAR(st.payload_bytes_received, ideal, 0.05 * ideal) << "rank " << k;
    EXPECT_GT(st.messages_sent, 0);
    EXPECT_GE(st.bytes_sent, st.payload_bytes_sent) << "rank " << k;
    EXPECT_LE(st.bytes_sent, 1.05 * ideal + kHeaderBytes * st.messages_sent) << "rank " << k;
    EXPECT_GE(st.bytes_received, st.payload_bytes_received) << "rank " << k;
    EXPECT_LE(st.bytes_received, 1.05 * ideal + kHeaderBytes * st.messages_received)
        << "rank " << k;
    EXPECT_GT(st.wall, absl::ZeroDuration());
    std::printf("rank %d: sent %lld bytes (%lld payload, %lld messages) in %s\n", k,
                static_cast<long long>(st.bytes_sent),
                static_cast<long long>(st.payload_bytes_sent),
                static_cast<long long>(st.messages_sent), absl::FormatDuration(st.wall).c_str());
  }
}

// A member whose server is gone: the others return Unavailable naming it,
// about options.timeout later. Then the survivors form a new ring, which
// works, and chunks of the old ring are refused.
TEST_F(RingTest, DeadMemberIsUnavailableAndSurvivorsFormANewRing) {
  constexpr absl::Duration kTimeout = absl::Seconds(2);
  StartServers(3);
  RingOptions options;
  options.timeout = kTimeout;
  options.chunk_bytes = 400;
  NewRing(options);
  const std::string dead = members_[2].address;
  members_[2].server->Shutdown(absl::ToChronoTime(absl::Now()));
  members_[2].server->Wait();

  std::vector<std::vector<float>> x = {Values(1000, 1), Values(1000, 2)};
  std::vector<absl::Status> status(2);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back(
        [&, k] { status[k] = members_[k].reducer->AllReduce(1, x[k].data(), 1000); });
  }
  for (std::thread& t : threads) t.join();
  const absl::Duration took = absl::Now() - start;
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(absl::IsUnavailable(status[k])) << "rank " << k << ": " << status[k];
    EXPECT_THAT(std::string(status[k].message()), HasSubstr(dead)) << "rank " << k;
  }
  EXPECT_LT(took, 10 * kTimeout);

  // The survivors' new ring.
  SetRing({0, 1});
  ExpectExactStep(2, 1000, true, "survivors");
  if (HasFatalFailure()) return;

  // Chunks of the old ring (or of one not installed yet) are refused.
  auto stub = Ring::NewStub(MakeChannel(members_[0].address));
  RingChunk old;
  old.set_ring_id(ring_id_ - 1);
  old.set_step(3);
  old.set_sender(1);
  old.set_data(std::string(16, '\0'));
  RingAck ack;
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub->Send(&ctx, old, &ack);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("ring ", ring_id_ - 1)));
  }
  RingChunk newer = old;
  newer.set_ring_id(ring_id_ + 1);
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub->Send(&ctx, newer, &ack);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  }
  // A chunk of the current ring is held once, however often it comes.
  RingChunk current = old;
  current.set_ring_id(ring_id_);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    grpc::Status s = stub->Send(&ctx, current, &ack);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(members_[0].service->held(), 1);
  EXPECT_EQ(members_[1].service->held(), 0);
  // The ring id only rises.
  absl::Status s = members_[0].reducer->SetRing(ring_id_, {members_[0].address}, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

// A member that is up but never calls AllReduce: the others hear nothing
// from it for options.timeout and name it.
TEST_F(RingTest, SilentMemberIsUnavailable) {
  constexpr absl::Duration kTimeout = absl::Seconds(2);
  StartServers(3);
  RingOptions options;
  options.timeout = kTimeout;
  NewRing(options);
  std::vector<std::vector<float>> x = {Values(5000, 1), Values(5000, 2)};
  std::vector<absl::Status> status(2);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back(
        [&, k] { status[k] = members_[k].reducer->AllReduce(1, x[k].data(), 5000); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, 10 * kTimeout);
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(absl::IsUnavailable(status[k])) << "rank " << k << ": " << status[k];
    EXPECT_THAT(std::string(status[k].message()), HasSubstr(members_[2].address));
    EXPECT_THAT(std::string(status[k].message()), HasSubstr("no chunk for 2s"));
  }
}

TEST_F(RingTest, AbortFromAnotherThreadReturnsAbortedAtOnce) {
  StartServers(2);
  RingOptions options;
  options.timeout = absl::Seconds(60);  // Abort, not the timeout, ends it
  NewRing(options);
  std::vector<float> x = Values(1000, 3);
  absl::Status status;
  const absl::Time start = absl::Now();
  std::thread reducer([&] { status = members_[0].reducer->AllReduce(1, x.data(), 1000); });
  absl::SleepFor(absl::Milliseconds(300));
  members_[0].reducer->Abort();
  reducer.join();
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // Aborted until a new ring is installed; then it works again.
  status = members_[0].reducer->AllReduce(2, x.data(), 1000);
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  SetRing({0, 1});
  ExpectExactStep(3, 1000, true, "after Abort");
  if (HasFatalFailure()) return;
  // A late abort of the old ring leaves the new one alone; one of the
  // new ring stops it.
  members_[0].reducer->Abort(ring_id_ - 1);
  ExpectExactStep(4, 1000, true, "after a late abort of the old ring");
  members_[1].reducer->Abort(ring_id_);
  std::vector<float> y = Values(10, 4);
  status = members_[1].reducer->AllReduce(5, y.data(), 10);
  EXPECT_TRUE(absl::IsAborted(status)) << status;
}

// Members that disagree on n fail with InvalidArgument naming both
// lengths (one that stopped first may leave the other Unavailable).
// The chief's Abort call reaches the all-reduce of that ring (or an older
// one) through the service; one of an older ring leaves a newer one alone.
TEST_F(RingTest, AbortCallStopsTheRingsAllReduce) {
  StartServers(2);
  RingOptions options;
  options.timeout = absl::Seconds(60);
  NewRing(options);
  auto stub = Ring::NewStub(MakeChannel(members_[0].address));
  auto abort = [&stub](int64_t ring_id) {
    grpc::ClientContext ctx;
    RingAbortRequest request;
    request.set_ring_id(ring_id);
    RingAck ack;
    return stub->Abort(&ctx, request, &ack);
  };
  std::vector<float> x = Values(1000, 3);
  absl::Status status;
  const absl::Time start = absl::Now();
  std::thread reducer([&] { status = members_[0].reducer->AllReduce(1, x.data(), 1000); });
  absl::SleepFor(absl::Milliseconds(300));
  grpc::Status s = abort(ring_id_);
  EXPECT_TRUE(s.ok()) << s.error_message();
  reducer.join();
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));

  SetRing({0, 1});
  s = abort(ring_id_ - 1);  // late, for the old ring
  EXPECT_TRUE(s.ok()) << s.error_message();
  ExpectExactStep(2, 1000, true, "after an abort of the old ring");
  if (HasFatalFailure()) return;
  // Without a reducer the call does nothing.
  members_[0].service->SetReducer(nullptr);
  s = abort(ring_id_);
  EXPECT_TRUE(s.ok()) << s.error_message();
  members_[0].service->SetReducer(members_[0].reducer.get());
  ExpectExactStep(3, 1000, true, "after an abort with no reducer set");
}

TEST_F(RingTest, MismatchedBuffersAreNamed) {
  StartServers(2);
  RingOptions options;
  options.timeout = absl::Seconds(3);
  NewRing(options);
  std::vector<std::vector<float>> x = {Values(100, 1), Values(101, 2)};
  std::vector<absl::Status> s = Reduce(1, &x);
  int named = 0;
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(absl::IsInvalidArgument(s[k]) || absl::IsUnavailable(s[k]))
        << "rank " << k << ": " << s[k];
    if (!absl::IsInvalidArgument(s[k])) continue;
    ++named;
    EXPECT_THAT(std::string(s[k].message()),
                HasSubstr(k == 0 ? "a buffer of 101 values in chunks of 262144; this member "
                                   "reduces 100 values"
                                 : "a buffer of 100 values in chunks of 262144; this member "
                                   "reduces 101 values"))
        << s[k];
  }
  EXPECT_GT(named, 0);
}

TEST_F(RingTest, BadOptionsAndCallsAreRefusedNamingTheValue) {
  StartServers(1);
  RingService* service = members_[0].service.get();
  RingOptions options;
  options.wire.codec = Codec::kInt8;
  absl::StatusOr<std::unique_ptr<RingAllReducer>> r = RingAllReducer::Create(service, options);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("codec int8"));
  options.wire.codec = Codec::kTopK;
  EXPECT_THAT(std::string(RingAllReducer::Create(service, options).status().message()),
              HasSubstr("codec topk"));
  options = RingOptions{};
  options.chunk_bytes = 2;
  EXPECT_THAT(std::string(RingAllReducer::Create(service, options).status().message()),
              HasSubstr("chunk_bytes 2"));
  options = RingOptions{};
  options.timeout = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(RingAllReducer::Create(service, options).status()));

  r = RingAllReducer::Create(service, RingOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  RingAllReducer& reducer = **r;
  float v = 1.0f;
  EXPECT_TRUE(absl::IsFailedPrecondition(reducer.AllReduce(1, &v, 1)));
  absl::Status s = reducer.SetRing(1, {"a:1", "b:2"}, 2);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 2 is out of range"));
  EXPECT_TRUE(absl::IsInvalidArgument(reducer.SetRing(1, {}, 0)));
  ASSERT_TRUE(reducer.SetRing(1, {members_[0].address}, 0).ok());
  EXPECT_TRUE(reducer.AllReduce(5, &v, 1).ok());
  s = reducer.AllReduce(5, &v, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("step 5 is not above 5"));
  EXPECT_TRUE(absl::IsInvalidArgument(reducer.AllReduce(6, nullptr, 3)));

  // Malformed chunks are refused by the service.
  auto stub = Ring::NewStub(MakeChannel(members_[0].address));
  RingChunk bad;
  bad.set_ring_id(1);
  bad.set_direction(static_cast<RingDirection>(7));
  grpc::ClientContext ctx;
  RingAck ack;
  grpc::Status g = stub->Send(&ctx, bad, &ack);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(g.error_message(), HasSubstr("direction 7"));
}

// With a cluster token, a Send without it is UNAUTHENTICATED, a reducer
// without it fails naming its neighbour, and one with it works.
TEST_F(RingTest, TokenIsRequired) {
  SecurityConfig config;
  config.token = "ring-token-123";
  SetProcessSecurity(config);  // what CheckAuth compares with
  auto with_token = std::make_shared<const SecurityConfig>(config);
  StartServers(3);
  RingOptions options;
  options.rpc.security = with_token;
  NewRing(options);
  ExpectExactStep(1, 1000, true, "with the token");
  if (HasFatalFailure()) return;

  RpcOptions no_token;
  no_token.security = Plaintext();
  auto stub = Ring::NewStub(MakeChannel(members_[0].address, no_token));
  RingChunk chunk;
  chunk.set_ring_id(ring_id_);
  chunk.set_step(5);
  grpc::ClientContext ctx;
  RingAck ack;
  grpc::Status s = stub->Send(&ctx, chunk, &ack);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_EQ(members_[0].service->held(), 0);
  {
    grpc::ClientContext abort_ctx;
    RingAbortRequest abort;
    abort.set_ring_id(ring_id_);
    s = stub->Abort(&abort_ctx, abort, &ack);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    ExpectExactStep(2, 1000, true, "after an abort without the token");
    if (HasFatalFailure()) return;
  }
  {
    // The replica is no one's without the token either.
    grpc::ClientContext read_ctx;
    ReplicaRequest read;
    ShardState state;
    s = stub->GetReplica(&read_ctx, read, &state);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  }

  options.rpc.security = Plaintext();
  options.timeout = absl::Seconds(3);
  NewRing(options);
  std::vector<std::vector<float>> x = {Values(100, 1), Values(100, 2), Values(100, 3)};
  std::vector<absl::Status> status = Reduce(1, &x);
  int unauthenticated = 0;
  for (const absl::Status& st : status) {
    EXPECT_FALSE(st.ok());
    unauthenticated += absl::IsUnauthenticated(st);
  }
  EXPECT_GT(unauthenticated, 0) << status[0];
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// Mutual TLS with the token, certificates from deploy/tls/make_test_ca.sh.
TEST_F(RingTest, MutualTlsWithTokenWorks) {
  if (std::system("openssl version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no openssl on PATH to make test certificates";
  }
  const std::string dir = TempDir() + "/ring_ca";
  ASSERT_EQ(
      std::system(
          absl::StrCat("deploy/tls/make_test_ca.sh --force ", dir, " >/dev/null 2>&1").c_str()),
      0)
      << "deploy/tls/make_test_ca.sh failed";
  SecurityFlags flags;
  flags.tls_cert = dir + "/task.pem";
  flags.tls_key = dir + "/task.key";
  flags.tls_ca = dir + "/ca.pem";
  flags.auth_token_file = dir + "/token";
  absl::StatusOr<SecurityConfig> config = LoadSecurityConfig(flags, "grpc+tls", "test");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->mutual_tls());
  SetProcessSecurity(*config);
  RpcOptions rpc;
  rpc.security = std::make_shared<const SecurityConfig>(*config);
  StartServers(3, rpc);
  RingOptions options;
  options.rpc = rpc;
  options.chunk_bytes = 4096;
  NewRing(options);
  ExpectExactStep(1, 10000, true, "mutual TLS");
  ExpectExactStep(2, 10000, true, "mutual TLS");
}

}  // namespace
}  // namespace pscluster
