#include "chief/snapshot.h"

#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

std::vector<float> BytesToFloats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

}  // namespace

Checkpoint ToCheckpoint(const Snapshot& snap, const ModelSpec& spec, UpdateMode mode) {
  Checkpoint c;
  c.step = snap.step;
  c.metadata["model"] = spec.name;
  c.metadata["mode"] = mode == SYNC ? "sync" : "async";
  c.metadata["generation"] = absl::StrCat(snap.generation);
  c.metadata["done_chunks"] = snap.done_chunks;
  c.metadata["chunks_per_epoch"] = absl::StrCat(snap.chunks_per_epoch);
  c.metadata["num_ps"] = absl::StrCat(snap.ps.size());
  c.metadata["run_started_unix_ms"] = absl::StrCat(snap.run_started_unix_ms);
  for (size_t i = 0; i < snap.ps.size(); ++i) {
    const ShardState& s = snap.ps[i];
    const std::string prefix = absl::StrCat("ps", i);
    c.metadata[prefix + "/version"] = absl::StrCat(s.version());
    c.metadata[prefix + "/optimizer_iterations"] = absl::StrCat(s.optimizer_iterations());
    c.metadata[prefix + "/layout"] = absl::StrCat(s.layout_fingerprint());
    NamedTensor values;
    values.name = prefix + "/values";
    values.values = BytesToFloats(s.values());
    values.shape = {static_cast<int64_t>(values.values.size())};
    c.tensors.push_back(std::move(values));
    for (const SlotValues& slot : s.slots()) {
      NamedTensor t;
      t.name = absl::StrCat(prefix, "/slot/", slot.name());
      t.values = BytesToFloats(slot.values());
      t.shape = {static_cast<int64_t>(t.values.size())};
      c.tensors.push_back(std::move(t));
    }
  }
  return c;
}

absl::StatusOr<Snapshot> FromCheckpoint(const Checkpoint& c, const Placement& placement) {
  auto meta = [&](const std::string& key) -> absl::StatusOr<std::string> {
    auto it = c.metadata.find(key);
    if (it == c.metadata.end()) {
      return absl::DataLossError(absl::StrCat("checkpoint of step ", c.step, " lacks ", key));
    }
    return it->second;
  };
  // Signed (versions, counts) or unsigned (the layout fingerprint, a
  // uint64 whose top bit is often set).
  auto parse = [&](const std::string& key, auto* n) -> absl::Status {
    absl::StatusOr<std::string> v = meta(key);
    if (!v.ok()) return v.status();
    if (!absl::SimpleAtoi(*v, n)) {
      return absl::DataLossError(absl::StrCat("checkpoint ", key, " '", *v, "' is not a number"));
    }
    return absl::OkStatus();
  };
  auto number = [&](const std::string& key) -> absl::StatusOr<int64_t> {
    int64_t n = 0;
    if (absl::Status s = parse(key, &n); !s.ok()) return s;
    return n;
  };
  Snapshot snap;
  snap.step = c.step;
  absl::StatusOr<int64_t> num_ps = number("num_ps");
  absl::StatusOr<int64_t> generation = number("generation");
  absl::StatusOr<int64_t> chunks = number("chunks_per_epoch");
  absl::StatusOr<std::string> done = meta("done_chunks");
  for (const absl::Status& s :
       {num_ps.status(), generation.status(), chunks.status(), done.status()}) {
    if (!s.ok()) return s;
  }
  if (*num_ps != placement.num_ps) {
    return absl::FailedPreconditionError(absl::StrCat("the checkpoint of step ", c.step, " holds ",
                                                      *num_ps, " ps; the cluster has ",
                                                      placement.num_ps));
  }
  snap.generation = *generation;
  snap.chunks_per_epoch = static_cast<int>(*chunks);
  snap.done_chunks = *done;
  // Optional: checkpoints written before it was recorded lack it.
  if (absl::StatusOr<int64_t> started = number("run_started_unix_ms"); started.ok()) {
    snap.run_started_unix_ms = *started;
  }
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : c.tensors) by_name[t.name] = &t;
  for (int i = 0; i < placement.num_ps; ++i) {
    const std::string prefix = absl::StrCat("ps", i);
    ShardState s;
    s.set_layout_fingerprint(placement.fingerprint);
    absl::StatusOr<int64_t> version = number(prefix + "/version");
    absl::StatusOr<int64_t> iterations = number(prefix + "/optimizer_iterations");
    uint64_t layout = 0;
    const absl::Status layout_status = parse(prefix + "/layout", &layout);
    for (const absl::Status& st : {version.status(), iterations.status(), layout_status}) {
      if (!st.ok()) return st;
    }
    if (layout != placement.fingerprint) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint of step ", c.step,
                       " has another variable layout (model, ps count "
                       "or --min_shard_bytes changed)"));
    }
    s.set_version(*version);
    s.set_generation(snap.generation);
    s.set_optimizer_iterations(*iterations);
    for (const auto& [name, t] : by_name) {
      if (name == prefix + "/values") {
        s.set_values(t->values.data(), t->values.size() * sizeof(float));
      } else if (name.rfind(prefix + "/slot/", 0) == 0) {
        SlotValues* slot = s.add_slots();
        slot->set_name(name.substr(prefix.size() + 6));
        slot->set_values(t->values.data(), t->values.size() * sizeof(float));
      }
    }
    if (static_cast<int64_t>(s.values().size()) != placement.floats_of_ps[i] * 4) {
      return absl::DataLossError(absl::StrCat(
          "the checkpoint of step ", c.step, " holds ", s.values().size() / 4, " values for ps:", i,
          "; the placement gives it ", placement.floats_of_ps[i]));
    }
    snap.ps.push_back(std::move(s));
  }
  return snap;
}

