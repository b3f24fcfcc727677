#include "wire/ps_client.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/io/coded_stream.h"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

// finish() asks for the ps to be called again (an injected fault, or a ps
// of an older generation than wanted).
absl::Status CallAgain(const std::string& why) { return absl::UnavailableError(why); }

// The tables and ids of `rows` (their values left out) appended to *out:
// what a ps is asked to send rows for.
void AddIdsOnly(const std::vector<SparseRows>& rows,
                google::protobuf::RepeatedPtrField<SparseRows>* out) {
  for (const SparseRows& r : rows) {
    SparseRows* x = out->Add();
    x->set_table(r.table());
    *x->mutable_ids() = r.ids();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const ClusterSpec& cluster, const Placement* placement,
    const PsClientOptions& options) {
  // The placement's ps are the first it counts of the cluster's: all of
  // them, or fewer while the chief drains and adds ps (--min_ps).
  if (placement->num_ps < 1 || cluster.num_tasks(kPsJob) < placement->num_ps) {
    return absl::InvalidArgumentError(absl::StrCat("the cluster lists ", cluster.num_tasks(kPsJob),
                                                   " ps tasks but the shards are placed over ",
                                                   placement->num_ps));
  }
  std::unique_ptr<PsClient> c(new PsClient());
  c->options_ = options;
  c->placement_ = placement;
  for (int index : cluster.task_indices(kPsJob)) {
    if (static_cast<int>(c->ps_.size()) == placement->num_ps) break;
    absl::StatusOr<std::string> address = cluster.address(kPsJob, index);
    if (!address.ok()) return address.status();
    PerPs p;
    c->Connect(p, *address);
    p.pull_req.set_layout_fingerprint(placement->fingerprint);
    p.pull_req.set_worker_index(-1);
    p.push_req.set_layout_fingerprint(placement->fingerprint);
    p.rows_req.set_layout_fingerprint(placement->fingerprint);
    if (options.transport == TRANSPORT_TCP) {
      for (int k : placement->shards_of_ps[c->ps_.size()]) {
        const Shard& sh = placement->shards[k];
        if (!p.runs.empty() && p.runs.back().first + p.runs.back().second == sh.offset) {
          p.runs.back().second += sh.size;
        } else {
          p.runs.emplace_back(sh.offset, sh.size);
        }
      }
    }
    c->ps_.push_back(std::move(p));
  }
  c->change_pulls_ = options.worker_index >= 0 && PullsChanges(options.pull_codec.codec);
  if (c->change_pulls_) {
    for (PerPs& p : c->ps_) {
      p.pull_req.set_worker_index(options.worker_index);
      p.pull_req.set_delta_reset(true);
    }
  }
  c->pull_base_.assign(c->ps_.size(), 0);
  c->versions_.assign(c->ps_.size(), 0);
  c->generations_.assign(c->ps_.size(), 0);
  int64_t largest = 0;
  for (int64_t n : placement->floats_of_ps) largest = std::max(largest, n);
  c->wire_.resize(largest);
  if (HasErrorFeedback(options.push_codec.codec)) {
    int64_t total = 0;
    for (const Shard& sh : placement->shards) total = std::max(total, sh.offset + sh.size);
    c->feedback_ = std::make_unique<ErrorFeedback>(total);
  }
  // Request ids only need to be unique per worker; a random base keeps a
  // restarted worker's ids apart from its previous life's.
  c->next_request_id_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  return c;
}

void PsClient::Connect(PerPs& p, const std::string& address) {
  p.address = address;
  p.data.reset();
  p.stub = ParameterServer::NewStub(MakeChannel(address, options_.rpc));
  if (options_.transport == TRANSPORT_TCP) {
    // Asks the ps for its data port before every dial.
    p.data = std::make_unique<DataChannel>(
        address, DataPortFromStats(p.stub.get(), address),
        options_.rpc.security ? options_.rpc.security : ProcessSecurity(), options_.stop);
  }
}

bool PsClient::Relocate(int i) {
  if (!options_.locate) return false;
  const std::string address = options_.locate(i);
  if (address.empty() || address == ps_[i].address) return false;
  spdlog::warn("ps:{}'s shards are served at {} now (were at {}): calling there", i, address,
               ps_[i].address);
  Connect(ps_[i], address);
  return true;
}

void PsClient::ResetErrorFeedback() {
  if (feedback_ != nullptr) feedback_->Reset();
}

int64_t PsClient::version() const {
  return versions_.empty() ? 0 : *std::min_element(versions_.begin(), versions_.end());
}

int64_t PsClient::generation() const {
  for (int64_t g : generations_) {
    if (g != generations_.front()) return -1;
  }
  return generations_.empty() ? 0 : generations_.front();
}

grpc::ClientContext* PsClient::Attempt::Context() {
  if (ctx == nullptr) {
    ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(deadline));
  }
  return ctx.get();
}

