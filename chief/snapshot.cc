#include "chief/snapshot.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/sparse_layout.h"

namespace pscluster {
namespace {

std::vector<float> BytesToFloats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// Table t of ps `prefix` ("ps<i>") as checkpoint tensors: "<prefix>/sparse<t>/ids",
// ".../rows" and ".../last_update". A state whose sizes disagree gives tensors
// that SerializeSafetensors refuses, naming the tensor.
void AddSparseTable(const std::string& prefix, int t, const SparseTableState& table,
                    Checkpoint* c) {
  const std::string name = absl::StrCat(prefix, "/sparse", t);
  const int64_t n = table.ids_size();
  c->metadata[name + "/table"] = absl::StrCat(table.table());
  NamedTensor ids{name + "/ids", {n}, {}};
  ids.dtype = NamedTensor::Dtype::kI64;
  ids.ints.assign(table.ids().begin(), table.ids().end());
  NamedTensor rows{name + "/rows", {n, table.floats_per_row()}, BytesToFloats(table.rows())};
  NamedTensor last_update{name + "/last_update", {table.last_update_size()}, {}};
  last_update.dtype = NamedTensor::Dtype::kI64;
  last_update.ints.assign(table.last_update().begin(), table.last_update().end());
  c->tensors.push_back(std::move(ids));
  c->tensors.push_back(std::move(rows));
  c->tensors.push_back(std::move(last_update));
}

// The tensor `name` of `c`, which must have `dtype` and `rank` dimensions;
// DataLoss naming it otherwise.
absl::StatusOr<const NamedTensor*> SparseTensor(
    const Checkpoint& c, const std::map<std::string, const NamedTensor*>& by_name,
    const std::string& name, NamedTensor::Dtype dtype, size_t rank) {
  auto it = by_name.find(name);
  if (it == by_name.end()) {
    return absl::DataLossError(absl::StrCat("checkpoint of step ", c.step, " lacks ", name));
  }
  const NamedTensor& t = *it->second;
  if (t.dtype != dtype || t.shape.size() != rank) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint of step ", c.step, ": ", name, " is ", DtypeName(t.dtype), " [",
        absl::StrJoin(t.shape, ", "), "]; ", DtypeName(dtype), " of rank ", rank, " is needed"));
  }
  return &t;
}

// Sparse table t of ps `prefix` from its tensors (AddSparseTable's), its
// table number `table`: DataLoss naming the tensor when one is missing,
// another dtype or shape, or the ids are not increasing.
absl::StatusOr<SparseTableState> ReadSparseTable(
    const Checkpoint& c, const std::map<std::string, const NamedTensor*>& by_name,
    const std::string& prefix, int t, int table) {
  const std::string name = absl::StrCat(prefix, "/sparse", t);
  absl::StatusOr<const NamedTensor*> ids =
      SparseTensor(c, by_name, name + "/ids", NamedTensor::Dtype::kI64, 1);
  absl::StatusOr<const NamedTensor*> rows =
      SparseTensor(c, by_name, name + "/rows", NamedTensor::Dtype::kF32, 2);
  absl::StatusOr<const NamedTensor*> last_update =
      SparseTensor(c, by_name, name + "/last_update", NamedTensor::Dtype::kI64, 1);
  for (const absl::Status& s : {ids.status(), rows.status(), last_update.status()}) {
    if (!s.ok()) return s;
  }
  const int64_t n = (*ids)->shape[0];
  if ((*rows)->shape[0] != n || (*last_update)->shape[0] != n) {
    return absl::DataLossError(
        absl::StrCat("checkpoint of step ", c.step, ": ", name, "/ids holds ", n, " ids but ", name,
                     "/rows has shape [", absl::StrJoin((*rows)->shape, ", "), "] and ", name,
                     "/last_update ", (*last_update)->shape[0], " values"));
  }
  const std::vector<int64_t>& id = (*ids)->ints;
  for (size_t k = 1; k < id.size(); ++k) {
    if (id[k] <= id[k - 1]) {
      return absl::DataLossError(absl::StrCat("checkpoint of step ", c.step, ": ", name,
                                              "/ids are not increasing: ", id[k - 1], " then ",
                                              id[k]));
    }
  }
  SparseTableState out;
  out.set_table(table);
  out.mutable_ids()->Assign(id.begin(), id.end());
  out.set_rows((*rows)->values.data(), (*rows)->values.size() * sizeof(float));
  out.mutable_last_update()->Assign((*last_update)->ints.begin(), (*last_update)->ints.end());
  out.set_floats_per_row((*rows)->shape[1]);
  return out;
}