absl::StatusOr<Snapshot> ReshardSnapshot(const Snapshot& snap, const Placement& from,
                                         const Placement& to) {
  if (static_cast<int>(snap.ps.size()) != from.num_ps) {
    return absl::InvalidArgumentError(absl::StrCat("the snapshot holds ", snap.ps.size(),
                                                   " ps; its placement has ", from.num_ps));
  }
  int64_t total = 0;
  for (int64_t n : from.floats_of_ps) total += n;
  // Each kind of tensor (the values, then each slot) whole, then split.
  auto whole = [&](auto bytes_of) -> absl::StatusOr<std::vector<float>> {
    std::vector<float> flat(total);
    for (int i = 0; i < from.num_ps; ++i) {
      const std::string* bytes = bytes_of(snap.ps[i]);
      if (bytes == nullptr ||
          static_cast<int64_t>(bytes->size()) != from.floats_of_ps[i] * 4) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ps", i, " of the snapshot of step ", snap.step, " does not hold its ",
            from.floats_of_ps[i], " values"));
      }
      std::vector<float> wire(from.floats_of_ps[i]);
      if (!wire.empty()) std::memcpy(wire.data(), bytes->data(), bytes->size());
      ScatterFromPs(from, i, wire.data(), flat.data());
    }
    return flat;
  };
  Snapshot out = snap;
  out.ps.assign(to.num_ps, ShardState());
  auto split = [&](const std::vector<float>& flat, auto set) {
    for (int j = 0; j < to.num_ps; ++j) {
      std::vector<float> wire(to.floats_of_ps[j]);
      GatherForPs(to, j, flat.data(), wire.data());
      set(out.ps[j], wire);
    }
  };
  absl::StatusOr<std::vector<float>> values =
      whole([](const ShardState& s) { return &s.values(); });
  if (!values.ok()) return values.status();
  split(*values, [](ShardState& s, const std::vector<float>& w) {
    s.set_values(w.data(), w.size() * sizeof(float));
  });
  const ShardState& first = snap.ps.empty() ? ShardState::default_instance() : snap.ps[0];
  for (const SlotValues& slot : first.slots()) {
    const std::string name = slot.name();
    absl::StatusOr<std::vector<float>> flat = whole([&name](const ShardState& s) {
      for (const SlotValues& v : s.slots()) {
        if (v.name() == name) return &v.values();
      }
      return static_cast<const std::string*>(nullptr);
    });
    if (!flat.ok()) return flat.status();
    split(*flat, [&name](ShardState& s, const std::vector<float>& w) {
      SlotValues* v = s.add_slots();
      v->set_name(name);
      v->set_values(w.data(), w.size() * sizeof(float));
    });
  }
  for (ShardState& s : out.ps) {
    s.set_layout_fingerprint(to.fingerprint);
    s.set_version(snap.step);
    s.set_generation(snap.generation);
    s.set_optimizer_iterations(first.optimizer_iterations());
  }
  return out;
}

absl::StatusOr<Snapshot> FromCheckpointFor(const Checkpoint& c, const ModelSpec& spec,
                                           int64_t min_shard_bytes, const Placement& placement) {
  auto it = c.metadata.find("num_ps");
  int64_t num_ps = 0;
  if (it == c.metadata.end() || !absl::SimpleAtoi(it->second, &num_ps) ||
      num_ps == placement.num_ps) {
    return FromCheckpoint(c, placement);  // its own errors, if any
  }
  if (num_ps < 1 || num_ps > 1 << 16) {
    return absl::DataLossError(
        absl::StrCat("the checkpoint of step ", c.step, " says it holds ", num_ps, " ps"));
  }
  PlacementOptions popt;
  popt.min_shard_bytes = min_shard_bytes;
  const Placement theirs = PlaceVariables(spec, static_cast<int>(num_ps), popt);
  absl::StatusOr<Snapshot> snap = FromCheckpoint(c, theirs);
  if (!snap.ok()) return snap.status();
  return ReshardSnapshot(*snap, theirs, placement);
}

}  // namespace pscluster