absl::Status PsClient::CallAll(const std::string& what, absl::Duration timeout,
                               const IssueFn& issue,
                               const std::function<absl::Status(int)>& finish) {
  last_call_ = CallStats();
  const absl::Time start = absl::Now();
  absl::Status s = CallAllRetrying(what, start, timeout, issue, finish);
  last_call_.duration = absl::Now() - start;
  return s;
}

absl::Status PsClient::CallAllRetrying(const std::string& what, absl::Time start,
                                       absl::Duration timeout, const IssueFn& issue,
                                       const std::function<absl::Status(int)>& finish) {
  // The retry loop around one call to every ps at once: issue, gather the
  // answers as they arrive, sort each failure (retry, moved shards, give up)
  // and back off. Kept in one piece (134 lines): the per-ps state (done,
  // attempts, last status) lives across the loop's rounds.
  const absl::Time give_up = start + timeout;
  const int n = static_cast<int>(ps_.size());
  std::vector<bool> done(n, false);
  std::vector<int> attempts(n, 0);
  std::vector<grpc::Status> last(n);
  // Made at the first retry: seeding its generator costs more than a
  // small call's own work.
  std::optional<Backoff> backoff;
  while (true) {
    if (options_.stop != nullptr && *options_.stop) {
      return absl::CancelledError(absl::StrCat(what, " the ps: stop requested"));
    }
    std::vector<grpc::Status> status(n);
    std::unique_ptr<std::atomic<bool>[]> status_arrived(new std::atomic<bool>[n]);
    for (int i = 0; i < n; ++i) status_arrived[i] = false;
    std::vector<Attempt> attempt(n);
    const int pending = static_cast<int>(std::count(done.begin(), done.end(), false));
    absl::Notification all_answered;
    std::atomic<int> outstanding{pending};
    const absl::Time deadline =
        std::min(absl::Now() + options_.retry.attempt_timeout,
                 std::max(give_up, absl::Now() + absl::Milliseconds(100)));
    int last_pending = -1;
    for (int i = 0; i < n; ++i) {
      if (!done[i]) last_pending = i;
    }
    for (int i = 0; i < n; ++i) {
      if (done[i]) continue;
      attempt[i].deadline = deadline;
      attempt[i].last = i == last_pending;
      if (attempts[i] > 0) ++resends_;
      ++attempts[i];
      issue(i, attempt[i],
            [&status, &status_arrived, &outstanding, &all_answered, i](grpc::Status s) {
              status[i] = std::move(s);
              status_arrived[i] = true;
              if (--outstanding == 0) all_answered.Notify();
            });
    }
    // A sync push-pull may wait long for the other workers: look at the
    // stop flag meanwhile, and cancel what is in flight when it turns.
    // With a locate, shards that moved end the wait early:
    // - a ps whose call failed (every 0.1 s while it is failed): its
    //   shards moved, so the calls still waiting are cancelled and the
    //   round sent again, to it where it is now. They may wait on it: a
    //   sync step waits for its decider, whose backup took over. A resent
    //   push keeps its request id and is answered as it was.
    // - a call still waiting (once a second), which may be to a ps cut off
    //   from the network (no answer, no error until the attempt's
    //   deadline): cancelled, to be sent where the shards are now.
    absl::Time next_moved_check = absl::Now() + absl::Seconds(1);
    auto cancel = [&attempt](int i) {
      if (attempt[i].ctx) attempt[i].ctx->TryCancel();
      if (attempt[i].channel != nullptr) attempt[i].channel->Cancel();
    };
    auto shards_moved = [this](int i) {
      const std::string address = options_.locate(i);
      return !address.empty() && address != ps_[i].address;
    };
    while (!all_answered.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      if (options_.locate) {
        bool failed_moved = false;
        for (int i = 0; i < n && !failed_moved; ++i) {
          failed_moved =
              !done[i] && status_arrived[i].load() && !status[i].ok() && shards_moved(i);
        }
        if (failed_moved) {
          for (int i = 0; i < n; ++i) {
            if (!done[i] && !status_arrived[i].load()) cancel(i);
          }
        } else if (absl::Now() >= next_moved_check) {
          for (int i = 0; i < n; ++i) {
            if (!done[i] && !status_arrived[i].load() && shards_moved(i)) cancel(i);
          }
          next_moved_check = absl::Now() + absl::Seconds(1);
        }
      }
      if (options_.stop != nullptr && *options_.stop) {
        for (int i = 0; i < n; ++i) cancel(i);
        all_answered.WaitForNotification();  // the cancelled calls still answer
        break;
      }
    }
    if (options_.stop != nullptr && *options_.stop) {
      return absl::CancelledError(absl::StrCat(what, " the ps: stop requested"));
    }
    for (int i = 0; i < n; ++i) {
      if (done[i]) continue;
      if (status[i].ok()) {
        absl::Status f = finish(i);
        if (f.ok()) {
          done[i] = true;
          continue;
        }
        if (!absl::IsUnavailable(f)) return f;
        status[i] = ToGrpcStatus(f);
      }
      last[i] = status[i];
      const std::string target = absl::StrCat(what, " ps:", i, " (", ps_[i].address, ")");
      // This client cancels its calls only when told to stop (checked
      // above): a CANCELLED now came from the ps, a server going away
      // (shut down with the call still waiting), and is retried like any
      // ps that is down, not taken for a stop.
      const bool server_cancelled = status[i].error_code() == grpc::StatusCode::CANCELLED;
      if (!IsRetryable(status[i]) && !server_cancelled) {
        return FromGrpcStatus(status[i], target);
      }
      if (absl::Now() >= give_up) {
        return RetryExhausted(target, absl::Now() - start, attempts[i], last[i]);
      }
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) {
      return absl::OkStatus();
    }
    const absl::Time wake =
        absl::Now() + std::min((backoff ? *backoff : backoff.emplace(options_.retry)).Next(),
                               std::max(give_up - absl::Now(), absl::ZeroDuration()));
    // A ps that moved (a backup promoted in its place) is called again at
    // once, wherever it is now.
    absl::Time next_locate = absl::Now();
    bool moved = false;
    while (absl::Now() < wake && !moved && !(options_.stop != nullptr && *options_.stop)) {
      if (options_.locate && absl::Now() >= next_locate) {
        for (int i = 0; i < n; ++i) {
          if (!done[i] && Relocate(i)) moved = true;
        }
        next_locate = absl::Now() + absl::Milliseconds(100);
        if (moved) break;
      }
      absl::SleepFor(std::min(absl::Milliseconds(50), wake - absl::Now()));
    }
  }
}