// The sparse tables of `from` (any number of ps) split again over `to`'s
// ps by RowOwner: every table is on every ps of `to`, in table order, its
// ids increasing. InvalidArgument naming the ps and table when a table's
// sizes disagree, its rows have two widths, or an id is on two ps.
absl::Status ReshardSparse(const std::vector<ShardState>& from, std::vector<ShardState>* to) {
  // One held row: its id, and where it is (ps, table state, index).
  struct Row {
    int64_t id;
    int ps;
    const SparseTableState* state;
    int index;
  };
  struct Table {
    int64_t floats_per_row = 0;
    std::vector<Row> rows;
  };
  std::map<int, Table> tables;
  for (size_t i = 0; i < from.size(); ++i) {
    for (const SparseTableState& st : from[i].sparse()) {
      const std::string where = absl::StrCat("ps", i, "'s sparse table ", st.table());
      Table& table = tables[st.table()];
      const int64_t n = st.ids_size();
      if (st.floats_per_row() != 0 && table.floats_per_row != 0 &&
          st.floats_per_row() != table.floats_per_row) {
        return absl::InvalidArgumentError(absl::StrCat(where, " has ", st.floats_per_row(),
                                                       " floats per row; another ps has ",
                                                       table.floats_per_row));
      }
      if (st.floats_per_row() != 0) table.floats_per_row = st.floats_per_row();
      if (st.last_update_size() != n ||
          static_cast<int64_t>(st.rows().size()) != n * st.floats_per_row() * 4) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " holds ", n, " ids, ", st.last_update_size(), " last updates and ",
                         st.rows().size(), " bytes of rows of ", st.floats_per_row(), " floats"));
      }
      for (int k = 0; k < n; ++k) {
        table.rows.push_back({st.ids(k), static_cast<int>(i), &st, k});
      }
    }
  }
  const int num_ps = static_cast<int>(to->size());
  if (num_ps == 0 && !tables.empty()) {
    return absl::InvalidArgumentError("no ps to hold the sparse tables");
  }
  for (auto& [number, table] : tables) {
    std::sort(table.rows.begin(), table.rows.end(), [](const Row& a, const Row& b) {
      return std::tie(a.id, a.ps) < std::tie(b.id, b.ps);
    });
    std::vector<SparseTableState*> out(num_ps);
    for (int j = 0; j < num_ps; ++j) {
      out[j] = (*to)[j].add_sparse();
      out[j]->set_table(number);
      out[j]->set_floats_per_row(table.floats_per_row);
    }
    const size_t row_bytes = table.floats_per_row * sizeof(float);
    for (size_t k = 0; k < table.rows.size(); ++k) {
      const Row& r = table.rows[k];
      if (k > 0 && table.rows[k - 1].id == r.id) {
        return absl::InvalidArgumentError(absl::StrCat("row ", r.id, " of sparse table ", number,
                                                       " is on ps", table.rows[k - 1].ps, " and ps",
                                                       r.ps));
      }
      SparseTableState* dst = out[RowOwner(number, r.id, num_ps)];
      dst->add_ids(r.id);
      dst->add_last_update(r.state->last_update(r.index));
      dst->mutable_rows()->append(r.state->rows(), r.index * row_bytes, row_bytes);
    }
  }
  return absl::OkStatus();
}

// A shard of a placement as the ps holding it sends it: its range of the
// flat parameters, that ps, and where on that ps's wire it starts.
struct WireRange {
  int64_t offset = 0;
  int64_t size = 0;
  int ps = 0;
  int64_t wire = 0;
};

// Every shard of `p` as a WireRange, by offset.
std::vector<WireRange> WireRanges(const Placement& p) {
  std::vector<WireRange> out;
  for (int i = 0; i < p.num_ps; ++i) {
    int64_t wire = 0;
    for (int k : p.shards_of_ps[i]) {
      out.push_back({p.shards[k].offset, p.shards[k].size, i, wire});
      wire += p.shards[k].size;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const WireRange& a, const WireRange& b) { return a.offset < b.offset; });
  return out;
}

