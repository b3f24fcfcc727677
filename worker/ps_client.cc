#include "worker/ps_client.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

bool Retryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const ClusterSpec& cluster, const Placement* placement,
    const RpcOptions& options) {
  if (cluster.num_tasks(kPsJob) != placement->num_ps) {
    return absl::InvalidArgumentError(
        absl::StrCat("the cluster lists ", cluster.num_tasks(kPsJob),
                     " ps tasks but the training plan has ", placement->num_ps));
  }
  std::unique_ptr<PsClient> c(new PsClient());
  c->placement_ = placement;
  int i = 0;
  for (int index : cluster.task_indices(kPsJob)) {
    absl::StatusOr<std::string> address = cluster.address(kPsJob, index);
    if (!address.ok()) return address.status();
    PerPs p;
    p.address = *address;
    p.stub = ParameterServer::NewStub(MakeChannel(*address, options));
    p.pull_req.set_layout_fingerprint(placement->fingerprint);
    p.push_req.set_layout_fingerprint(placement->fingerprint);
    c->ps_.push_back(std::move(p));
    ++i;
  }
  c->versions_.assign(c->ps_.size(), 0);
  int64_t largest = 0;
  for (int64_t n : placement->floats_of_ps) largest = std::max(largest, n);
  c->wire_.resize(largest);
  // Request ids only need to be unique per worker; a random base keeps a
  // restarted worker's ids apart from its previous life's.
  c->next_request_id_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  return c;
}

int64_t PsClient::version() const {
  return versions_.empty() ? 0 : *std::min_element(versions_.begin(), versions_.end());
}

absl::Status PsClient::PullAll(int64_t min_version, float* params,
                               absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  const int n = static_cast<int>(ps_.size());
  std::vector<bool> done(n, false);
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    std::vector<grpc::Status> status(n);
    std::vector<std::unique_ptr<grpc::ClientContext>> ctx(n);
    int pending = static_cast<int>(std::count(done.begin(), done.end(), false));
    absl::BlockingCounter counter(pending);
    for (int i = 0; i < n; ++i) {
      if (done[i]) continue;
      ctx[i] = std::make_unique<grpc::ClientContext>();
      ctx[i]->set_deadline(absl::ToChronoTime(
          std::max(absl::Now() + absl::Seconds(1), give_up)));
      ctx[i]->set_wait_for_ready(true);
      ps_[i].pull_req.set_min_version(min_version);
      ps_[i].stub->async()->Pull(ctx[i].get(), &ps_[i].pull_req, &ps_[i].pull_resp,
                                 [&status, &counter, i](grpc::Status s) {
                                   status[i] = std::move(s);
                                   counter.DecrementCount();
                                 });
    }
    counter.Wait();
    for (int i = 0; i < n; ++i) {
      if (done[i]) continue;
      if (status[i].ok()) {
        const std::string& v = ps_[i].pull_resp.values();
        if (static_cast<int64_t>(v.size()) != placement_->floats_of_ps[i] * 4) {
          return absl::InternalError(absl::StrCat(
              "ps ", i, " (", ps_[i].address, ") sent ", v.size(), " bytes; expected ",
              placement_->floats_of_ps[i] * 4));
        }
        ScatterFromPs(*placement_, i, reinterpret_cast<const float*>(v.data()), params);
        versions_[i] = ps_[i].pull_resp.version();
        done[i] = true;
      } else if (!Retryable(status[i]) || absl::Now() >= give_up) {
        return FromGrpcStatus(status[i],
                              absl::StrCat("pull from ps:", i, " (", ps_[i].address, ")"));
      }
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) {
      return absl::OkStatus();
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

absl::Status PsClient::PushPullAll(int worker, int num_examples, bool last,
                                   const float* grads, float* params,
                                   absl::Duration timeout) {
  const int n = static_cast<int>(ps_.size());
  const uint64_t request_id = ++next_request_id_;
  std::vector<grpc::Status> status(n);
  std::vector<grpc::ClientContext> ctx(n);
  absl::BlockingCounter counter(n);
  for (int i = 0; i < n; ++i) {
    PushRequest& req = ps_[i].push_req;
    req.set_worker_index(worker);
    req.set_version(versions_[i]);
    req.set_request_id(request_id);
    req.set_num_examples(num_examples);
    req.set_last(last);
    std::string* g = req.mutable_gradients();
    g->resize(placement_->floats_of_ps[i] * sizeof(float));
    GatherForPs(*placement_, i, grads, reinterpret_cast<float*>(g->data()));
    ctx[i].set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    auto done = [&status, &counter, i](grpc::Status s) {
      status[i] = std::move(s);
      counter.DecrementCount();
    };
    if (last) {
      ps_[i].stub->async()->Push(&ctx[i], &req, ps_[i].push_resp.mutable_push(), done);
    } else {
      ps_[i].stub->async()->PushPull(&ctx[i], &req, &ps_[i].push_resp, done);
    }
  }
  counter.Wait();
  for (int i = 0; i < n; ++i) {
    if (!status[i].ok()) {
      return FromGrpcStatus(status[i],
                            absl::StrCat("push to ps:", i, " (", ps_[i].address, ")"));
    }
    if (!ps_[i].push_resp.push().applied()) ++pushes_dropped_;
    if (last) continue;
    const PullResponse& pull = ps_[i].push_resp.pull();
    if (static_cast<int64_t>(pull.values().size()) != placement_->floats_of_ps[i] * 4) {
      return absl::InternalError(absl::StrCat("ps ", i, " sent ", pull.values().size(),
                                              " bytes of weights"));
    }
    ScatterFromPs(*placement_, i, reinterpret_cast<const float*>(pull.values().data()),
                  params);
    versions_[i] = pull.version();
  }
  return absl::OkStatus();
}

}  // namespace pscluster