absl::Status PsClient::PullAll(int64_t min_version, float* params, absl::Duration timeout,
                               int64_t generation) {
  auto issue = [&](int i, Attempt& a, std::function<void(grpc::Status)> done) {
    grpc::ClientContext* ctx = a.Context();
    // Without a locate, a ps that is down is waited for; with one, its
    // call fails at once and is asked where the ps is now.
    ctx->set_wait_for_ready(!options_.locate);
    ps_[i].pull_req.set_min_version(min_version);
    ps_[i].pull_req.set_generation(-1);
    last_call_.bytes_sent += static_cast<int64_t>(ps_[i].pull_req.ByteSizeLong());
    ps_[i].stub->async()->Pull(ctx, &ps_[i].pull_req, &ps_[i].pull_resp, std::move(done));
  };
  auto finish = [&](int i) -> absl::Status {
    const PullResponse& r = ps_[i].pull_resp;
    last_call_.bytes_received += static_cast<int64_t>(r.ByteSizeLong());
    if (generation >= 0 && r.generation() != generation) {
      return CallAgain(absl::StrCat("generation ", r.generation(), ", waiting for ",
                                    generation, " (a restore is under way)"));
    }
    const std::string& v = r.values();
    if (static_cast<int64_t>(v.size()) != placement_->floats_of_ps[i] * 4) {
      return absl::InternalError(absl::StrCat(
          "ps ", i, " (", ps_[i].address, ") sent ", v.size(), " bytes; expected ",
          placement_->floats_of_ps[i] * 4));
    }
    ScatterFromPs(*placement_, i, reinterpret_cast<const float*>(v.data()), params);
    pull_base_[i] = r.delta_seq();  // change pulls: these weights are the base
    versions_[i] = r.version();
    generations_[i] = r.generation();
    return absl::OkStatus();
  };
  return CallAll("pull from", timeout, issue, finish);
}