// Ps `ps` of `to`'s wire bytes (into `wire`) copied from the old ps's
// (`old[i]`, laid out as `ranges`, WireRanges of the old placement).
// InvalidArgument when a parameter of `to` is in no old shard.
absl::Status GatherRanges(const std::vector<WireRange>& ranges, const std::vector<const char*>& old,
                          const Placement& to, int ps, char* wire) {
  for (int k : to.shards_of_ps[ps]) {
    const Shard& sh = to.shards[k];
    int64_t at = sh.offset;
    const int64_t end = sh.offset + sh.size;
    // The old shard holding `at`: the last one starting at or before it;
    // then the next ones, while the new shard goes on.
    size_t r = std::upper_bound(ranges.begin(), ranges.end(), at,
                                [](int64_t x, const WireRange& w) { return x < w.offset; }) -
               ranges.begin();
    for (; at < end; ++r) {
      if (r == 0 || r > ranges.size() || ranges[r - 1].offset > at ||
          ranges[r - 1].offset + ranges[r - 1].size <= at) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter ", at, " (", sh.variable, ") is in no shard of the snapshot's placement"));
      }
      const WireRange& w = ranges[r - 1];
      const int64_t n = std::min(end, w.offset + w.size) - at;
      std::memcpy(wire, old[w.ps] + (w.wire + at - w.offset) * sizeof(float), n * sizeof(float));
      wire += n * sizeof(float);
      at += n;
    }
  }
  return absl::OkStatus();
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
  // Only where it is not 0: checkpoints of a fixed placement read as before.
  if (snap.placement_max_ps > 0) {
    c.metadata["placement_max_ps"] = absl::StrCat(snap.placement_max_ps);
  }
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
    c.metadata[prefix + "/sparse_tables"] = absl::StrCat(s.sparse_size());
    for (int t = 0; t < s.sparse_size(); ++t) AddSparseTable(prefix, t, s.sparse(t), &c);
  }
  return c;
}

