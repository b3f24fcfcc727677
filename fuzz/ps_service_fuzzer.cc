// Fuzz target for the parameter server's request handlers: PsService
// (ps_server/ps_service.h) over a ParameterStore, called directly with a
// null ServerContext, no gRPC in between. The input is a sequence of up to
// kMaxOps operations; each starts with a byte that picks the RPC and how
// its request is made:
//   - "raw": a length-prefixed serialized request, ParseFromArray'd
//     (skipped when it does not parse);
//   - "built": a request made from fuzzed fields around the current layout
//     (fingerprint, size, worker count, version and generation of the last
//     Init or Restore), so that valid pushes, pulls and restores are
//     reached often, not only parse errors. A built Restore usually puts
//     back a Snapshot just taken, with a few fields changed.
// Value arrays stay small (kMaxFloats, kMaxMessageBytes) so runs are fast.
//
// Never blocking: a Pull waits while the store is uninitialised or behind
// min_version (up to 10 minutes without a client deadline), so pulls go
// only to an initialised store, with min_version clamped to its version.
// A PushPull may pull for the pushed version + 1; whether that would wait
// is learned from a shadow PsService, over a shadow store, that gets every
// state-changing request first: the PushPull is sent only when the
// shadow's version after the push is high enough (or its push failed),
// else a plain Push is sent instead.
//
// Besides crashes and sanitizer reports, it aborts when a result breaks a
// contract: the two stores stay bitwise equal (the update rules are
// deterministic); counters never go back, nor the version, except through
// Restore; a repeated Init of the same layout changes nothing; a gradient
// holding NaN or Inf never changes the values, and a sync step is skipped
// exactly when one of the gradients it is made of held one; a pull returns
// the whole shard at a version no older than asked for; a push answers the
// store's version; a Snapshot put back with Restore gives the same values.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "fuzz/fuzz_input.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/ps.pb.h"
#include "ps_server/ps_service.h"
#include "update/parameter_store.h"