bool PsClient::TakeNextRows(std::vector<std::vector<SparseRows>>* rows) {
  if (sparse_next_ == nullptr || rows->size() != ps_.size()) return false;
  for (size_t i = 0; i < ps_.size(); ++i) {
    const PushPullResponse& r = ps_[i].push_resp;
    const std::vector<SparseRows>& want = (*rows)[i];
    if (r.next_rows_size() != static_cast<int>(want.size())) return false;
    for (int t = 0; t < r.next_rows_size(); ++t) {
      if (r.next_rows(t).table() != want[t].table() ||
          r.next_rows(t).ids_size() != want[t].ids_size()) {
        return false;
      }
    }
  }
  for (size_t i = 0; i < ps_.size(); ++i) {
    PushPullResponse& r = ps_[i].push_resp;
    for (int t = 0; t < r.next_rows_size(); ++t) {
      (*rows)[i][t].set_values(std::move(*r.mutable_next_rows(t)->mutable_values()));
    }
  }
  return true;
}

absl::Status PsClient::PullRowsAll(int64_t min_version, int64_t generation,
                                   std::vector<std::vector<SparseRows>>* rows,
                                   absl::Duration timeout, std::vector<int64_t>* row_versions) {
  row_versions->assign(ps_.size(), 0);
  auto issue = [&](int i, Attempt& a, std::function<void(grpc::Status)> done) {
    grpc::ClientContext* ctx = a.Context();
    ctx->set_wait_for_ready(!options_.locate);
    PullRowsRequest& req = ps_[i].rows_req;
    req.set_min_version(min_version);
    req.set_generation(generation);
    req.clear_rows();
    AddIdsOnly((*rows)[i], req.mutable_rows());
    last_call_.bytes_sent += static_cast<int64_t>(req.ByteSizeLong());
    ps_[i].stub->async()->PullRows(ctx, &req, &ps_[i].rows_resp, std::move(done));
  };
  auto finish = [&](int i) -> absl::Status {
    PullRowsResponse& r = ps_[i].rows_resp;
    last_call_.bytes_received += static_cast<int64_t>(r.ByteSizeLong());
    if (r.rows_size() != static_cast<int>((*rows)[i].size())) {
      return absl::InternalError(absl::StrCat("ps ", i, " (", ps_[i].address, ") sent ",
                                              r.rows_size(), " tables' rows; asked for ",
                                              (*rows)[i].size()));
    }
    for (int t = 0; t < r.rows_size(); ++t) {
      (*rows)[i][t].set_values(std::move(*r.mutable_rows(t)->mutable_values()));
    }
    (*row_versions)[i] = r.version();
    return absl::OkStatus();
  };
  return CallAll("pull rows from", timeout, issue, finish);
}

int64_t PsClient::EncodedPushBytes(int i) const {
  const CodecOptions exact;
  int64_t bytes = 0;
  for (int k : placement_->shards_of_ps[i]) {
    const Shard& sh = placement_->shards[k];
    bytes += EncodedBytes(sh.moving_statistic ? exact : options_.push_codec, sh.size);
  }
  return bytes;
}