absl::StatusOr<Snapshot> FromCheckpoint(const Checkpoint& c, const Placement& placement) {
  // Reads a checkpoint's metadata and tensors back into a snapshot, field by
  // field, each missing or bad one named (DataLoss); 112 lines of such reads.
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
    PSCLUSTER_RETURN_IF_ERROR(parse(key, &n));
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
  snap.placement_max_ps = placement.max_ps;
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
      const bool dense = name == prefix + "/values" || name.rfind(prefix + "/slot/", 0) == 0;
      if (dense && t->dtype != NamedTensor::Dtype::kF32) {
        return absl::DataLossError(absl::StrCat("checkpoint of step ", c.step, ": ", name, " is ",
                                                DtypeName(t->dtype), ", not F32"));
      }
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
    // Optional: checkpoints written before sparse tables lack it (none).
    int64_t tables = 0;
    if (c.metadata.count(prefix + "/sparse_tables") != 0) {
      absl::StatusOr<int64_t> n = number(prefix + "/sparse_tables");
      if (!n.ok()) return n.status();
      tables = *n;
    }
    if (tables < 0 || tables > 1 << 16) {
      return absl::DataLossError(absl::StrCat("checkpoint ", prefix, "/sparse_tables is ", tables));
    }
    for (int t = 0; t < tables; ++t) {
      const std::string key = absl::StrCat(prefix, "/sparse", t, "/table");
      absl::StatusOr<int64_t> table = number(key);
      if (!table.ok()) return table.status();
      if (*table < 0 || *table > std::numeric_limits<int32_t>::max()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", key, " is ", *table));
      }
      absl::StatusOr<SparseTableState> state =
          ReadSparseTable(c, by_name, prefix, t, static_cast<int>(*table));
      if (!state.ok()) return state.status();
      *s.add_sparse() = std::move(*state);
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
  // Each new ps's bytes are copied straight from the old ps's, range by
  // range: no whole model in between (a move's pause waits for this).
  const std::vector<WireRange> ranges = WireRanges(from);
  Snapshot out;
  out.step = snap.step;
  out.done_chunks = snap.done_chunks;
  out.chunks_per_epoch = snap.chunks_per_epoch;
  out.generation = snap.generation;
  out.run_started_unix_ms = snap.run_started_unix_ms;
  out.placement_max_ps = to.max_ps;
  out.ps.assign(to.num_ps, ShardState());
  // One kind of tensor (the values, or one slot): each old ps's bytes,
  // checked, then each new ps's gathered from them.
  auto reshard = [&](const char* what, auto bytes_of, auto set) -> absl::Status {
    std::vector<const char*> old(from.num_ps);
    for (int i = 0; i < from.num_ps; ++i) {
      const std::string* bytes = bytes_of(snap.ps[i]);
      if (bytes == nullptr || static_cast<int64_t>(bytes->size()) != from.floats_of_ps[i] * 4) {
        return absl::InvalidArgumentError(absl::StrCat("ps", i, " of the snapshot of step ",
                                                       snap.step, " does not hold its ",
                                                       from.floats_of_ps[i], " ", what));
      }
      old[i] = bytes->data();
    }
    for (int j = 0; j < to.num_ps; ++j) {
      std::string bytes(to.floats_of_ps[j] * sizeof(float), '\0');
      PSCLUSTER_RETURN_IF_ERROR(GatherRanges(ranges, old, to, j, bytes.data()));
      set(out.ps[j], std::move(bytes));
    }
    return absl::OkStatus();
  };
  PSCLUSTER_RETURN_IF_ERROR(reshard(
      "values", [](const ShardState& s) { return &s.values(); },
      [](ShardState& s, std::string bytes) { s.set_values(std::move(bytes)); }));
  const ShardState& first = snap.ps.empty() ? ShardState::default_instance() : snap.ps[0];
  for (const SlotValues& slot : first.slots()) {
    const std::string name = slot.name();
    PSCLUSTER_RETURN_IF_ERROR(reshard(
        "slot values",
        [&name](const ShardState& s) {
          for (const SlotValues& v : s.slots()) {
            if (v.name() == name) return &v.values();
          }
          return static_cast<const std::string*>(nullptr);
        },
        [&name](ShardState& s, std::string bytes) {
          SlotValues* v = s.add_slots();
          v->set_name(name);
          v->set_values(std::move(bytes));
        }));
  }
  if (absl::Status s = ReshardSparse(snap.ps, &out.ps); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the snapshot of step ", snap.step, ": ", s.message()));
  }
  // The records of what was applied go to every new ps as the first old
  // one kept them (every ps took the same updates), the chunks as those
  // every old ps took: a store that takes them by a move
  // (RestoreKind::kMove) continues them; a rollback ignores them.
  std::vector<int64_t> chunks(first.recent_chunks().begin(), first.recent_chunks().end());
  int64_t chunks_since = first.recent_chunks_since();
  for (const ShardState& s : snap.ps) {
    chunks.erase(std::remove_if(chunks.begin(), chunks.end(),
                                [&s](int64_t c) {
                                  return std::find(s.recent_chunks().begin(),
                                                   s.recent_chunks().end(),
                                                   c) == s.recent_chunks().end();
                                }),
                 chunks.end());
    chunks_since = std::max(chunks_since, s.recent_chunks_since());
  }
  for (ShardState& s : out.ps) {
    s.set_layout_fingerprint(to.fingerprint);
    s.set_version(snap.step);
    s.set_generation(snap.generation);
    s.set_optimizer_iterations(first.optimizer_iterations());
    s.set_applied_digest(first.applied_digest());
    s.set_pushes_applied(first.pushes_applied());
    s.set_steps_applied(first.steps_applied());
    *s.mutable_answered() = first.answered();
    *s.mutable_outcomes() = first.outcomes();
    s.mutable_recent_chunks()->Assign(chunks.begin(), chunks.end());
    s.set_recent_chunks_since(std::min(chunks_since, snap.step));
    s.set_decider_epoch(first.decider_epoch());
  }
  return out;
}

namespace {

// Per shard of ps `ps` in wire order: its flat offset, size and wire offset.
struct WireShard {
  int64_t offset, size, wire;
};
std::vector<WireShard> WireShardsOf(const Placement& p, int ps) {
  std::vector<WireShard> out;
  int64_t wire = 0;
  for (int i : p.shards_of_ps[ps]) {
    out.push_back({p.shards[i].offset, p.shards[i].size, wire});
    wire += p.shards[i].size;
  }
  return out;
}

// `bytes` (floats of the new layout) without the kept ranges.
std::string WithoutKept(const std::string& bytes,
                        const google::protobuf::RepeatedPtrField<KeptRange>& kept) {
  std::string out;
  out.reserve(bytes.size());
  int64_t at = 0;
  for (const KeptRange& r : kept) {
    out.append(bytes, at * sizeof(float), (r.to() - at) * sizeof(float));
    at = r.to() + r.size();
  }
  out.append(bytes, at * sizeof(float), std::string::npos);
  return out;
}

}  // namespace

int64_t KeepInPlace(const Placement& from, const Placement& to, int ps, RestoreRequest* req) {
  if (ps >= from.num_ps || ps >= to.num_ps) return 0;
  std::vector<WireShard> old = WireShardsOf(from, ps);
  std::sort(old.begin(), old.end(),
            [](const WireShard& a, const WireShard& b) { return a.offset < b.offset; });
  for (const WireShard& n : WireShardsOf(to, ps)) {
    for (const WireShard& o : old) {
      const int64_t lo = std::max(n.offset, o.offset);
      const int64_t hi = std::min(n.offset + n.size, o.offset + o.size);
      if (hi <= lo) continue;
      const int64_t src = o.wire + (lo - o.offset), dst = n.wire + (lo - n.offset);
      const int k = req->kept_size();
      if (k > 0 && req->kept(k - 1).from() + req->kept(k - 1).size() == src &&
          req->kept(k - 1).to() + req->kept(k - 1).size() == dst) {
        req->mutable_kept(k - 1)->set_size(req->kept(k - 1).size() + hi - lo);
        continue;
      }
      KeptRange* r = req->add_kept();
      r->set_from(src);
      r->set_to(dst);
      r->set_size(hi - lo);
    }
  }
  if (req->kept_size() == 0) return 0;
  ShardState* s = req->mutable_state();
  const size_t before = s->values().size();
  *s->mutable_values() = WithoutKept(s->values(), req->kept());
  int64_t left_out = static_cast<int64_t>(before - s->values().size());
  for (SlotValues& slot : *s->mutable_slots()) {
    const size_t had = slot.values().size();
    *slot.mutable_values() = WithoutKept(slot.values(), req->kept());
    left_out += static_cast<int64_t>(had - slot.values().size());
  }
  return left_out;
}

absl::StatusOr<Snapshot> FromCheckpointFor(const Checkpoint& c, const ModelSpec& spec,
                                           int64_t min_shard_bytes, const Placement& placement) {
  auto it = c.metadata.find("num_ps");
  int64_t num_ps = 0;
  int64_t max_ps = 0;  // absent: a fixed placement
  auto max_it = c.metadata.find("placement_max_ps");
  if (max_it != c.metadata.end() &&
      (!absl::SimpleAtoi(max_it->second, &max_ps) || max_ps < 0 || max_ps > 1 << 16)) {
    return absl::DataLossError(absl::StrCat("the checkpoint of step ", c.step,
                                            " has placement_max_ps \"", max_it->second, "\""));
  }
  if (it == c.metadata.end() || !absl::SimpleAtoi(it->second, &num_ps) ||
      (num_ps == placement.num_ps && max_ps == placement.max_ps)) {
    return FromCheckpoint(c, placement);  // its own errors, if any
  }
  if (num_ps < 1 || num_ps > 1 << 16) {
    return absl::DataLossError(
        absl::StrCat("the checkpoint of step ", c.step, " says it holds ", num_ps, " ps"));
  }
  PlacementOptions popt;
  popt.min_shard_bytes = min_shard_bytes;
  popt.max_ps = static_cast<int>(max_ps);
  const Placement theirs = PlaceVariables(spec, static_cast<int>(num_ps), popt);
  absl::StatusOr<Snapshot> snap = FromCheckpoint(c, theirs);
  if (!snap.ok()) return snap.status();
  return ReshardSnapshot(*snap, theirs, placement);
}

}  // namespace pscluster