namespace pscluster {
namespace {

constexpr int kMaxOps = 64;
constexpr int64_t kMaxFloats = 64;         // built requests
constexpr size_t kMaxMessageBytes = 2048;  // raw requests

void Require(bool condition, const std::string& what) {
  if (condition) return;
  std::fprintf(stderr, "ps_service_fuzzer: contract broken: %s\n", what.c_str());
  std::abort();
}

// One registry for the whole run: the services only add to its metrics.
Metrics& SharedMetrics() {
  static Metrics* metrics = [] {
    absl::StatusOr<std::unique_ptr<Metrics>> m = Metrics::Start("", "ps:0", MetricsRole::kPs);
    Require(m.ok(), "Metrics::Start");
    return m->release();  // lives as long as the process, on purpose
  }();
  return *metrics;
}

// a + b, saturating: a restored version or generation may be INT64_MAX.
int64_t Add(int64_t a, int64_t b) {
  int64_t sum;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

bool AllFinite(const std::string& bytes) {
  for (size_t i = 0; i + sizeof(float) <= bytes.size(); i += sizeof(float)) {
    float f;
    std::memcpy(&f, bytes.data() + i, sizeof(f));
    if (!std::isfinite(f)) return false;
  }
  return true;
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class Harness {
 public:
  Harness()
      : service_(&store_, &SharedMetrics()),
        shadow_service_(&shadow_store_, &SharedMetrics()) {}

  void Run(FuzzInput& in) {
    for (int op = 0; op < kMaxOps && !in.empty(); ++op) {
      Before();
      bool restored = false;
      switch (in.Byte() % 16) {
        case 0: Init(BuiltInit(in)); break;
        case 1: if (InitRequest r; Parse(in, &r)) Init(r); break;
        case 2: Push(BuiltPush(in)); break;
        case 3: if (PushRequest r; Parse(in, &r)) Push(r); break;
        case 4: PushPull(BuiltPush(in)); break;
        case 5: if (PushRequest r; Parse(in, &r)) PushPull(r); break;
        case 6: Pull(BuiltPull(in), /*built=*/true); break;
        case 7: if (PullRequest r; Parse(in, &r)) Pull(r, /*built=*/false); break;
        case 8: Stats(); break;
        case 9: SetWorkers(BuiltSetWorkers(in)); break;
        case 10: if (SetWorkersRequest r; Parse(in, &r)) SetWorkers(r); break;
        case 11: Snapshot(in); break;
        case 12: restored = BuiltRestore(in); break;
        case 13: if (RestoreRequest r; Parse(in, &r)) restored = Restore(r).ok(); break;
        case 14: Push(BuiltPush(in)); break;  // pushes are the bulk of the traffic
        default: StorePull(in); break;
      }
      After(restored);
    }
  }

 private:
  template <typename Message>
  static bool Parse(FuzzInput& in, Message* message) {
    const std::string_view bytes = in.LengthPrefixed(kMaxMessageBytes);
    return message->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  }

  bool initialized() const { return store_.stats().initialized; }

  // --- Requests built from fuzzed fields -------------------------------

  uint64_t Fingerprint(FuzzInput& in) {
    switch (in.IntInRange(0, 7)) {
      case 0: return 2;
      case 1: return in.Raw<uint64_t>();
      default: return fingerprint_;
    }
  }

  // Usually the store's generation; sometimes -1 ("any", for pulls), the
  // one before or after, or anything.
  int64_t Generation(FuzzInput& in) {
    const int64_t current = store_.stats().generation;  // >= 0
    switch (in.IntInRange(0, 15)) {
      case 0: return -1;
      case 1: return Add(current, 1);
      case 2: return current - 1;
      case 3: return in.Int64();
      default: return current;
    }
  }

  // n floats: small pseudo-random values from a one-byte seed, with a few
  // elements replaced by fuzzed ones (which may be NaN, Inf, huge).
  static std::vector<float> Floats(FuzzInput& in, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    uint32_t state = in.Byte() * 2654435761u + 1;
    for (float& f : v) {
      state = state * 1664525u + 1013904223u;
      f = static_cast<float>(static_cast<int32_t>(state >> 16) - 32768) / 65536.0f;
    }
    const int64_t patches = n == 0 ? 0 : in.IntInRange(0, 3);
    for (int64_t p = 0; p < patches; ++p) {
      const int64_t i = in.IntInRange(0, n - 1);  // read before the value
      v[i] = in.Float();
    }
    return v;
  }

  // The byte count of a float array: usually whole, sometimes not.
  static void MaybeBreakLength(FuzzInput& in, std::string* bytes) {
    if (in.IntInRange(0, 15) == 0) {
      bytes->append(static_cast<size_t>(in.IntInRange(1, 3)), '\0');
    }
  }

  InitRequest BuiltInit(FuzzInput& in) {
    InitRequest r;
    r.set_layout_fingerprint(in.IntInRange(0, 3) == 0 ? in.Raw<uint64_t>()
                                                      : in.IntInRange(1, 2));
    const int64_t n = in.IntInRange(0, kMaxFloats);
    std::string values = FloatBytes(Floats(in, n));
    MaybeBreakLength(in, &values);
    r.set_values(values);
    // Shards that cover the values, or (sometimes) ones that do not.
    const int64_t shards = in.IntInRange(0, 3);
    int64_t left = n;
    for (int64_t s = 0; s < shards; ++s) {
      ShardSpec* spec = r.add_shards();
      spec->set_variable(absl::StrCat("layer", s, "/kernel"));
      spec->set_part(static_cast<int32_t>(in.IntInRange(0, 1)));
      spec->set_offset(n - left);
      const int64_t size = s + 1 == shards ? left : in.IntInRange(0, left);
      spec->set_size(size);
      left -= size;
      if (in.IntInRange(0, 15) == 0) spec->set_size(in.Int64());
    }
    static constexpr UpdateMode kModes[] = {SYNC, SYNC, ASYNC, ASYNC,
                                            UPDATE_MODE_UNSPECIFIED};
    r.set_mode(in.IntInRange(0, 15) == 0 ? static_cast<UpdateMode>(in.Raw<int8_t>())
                                         : in.Pick(kModes));
    r.set_num_workers(static_cast<int32_t>(in.IntInRange(-1, 4)));
    r.set_replicas_to_aggregate(static_cast<int32_t>(in.IntInRange(-1, 5)));
    static constexpr NonFinitePolicy kPolicies[] = {NONFINITE_REJECT, NONFINITE_SKIP_STEP};
    r.set_nonfinite(in.IntInRange(0, 15) == 0 ? static_cast<NonFinitePolicy>(in.Raw<int8_t>())
                                              : in.Pick(kPolicies));
    r.set_generation(in.IntInRange(0, 7) == 0 ? in.IntInRange(-1, 2) : 0);
    OptimizerConfig* o = r.mutable_optimizer();
    static constexpr const char* kNames[] = {"sgd", "momentum", "adam", "", "Adam"};
    o->set_name(in.IntInRange(0, 7) == 0 ? kNames[3 + in.IntInRange(0, 1)]
                                         : kNames[in.IntInRange(0, 2)]);
    // Each option is valid, or (one time in eight) anything.
    auto option = [&in](float valid) { return in.IntInRange(0, 7) == 0 ? in.Float() : valid; };
    o->set_learning_rate(option(0.1f));
    o->set_momentum(option(0.9f));
    o->set_beta1(option(0.9f));
    o->set_beta2(option(0.999f));
    o->set_epsilon(option(1e-7f));
    o->set_decay_rate(option(0.5f));
    o->set_decay_steps(in.IntInRange(-1, 3));
    return r;
  }

  PushRequest BuiltPush(FuzzInput& in) {
    PushRequest r;
    r.set_layout_fingerprint(Fingerprint(in));
    r.set_worker_index(static_cast<int32_t>(in.IntInRange(-1, num_workers_)));
    const int64_t version = store_.stats().version;
    r.set_version(in.IntInRange(0, 15) == 0 ? in.Int64()
                                            : Add(version, in.IntInRange(-3, 1)));
    r.set_request_id(in.IntInRange(0, 15) == 0 ? in.Raw<uint64_t>() : in.IntInRange(0, 3));
    r.set_num_examples(in.IntInRange(0, 15) == 0 ? in.Raw<int32_t>()
                                                 : static_cast<int32_t>(in.IntInRange(-1, 32)));
    int64_t n = num_floats_;
    if (in.IntInRange(0, 15) == 0) n = in.IntInRange(0, kMaxFloats);
    std::string gradients = FloatBytes(Floats(in, n));
    MaybeBreakLength(in, &gradients);
    r.set_gradients(gradients);
    r.set_generation(Generation(in));
    static constexpr const char* kDtypes[] = {"", "", "", "float32", "bfloat16"};
    r.set_dtype(in.Pick(kDtypes));
    return r;
  }

  PullRequest BuiltPull(FuzzInput& in) {
    PullRequest r;
    r.set_layout_fingerprint(Fingerprint(in));
    r.set_min_version(Add(store_.stats().version, -in.IntInRange(0, 3)));
    r.set_worker_index(static_cast<int32_t>(in.IntInRange(-1, num_workers_)));
    r.set_generation(Generation(in));
    return r;
  }

  SetWorkersRequest BuiltSetWorkers(FuzzInput& in) {
    SetWorkersRequest r;
    r.set_layout_fingerprint(Fingerprint(in));
    int64_t n = num_workers_;
    if (in.IntInRange(0, 15) == 0) n = in.IntInRange(0, 5);
    const uint8_t bits = in.Byte();
    for (int64_t w = 0; w < n; ++w) r.add_active(w >= 8 || ((bits >> w) & 1) == 0);
    return r;
  }

  // --- Calls --------------------------------------------------------------

  void Init(const InitRequest& r) {
    const bool was_initialized = initialized();
    InitResponse shadow_resp, resp;
    const grpc::Status shadow = shadow_service_.control().Init(nullptr, &r, &shadow_resp);
    const grpc::Status s = service_.control().Init(nullptr, &r, &resp);
    Require(s.error_code() == shadow.error_code(), "Init: stores answer differently");
    if (!s.ok()) return;
    Require(resp.already_initialized() == was_initialized,
            absl::StrCat("Init: already_initialized ", resp.already_initialized(),
                         " on a store initialised ", was_initialized));
    if (was_initialized) {
      Require(values_before_ == PeekValues(), "a repeated Init changed the values");
      return;
    }
    Adopt(r);
    Require(PeekValues() == r.values(), "Init: values not as sent");
  }

  void Push(const PushRequest& r) {
    PushResponse shadow_resp, resp;
    const grpc::Status shadow = shadow_service_.data().Push(nullptr, &r, &shadow_resp);
    const grpc::Status s = service_.data().Push(nullptr, &r, &resp);
    CheckPush(r, shadow, s, resp);
  }

  void PushPull(const PushRequest& r) {
    PushResponse shadow_resp;
    const grpc::Status shadow = shadow_service_.data().Push(nullptr, &r, &shadow_resp);
    // Whatever the mode, a pull for version + 1 or less returns at once.
    // (Version INT64_MAX has no next step: the ps refuses such a PushPull
    // before its push, where the shadow's Push answers otherwise.)
    const bool would_wait = r.version() == std::numeric_limits<int64_t>::max() ||
                            (shadow.ok() && shadow_store_.stats().version < r.version() + 1);
    if (would_wait) {  // its pull half might wait for a step that never comes
      PushResponse resp;
      const grpc::Status s = service_.data().Push(nullptr, &r, &resp);
      CheckPush(r, shadow, s, resp);
      return;
    }
    // Its pull half may still be refused (another generation: a push
    // answered from its first answer after a Restore; a bad pull dtype).
    // The shadow's pull, for no worker so that no delta state moves, says
    // so without changing anything.
    grpc::Status expected = shadow;
    if (shadow.ok()) {
      PullRequest p;
      p.set_layout_fingerprint(r.layout_fingerprint());
      p.set_generation(r.generation());
      p.set_dtype(r.pull_dtype());
      p.set_codec_min_elements(r.codec_min_elements());
      p.set_worker_index(-1);
      p.set_min_version(std::numeric_limits<int64_t>::min());
      PullResponse ignored;
      expected = shadow_service_.data().Pull(nullptr, &p, &ignored);
    }
    PushPullResponse resp;
    const grpc::Status s = service_.data().PushPull(nullptr, &r, &resp);
    CheckPush(r, expected, s, resp.push());
    if (s.ok()) CheckPulled(std::numeric_limits<int64_t>::min(), resp.pull());
  }

  void Pull(PullRequest r, bool built) {
    if (!initialized()) return;  // it would wait for an Init
    const int64_t version = store_.stats().version;
    if (r.min_version() > version) r.set_min_version(version);
    PullResponse resp;
    const grpc::Status s = service_.data().Pull(nullptr, &r, &resp);
    if (built && r.layout_fingerprint() == fingerprint_ &&
        (r.generation() < 0 || r.generation() == store_.stats().generation)) {
      Require(s.ok(), absl::StrCat("Pull of the right layout and generation failed: ",
                                   s.error_message()));
    }
    if (s.ok()) CheckPulled(r.min_version(), resp);
  }

  void Stats() {
    PsStatsRequest r;
    PsStatsResponse resp;
    Require(service_.data().GetStats(nullptr, &r, &resp).ok(), "GetStats failed");
    const StoreStats st = store_.stats();
    Require(resp.version() == st.version && resp.generation() == st.generation &&
                resp.initialized() == st.initialized,
            "GetStats disagrees with the store");
  }

  void SetWorkers(const SetWorkersRequest& r) {
    SetWorkersResponse shadow_resp, resp;
    const grpc::Status shadow = shadow_service_.control().SetWorkers(nullptr, &r, &shadow_resp);
    const grpc::Status s = service_.control().SetWorkers(nullptr, &r, &resp);
    Require(s.error_code() == shadow.error_code(), "SetWorkers: stores answer differently");
    if (!s.ok()) return;
    Require(resp.version() == store_.stats().version, "SetWorkers: version");
    // A worker taken out has its gradient for the current step discarded.
    for (int w = 0; w < r.active_size(); ++w) {
      if (!r.active(w)) step_gradients_.erase(w);
    }
  }

  // Takes a snapshot; a built Restore may put it back.
  void Snapshot(FuzzInput& in) {
    SnapshotRequest r;
    r.set_layout_fingerprint(Fingerprint(in));
    ShardState state;
    const grpc::Status s = service_.control().Snapshot(nullptr, &r, &state);
    if (!s.ok()) return;
    Require(state.values() == PeekValues() && state.version() == store_.stats().version,
            "Snapshot differs from the store");
    snapshot_ = state;
    have_snapshot_ = true;
  }

  // Puts back the last snapshot (taking one first if needed) under the
  // last Init's configuration, with the generation raised as the chief
  // does; sometimes with a field or two changed.
  bool BuiltRestore(FuzzInput& in) {
    RestoreRequest r;
    *r.mutable_init() = last_init_;
    if (!have_snapshot_ || in.IntInRange(0, 3) == 0) {
      SnapshotRequest sr;
      sr.set_layout_fingerprint(fingerprint_);
      have_snapshot_ = service_.control().Snapshot(nullptr, &sr, &snapshot_).ok();
    }
    if (have_snapshot_) {
      *r.mutable_state() = snapshot_;
    } else {  // nothing to snapshot yet: a state made from a built Init
      *r.mutable_init() = BuiltInit(in);
      ShardState& state = *r.mutable_state();
      state.set_layout_fingerprint(r.init().layout_fingerprint());
      *state.mutable_shards() = r.init().shards();
      state.set_values(r.init().values());
    }
    ShardState& state = *r.mutable_state();
    state.set_generation(Add(store_.stats().generation, 1));
    static constexpr const char* kSlots[] = {"m", "v", "momentum", "x"};
    switch (in.IntInRange(0, 15)) {
      case 0: state.set_version(in.Int64()); break;
      case 1: state.set_version(Add(state.version(), in.IntInRange(-2, 2))); break;
      case 2: state.set_generation(in.Int64()); break;
      case 3: state.set_optimizer_iterations(in.Int64()); break;
      case 4: if (state.slots_size() > 0) state.mutable_slots()->RemoveLast(); break;
      case 5: state.add_slots()->set_name(in.Pick(kSlots)); break;
      case 6: state.set_values(FloatBytes(Floats(in, in.IntInRange(0, kMaxFloats)))); break;
      case 7: r.mutable_init()->set_num_workers(static_cast<int32_t>(in.IntInRange(-1, 4))); break;
      case 8: r.mutable_init()->set_mode(ASYNC); break;
      case 9: if (state.shards_size() > 0) state.mutable_shards(0)->set_part(7); break;
      case 10: state.set_layout_fingerprint(Fingerprint(in)); break;
      default: break;
    }
    const ShardState sent = r.state();
    if (!Restore(r).ok()) return false;
    Require(PeekValues() == sent.values() && store_.stats().version == sent.version() &&
                store_.stats().generation == sent.generation(),
            "Restore: the store does not hold the state sent");
    return true;
  }

  // Sends a Restore to both services; the layout follows it.
  grpc::Status Restore(const RestoreRequest& r) {
    RestoreResponse shadow_resp, resp;
    const grpc::Status shadow = shadow_service_.control().Restore(nullptr, &r, &shadow_resp);
    const grpc::Status s = service_.control().Restore(nullptr, &r, &resp);
    Require(s.error_code() == shadow.error_code(), "Restore: stores answer differently");
    if (s.ok()) {
      InitRequest init = r.init();
      init.set_values(r.state().values());
      Adopt(init);
    }
    return s;
  }

  // The store's own Pull, with a deadline already past: the paths a pull
  // takes when its wait ends (DeadlineExceeded, Unavailable, Aborted).
  void StorePull(FuzzInput& in) {
    const uint64_t fingerprint = Fingerprint(in);
    const int64_t min_version = in.IntInRange(0, 7) == 0
                                    ? in.Int64()
                                    : Add(store_.stats().version, in.IntInRange(-1, 2));
    const int64_t generation = Generation(in);
    std::string values;
    int64_t version = 0;
    const absl::Status s = store_.Pull(fingerprint, min_version, absl::Now(), &values,
                                       &version, generation);
    if (s.ok()) {
      Require(version >= min_version, "store Pull: version below min_version");
      Require(static_cast<int64_t>(values.size()) == num_floats_ * 4,
              "store Pull: wrong size");
    } else {
      Require(absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s) ||
                  absl::IsFailedPrecondition(s) || absl::IsAborted(s),
              absl::StrCat("store Pull: ", s.ToString()));
    }
  }

  // --- Checks ---------------------------------------------------------------

  // The layout requests are built around from now on.
  void Adopt(const InitRequest& r) {
    step_gradients_.clear();  // a fresh store, or a restored one
    last_init_ = r;
    last_init_.clear_values();
    fingerprint_ = r.layout_fingerprint();
    num_floats_ = static_cast<int64_t>(r.values().size() / sizeof(float));
    num_workers_ = r.num_workers();
  }

  // The values, or "" when uninitialised or of another layout. Never waits
  // (the deadline is past).
  static std::string Peek(ParameterStore& store, uint64_t fingerprint) {
    std::string values;
    int64_t version = 0;
    if (!store.Pull(fingerprint, std::numeric_limits<int64_t>::min(), absl::InfinitePast(),
                    &values, &version)
             .ok()) {
      return "";
    }
    return values;
  }
  std::string PeekValues() { return Peek(store_, fingerprint_); }

  void CheckPush(const PushRequest& r, const grpc::Status& shadow, const grpc::Status& s,
                 const PushResponse& resp) {
    Require(s.error_code() == shadow.error_code(),
            absl::StrCat("Push: stores answer differently: ", s.error_message(), " / ",
                         shadow.error_message()));
    // A repeated request id is answered with its first answer, which may
    // name an older version.
    const StoreStats now = store_.stats();
    if (s.ok() && now.pushes_duplicate == stats_before_.pushes_duplicate) {
      Require(resp.version() == now.version, "Push: answered version is not the store's");
      // Sync: an accepted gradient belongs to the current step.
      if (resp.applied() && store_.is_sync()) {
        step_gradients_[r.worker_index()] = AllFinite(r.gradients());
      }
    }
    if (!AllFinite(r.gradients())) {
      Require(PeekValues() == values_before_,
              "a gradient holding NaN or Inf changed the values");
    }
  }

  void CheckPulled(int64_t min_version, const PullResponse& resp) {
    Require(resp.version() >= min_version,
            absl::StrCat("pulled version ", resp.version(), " < min_version ", min_version));
    Require(static_cast<int64_t>(resp.values().size()) == num_floats_ * 4,
            absl::StrCat("pulled ", resp.values().size(), " bytes of a ", num_floats_,
                         "-float shard"));
  }

  void Before() {
    stats_before_ = store_.stats();
    values_before_ = PeekValues();
  }

  void After(bool restored) {
    const StoreStats a = store_.stats();
    const StoreStats b = shadow_store_.stats();
    Require(a.version == b.version && a.generation == b.generation &&
                a.initialized == b.initialized && a.pushes_applied == b.pushes_applied &&
                a.pushes_dropped_stale == b.pushes_dropped_stale &&
                a.pushes_duplicate == b.pushes_duplicate &&
                a.steps_applied == b.steps_applied && a.staleness_sum == b.staleness_sum &&
                a.steps_skipped_nonfinite == b.steps_skipped_nonfinite &&
                a.active_workers == b.active_workers,
            "the store and its shadow disagree after the same requests");
    Require(service_.shard().pushes_rejected() == shadow_service_.shard().pushes_rejected(),
            "the service and its shadow counted different refused pushes");
    Require(PeekValues() == Peek(shadow_store_, fingerprint_),
            "the store's values differ from its shadow's");
    const StoreStats& p = stats_before_;
    Require(restored || a.version >= p.version, "the version went back without a Restore");
    // Sync, skip policy: a step is skipped exactly when one of the
    // gradients it is made of holds NaN or Inf.
    if (!restored && a.steps_applied == p.steps_applied + 1 && store_.is_sync()) {
      bool nonfinite = false;
      for (const auto& [worker, finite] : step_gradients_) nonfinite = nonfinite || !finite;
      const bool skipped = a.steps_skipped_nonfinite > p.steps_skipped_nonfinite;
      Require(skipped == nonfinite,
              absl::StrCat("a sync step was ", skipped ? "" : "not ",
                           "skipped as non-finite, but ", nonfinite ? "one" : "none",
                           " of its gradients held NaN or Inf"));
    }
    if (a.steps_applied != p.steps_applied) step_gradients_.clear();
    // A Restore that continues another store (a backup's seed, a
    // restarted primary's continuation) takes that store's counters.
    Require(restored || (a.pushes_applied >= p.pushes_applied &&
                         a.pushes_dropped_stale >= p.pushes_dropped_stale &&
                         a.pushes_duplicate >= p.pushes_duplicate &&
                         a.steps_applied >= p.steps_applied &&
                         a.steps_skipped_nonfinite >= p.steps_skipped_nonfinite),
            "a counter went back");
  }

  ParameterStore store_;
  ParameterStore shadow_store_;
  PsService service_;
  PsService shadow_service_;

  // The layout of the last successful Init (of an empty store) or Restore.
  InitRequest last_init_;  // without values
  uint64_t fingerprint_ = 0;
  int64_t num_floats_ = 0;
  int num_workers_ = 0;

  ShardState snapshot_;
  bool have_snapshot_ = false;

  // Sync: worker -> whether its gradient for the current step is finite
  // (the gradients a step will be made of, as far as the replies tell).
  std::map<int, bool> step_gradients_;

  StoreStats stats_before_;
  std::string values_before_;
};

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Raw requests often hold invalid UTF-8 in string fields; protobuf logs
  // each, which only slows the run (ParseFromArray's result says it all).
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  pscluster::FuzzInput in(data, size);
  pscluster::Harness harness;
  harness.Run(in);
  return 0;
}