absl::StatusOr<size_t> PsClient::StreamGradient(int i, const float* grads,
                                                const Overlap& overlap, size_t have,
                                                absl::Time deadline) {
  PerPs& p = ps_[i];
  std::string* g = p.push_req.mutable_gradients();
  if (g->size() > have) return g->size();  // a resend: encoded once, sent again
  const std::vector<int>& order = placement_->shards_of_ps[i];
  if (p.shards_streamed == order.size()) return g->size();
  const Shard& next = placement_->shards[order[order.size() - 1 - p.shards_streamed]];
  if (absl::Status w = overlap.ready->WaitFinalFrom(next.offset, deadline); !w.ok()) {
    if (absl::IsAborted(w)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the gradient was not computed: ", w.message()));
    }
    return w;  // DeadlineExceeded: the attempt is retried
  }
  // This shard and every other one final by now, last first.
  const CodecOptions exact;
  while (p.shards_streamed < order.size()) {
    const Shard& sh = placement_->shards[order[order.size() - 1 - p.shards_streamed]];
    if (!overlap.ready->FinalFrom(sh.offset)) break;
    const CodecOptions& o = sh.moving_statistic ? exact : options_.push_codec;
    if (feedback_ != nullptr && !sh.moving_statistic) {
      feedback_->Encode(o, grads + sh.offset, sh.offset, sh.size, g, &p.topk);
    } else {
      Encode(o, grads + sh.offset, sh.size, g);
    }
    ++p.shards_streamed;
  }
  return g->size();
}

absl::Status PsClient::PullArrived(int i, float* params, const Overlap& overlap, bool write,
                                   size_t have) {
  PerPs& p = ps_[i];
  if (have == 0) {  // an answer begins (again, when the call was resent)
    if (p.shards_pulled > 0) pull_torn_ = true;
    p.shards_pulled = 0;
    p.pulled_bytes = 0;
    if (!p.answered) {
      p.answered = true;
      p.first_applied = p.push_resp.push().applied();
      if (answered_.fetch_add(1) + 1 == static_cast<int>(ps_.size()) && overlap.answered) {
        overlap.answered(ps_[0].first_applied);
      }
    }
    // Read into the weights themselves from here on (PayloadRuns): not
    // before the step that reads them is done.
    if (write && p.scattered && overlap.params_free != nullptr) {
      overlap.params_free->WaitForNotification();
    }
    return absl::OkStatus();
  }
  if (!write) return absl::OkStatus();
  if (p.scattered) {
    // fp32 weights in place already: mark the shards now whole.
    const std::vector<int>& order = placement_->shards_of_ps[i];
    while (p.shards_pulled < order.size()) {
      const Shard& sh = placement_->shards[order[p.shards_pulled]];
      const int64_t bytes = sh.size * static_cast<int64_t>(sizeof(float));
      if (p.pulled_bytes + bytes > static_cast<int64_t>(have)) break;
      p.pulled_bytes += bytes;
      ++p.shards_pulled;
      if (overlap.arrived != nullptr) overlap.arrived->MarkArrived(sh.offset, sh.offset + sh.size);
    }
    return absl::OkStatus();
  }
  if (overlap.params_free != nullptr) overlap.params_free->WaitForNotification();
  return WritePulledShards(i, absl::string_view(p.push_resp.pull().values()).substr(0, have),
                           /*delta=*/false, params, overlap.arrived);
}

absl::Status PsClient::WritePulledShards(int i, absl::string_view values, bool delta,
                                         float* params, ParamsWatermark* arrived) {
  PerPs& p = ps_[i];
  const std::vector<int>& order = placement_->shards_of_ps[i];
  const CodecOptions exact;
  while (p.shards_pulled < order.size()) {
    const Shard& sh = placement_->shards[order[p.shards_pulled]];
    const CodecOptions& o = sh.moving_statistic ? exact : options_.pull_codec;
    const int64_t bytes = EncodedBytes(o, sh.size);
    if (p.pulled_bytes + bytes > static_cast<int64_t>(values.size())) break;
    absl::string_view in = values.substr(p.pulled_bytes, bytes);
    const bool add = delta && EffectiveCodec(o, sh.size) != Codec::kFloat32;
    float* w = params + sh.offset;
    absl::Status d = add ? DecodeAdd(o, &in, sh.size, w) : Decode(o, &in, sh.size, w);
    if (!d.ok()) {
      return absl::InternalError(
          absl::StrCat("ps ", i, " sent ", sh.variable, ": ", d.message()));
    }
    p.pulled_bytes += bytes;
    ++p.shards_pulled;
    if (arrived != nullptr) arrived->MarkArrived(sh.offset, sh.offset + sh.size);
  }
  return absl::OkStatus();
}

absl::Status PsClient::PushPullAll(int worker, int num_examples,
                                   const float* grads, float* params,
                                   absl::Duration timeout, const Overlap* overlap,
                                   int64_t chunk) {
  PushCall c;
  c.worker = worker;
  c.chunk = chunk;
  c.num_examples = num_examples;
  c.grads = grads;
  c.params = params;
  c.overlap = overlap;
  // Streamed over the tcp data plane; gRPC takes the whole gradient.
  c.streamed = overlap != nullptr && ps_[0].data != nullptr;
  if (overlap != nullptr && !c.streamed) {
    absl::Status w = overlap->ready->WaitFinalFrom(0, absl::InfiniteFuture());
    if (!w.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the gradient was not computed: ", w.message()));
    }
  }
  const uint64_t request_id = ++next_request_id_;
  ++pushes_sent_;
  c.fault = options_.faults != nullptr ? options_.faults->ForPush(pushes_sent_)
                                       : PushFaults::Fault::kNone;
  c.answers.assign(ps_.size(), 0);
  c.step = version();
  // Priority pulls write the weights as they arrive; change pulls wait to
  // be whole.
  c.pull_early = c.streamed && overlap->arrived != nullptr && !change_pulls_;
  c.sink = c.streamed && (overlap->arrived != nullptr || overlap->answered);
  // fp32 over the data plane, without overlap: the gradient is sent from
  // where it lies and the weights are read into place.
  c.in_place = ps_[0].data != nullptr && overlap == nullptr &&
               options_.push_codec.codec == Codec::kFloat32 &&
               options_.pull_codec.codec == Codec::kFloat32;
  // The tcp data plane's frames carry a header beside each message.
  c.framing = ps_[0].data ? static_cast<int64_t>(sizeof(FrameHeader)) : 0;
  answered_ = 0;
  pull_torn_ = false;
  for (PerPs& p : ps_) {
    p.answered = false;
    p.shards_pulled = 0;
    p.scattered = false;
  }
  for (int i = 0; i < static_cast<int>(ps_.size()); ++i) PreparePush(i, c, request_id);
  absl::Status s = CallAll(
      "push to", timeout,
      [&](int i, Attempt& a, std::function<void(grpc::Status)> done) {
        IssuePush(i, c, a, std::move(done));
      },
      [&](int i) { return TakePushAnswer(i, c); });
  if (overlap != nullptr && overlap->arrived != nullptr) {
    if (s.ok()) {
      overlap->arrived->MarkAllArrived();  // change pulls, and over gRPC
    } else {
      overlap->arrived->Fail(std::string(s.message()));
    }
  }
  if (!s.ok()) return s;
  TallyPushOutcome(c.step);
  return absl::OkStatus();
}

void PsClient::PreparePush(int i, const PushCall& c, uint64_t request_id) {
  PushRequest& req = ps_[i].push_req;
  req.set_worker_index(c.worker);
  req.set_version(options_.sync ? c.step : versions_[i]);
  req.set_generation(generations_[i]);
  req.set_request_id(request_id);
  req.set_num_examples(c.num_examples);
  if (c.chunk >= 0) {
    req.set_chunk(c.chunk);
  } else {
    req.clear_chunk();
  }
  req.clear_sparse();
  if (sparse_push_ != nullptr) {
    for (const SparseRows& r : (*sparse_push_)[i]) {
      if (r.ids_size() > 0) *req.add_sparse() = r;
    }
  }
  req.clear_next_rows();
  if (sparse_next_ != nullptr) AddIdsOnly((*sparse_next_)[i], req.mutable_next_rows());
  std::string* g = req.mutable_gradients();
  req.set_shards_reversed(c.streamed);
  if (c.streamed) {
    // StreamGradient encodes the shards, last first, as backprop makes
    // them final; the same bytes go again if the call is resent.
    g->clear();
    const int64_t bytes = EncodedPushBytes(i);
    g->reserve(bytes);
    ps_[i].stream_size = bytes;
    ps_[i].shards_streamed = 0;
    if (options_.push_codec.codec != Codec::kFloat32) {
      req.set_dtype(CodecName(options_.push_codec.codec));
    }
  } else if (c.in_place) {
    g->clear();  // sent from c.grads (IssuePush)
  } else if (options_.push_codec.codec == Codec::kFloat32) {
    g->resize(placement_->floats_of_ps[i] * sizeof(float));
    GatherForPs(*placement_, i, c.grads, reinterpret_cast<float*>(g->data()));
  } else {
    // Shard by shard, in the ps's order, as the ps decodes them; moving
    // statistics exact. Encoded once per push: a resend repeats these
    // bytes, so error feedback counts each gradient once.
    g->clear();
    g->reserve(EncodedPushBytes(i));
    const CodecOptions exact;
    for (int k : placement_->shards_of_ps[i]) {
      const Shard& sh = placement_->shards[k];
      const CodecOptions& o = sh.moving_statistic ? exact : options_.push_codec;
      if (feedback_ != nullptr && !sh.moving_statistic) {
        feedback_->Encode(o, c.grads + sh.offset, sh.offset, sh.size, g);
      } else {
        Encode(o, c.grads + sh.offset, sh.size, g);
      }
    }
    req.set_dtype(CodecName(options_.push_codec.codec));
  }
  req.set_codec_min_elements(
      std::max(options_.push_codec.min_elements, options_.pull_codec.min_elements));
  if (options_.pull_codec.codec != Codec::kFloat32) {
    req.set_pull_dtype(CodecName(options_.pull_codec.codec));
  }
  req.set_pull_base(change_pulls_ ? pull_base_[i] : 0);
}

void PsClient::IssuePush(int i, const PushCall& c, Attempt& a,
                         std::function<void(grpc::Status)> done) {
  PerPs& p = ps_[i];
  if (p.data == nullptr) {
    last_call_.bytes_sent += static_cast<int64_t>(p.push_req.ByteSizeLong()) + c.framing;
    p.stub->async()->PushPull(a.Context(), &p.push_req, &p.push_resp, std::move(done));
    return;
  }
  a.channel = p.data.get();
  PayloadSource source;
  PayloadSink answer;
  PayloadRuns runs;
  if (c.streamed) {
    // The message as it will be once the whole gradient is in.
    const int64_t now = static_cast<int64_t>(p.push_req.gradients().size());
    last_call_.bytes_sent += static_cast<int64_t>(p.push_req.ByteSizeLong()) - now +
                             static_cast<int64_t>(p.stream_size) + c.framing;
    source.size = p.stream_size;
    const float* grads = c.grads;
    const Overlap* overlap = c.overlap;
    source.more = [this, i, grads, overlap](size_t have, absl::Time deadline) {
      return StreamGradient(i, grads, *overlap, have, deadline);
    };
    if (c.sink) {
      float* params = c.params;
      const bool pull_early = c.pull_early;
      answer.arrived = [this, i, params, overlap, pull_early](size_t have) {
        return PullArrived(i, params, *overlap, pull_early, have);
      };
    }
    if (c.pull_early && options_.pull_codec.codec == Codec::kFloat32) {
      // fp32 weights read into place as they arrive (PullArrived marks them).
      for (const auto& [offset, size] : p.runs) {
        runs.to.emplace_back(reinterpret_cast<char*>(c.params + offset),
                             static_cast<size_t>(size) * sizeof(float));
      }
      runs.scattered = &p.scattered;
    }
  } else if (c.in_place) {
    // The message as if the gradient were in it: field 6, its length, the bytes.
    const int64_t bytes = placement_->floats_of_ps[i] * static_cast<int64_t>(sizeof(float));
    last_call_.bytes_sent +=
        static_cast<int64_t>(p.push_req.ByteSizeLong()) + c.framing +
        (bytes > 0 ? 1 + static_cast<int64_t>(
                             google::protobuf::io::CodedOutputStream::VarintSize64(bytes)) +
                         bytes
                   : 0);
    for (const auto& [offset, size] : p.runs) {
      runs.from.emplace_back(reinterpret_cast<const char*>(c.grads + offset),
                             static_cast<size_t>(size) * sizeof(float));
      runs.to.emplace_back(reinterpret_cast<char*>(c.params + offset),
                           static_cast<size_t>(size) * sizeof(float));
    }
    runs.scattered = &p.scattered;
  } else {
    last_call_.bytes_sent += static_cast<int64_t>(p.push_req.ByteSizeLong()) + c.framing;
  }
  if (a.last && !(options_.sync && options_.locate)) {
    // The last call of the round is made here: no hand-off to the
    // channel's thread and back. Not in sync with a locate: the call waits
    // for its step, which may wait for a ps whose shards moved, and the
    // calling thread must be free to see that (CallAllRetrying).
    done(p.data->PushPull(&p.push_req, &p.push_resp, a.deadline, std::move(source),
                          std::move(answer), std::move(runs)));
    return;
  }
  p.data->StartPushPull(&p.push_req, &p.push_resp, a.deadline, std::move(done),
                        std::move(source), std::move(answer), std::move(runs));
}

absl::Status PsClient::TakePushAnswer(int i, PushCall& c) {
  ++c.answers[i];
  if (c.answers[i] == 1 && c.fault == PushFaults::Fault::kLoseReply) {
    return CallAgain("injected fault: reply lost");
  }
  if (c.answers[i] == 1 && c.fault == PushFaults::Fault::kDuplicate) {
    return CallAgain("injected fault: push duplicated");
  }
  last_call_.bytes_received += static_cast<int64_t>(ps_[i].push_resp.ByteSizeLong()) + c.framing;
  if (ps_[i].scattered) {
    // The weights read into place, as if they were in the message.
    const int64_t bytes = placement_->floats_of_ps[i] * static_cast<int64_t>(sizeof(float));
    last_call_.bytes_received +=
        1 + static_cast<int64_t>(google::protobuf::io::CodedOutputStream::VarintSize64(bytes)) +
        bytes;
  }
  last_call_.staleness = std::max(last_call_.staleness, ps_[i].push_resp.push().staleness());
  if (c.overlap != nullptr && c.overlap->params_free != nullptr) {
    c.overlap->params_free->WaitForNotification();  // the step reading params is done
  }
  const PullResponse& pull = ps_[i].push_resp.pull();
  if (c.in_place && ps_[i].scattered) {
    // Read into c.params already (DataChannel's PayloadRuns).
  } else if (!c.pull_early &&
      (options_.pull_codec.codec == Codec::kFloat32 || (change_pulls_ && !pull.delta()))) {
    // The weights in fp32 (change pulls without a common base too: the
    // ps restarted, ...).
    if (static_cast<int64_t>(pull.values().size()) != placement_->floats_of_ps[i] * 4) {
      return absl::InternalError(absl::StrCat("ps ", i, " sent ", pull.values().size(),
                                              " bytes of weights"));
    }
    ScatterFromPs(*placement_, i, reinterpret_cast<const float*>(pull.values().data()),
                  c.params);
  } else {
    // Shard by shard, in the ps's order: written as they arrived
    // (PullArrived), or now.
    if (!c.pull_early) {
      ps_[i].shards_pulled = 0;
      ps_[i].pulled_bytes = 0;
      if (absl::Status w = WritePulledShards(i, pull.values(), pull.delta(), c.params, nullptr);
          !w.ok()) {
        return w;
      }
    }
    const int64_t sent = c.pull_early && ps_[i].scattered
                             ? placement_->floats_of_ps[i] * static_cast<int64_t>(sizeof(float))
                             : static_cast<int64_t>(pull.values().size());
    if (ps_[i].shards_pulled != placement_->shards_of_ps[i].size() ||
        ps_[i].pulled_bytes != sent) {
      return absl::InternalError(absl::StrCat("ps ", i, " sent ", sent, " bytes of weights; ",
                                              ps_[i].pulled_bytes, " of them were whole shards"));
    }
  }
  versions_[i] = pull.version();
  generations_[i] = pull.generation();
  pull_base_[i] = pull.delta_seq();
  return absl::OkStatus();
}

void PsClient::TallyPushOutcome(int64_t step) {
  last_push_applied_ = ps_[0].push_resp.push().applied();
  if (!last_push_applied_) ++pushes_dropped_;
  for (size_t i = 1; i < ps_.size(); ++i) {
    if (ps_[i].push_resp.push().applied() != last_push_applied_) {
      ++pushes_disputed_;
      spdlog::warn("ps:0 {} this worker's gradient of version {} but ps:{} {} it",
                   last_push_applied_ ? "applied" : "dropped", step, i,
                   last_push_applied_ ? "dropped" : "applied");
      break;
    }
  }
}

}  // namespace pscluster
