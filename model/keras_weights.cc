#include "model/keras_weights.h"

#include <fcntl.h>
#include <hdf5/serial/hdf5.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "model/zip_archive.h"

namespace pscluster {
namespace {

// An HDF5 id, closed with `close` when it goes.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

absl::Status Bad(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Names of the links in group `loc`, in name order.
std::vector<std::string> Children(hid_t loc) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Literate(
      loc, H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t, const char* name, const H5L_info_t* info, void* data) -> herr_t {
        if (info->type == H5L_TYPE_HARD) {
          static_cast<std::vector<std::string>*>(data)->push_back(name);
        }
        return 0;
      },
      &names);
  return names;
}

// Every dataset under group `loc` (whose path is `prefix`), as full paths.
void Datasets(hid_t loc, const std::string& prefix, int depth, std::vector<std::string>* out) {
  if (depth > 32) return;  // deeper than any Keras file: a cycle of hard links
  for (const std::string& name : Children(loc)) {
    Id obj(H5Oopen(loc, name.c_str(), H5P_DEFAULT), H5Oclose);
    if (!obj.ok()) continue;
    const std::string path = prefix.empty() ? name : absl::StrCat(prefix, "/", name);
    const H5I_type_t type = H5Iget_type(obj.get());
    if (type == H5I_DATASET) {
      out->push_back(path);
    } else if (type == H5I_GROUP) {
      Datasets(obj.get(), path, depth + 1, out);
    }
  }
}

bool HasLink(hid_t loc, const std::string& path) {
  // H5Lexists wants each intermediate link to exist: check them in turn.
  std::string sofar;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    sofar = sofar.empty() ? std::string(part) : absl::StrCat(sofar, "/", part);
    if (H5Lexists(loc, sofar.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

// A scalar string attribute of `obj`; "" when there is none.
std::string StringAttribute(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return "";
  Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!attr.ok()) return "";
  Id type(H5Aget_type(attr.get()), H5Tclose);
  Id space(H5Aget_space(attr.get()), H5Sclose);
  if (!type.ok() || !space.ok() || H5Tget_class(type.get()) != H5T_STRING ||
      H5Sget_simple_extent_npoints(space.get()) != 1) {
    return "";
  }
  Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem.get(), H5Tget_cset(type.get()));  // h5py writes UTF-8
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Tset_size(mem.get(), H5T_VARIABLE);
    char* s = nullptr;
    if (H5Aread(attr.get(), mem.get(), &s) < 0 || s == nullptr) return "";
    std::string out(s);
    H5free_memory(s);
    return out;
  }
  const size_t size = H5Tget_size(type.get());
  if (size == 0 || size > (1 << 20)) return "";
  H5Tset_size(mem.get(), size);
  std::string out(size, '\0');
  if (H5Aread(attr.get(), mem.get(), out.data()) < 0) return "";
  out.resize(strnlen(out.data(), size));
  return out;
}

// What a dataset's type is called in messages.
std::string TypeName(hid_t dataset, hid_t type) {
  // Keras writes bfloat16 variables with a dtype attribute.
  if (std::string d = StringAttribute(dataset, "dtype"); !d.empty()) return d;
  const size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      return absl::StrCat("float", bits);
    case H5T_INTEGER:
      return absl::StrCat(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", bits);
    case H5T_STRING:
      return "string";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    default:
      return "an unknown type";
  }
}

// That `ds` keeps its values in this file, in as many bytes as its shape
// needs (`needed`): before anything is allocated or read, as libhdf5 reads
// past its own buffer for a dataset whose shape claims more than it stores,
// and would read the files an external or virtual dataset names. A chunked
// dataset (compressed, or not written: fill values) may claim at most 1024
// times what it stores, plus 1 MiB. What the file says it stores is bounded
// by the file's own size (a malformed file may claim any storage).
absl::Status CheckStorage(hid_t file, hid_t ds, int64_t needed, const std::string& path,
                          const std::string& source) {
  Id dcpl(H5Dget_create_plist(ds), H5Pclose);
  if (!dcpl.ok()) return Bad(source, absl::StrCat(path, ": cannot read its storage"));
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (H5Pget_external_count(dcpl.get()) != 0 || layout == H5D_VIRTUAL) {
    return Bad(source, absl::StrCat(path, ": its values are in other files (an external or "
                                          "virtual dataset)"));
  }
  hsize_t file_bytes = 0;
  if (H5Fget_filesize(file, &file_bytes) < 0) {
    return Bad(source, absl::StrCat(path, ": cannot read the file's size"));
  }
  const int64_t stored = static_cast<int64_t>(
      std::min<hsize_t>(H5Dget_storage_size(ds), std::min<hsize_t>(file_bytes, hsize_t{1} << 40)));
  if (layout == H5D_CHUNKED ? needed > stored * 1024 + (1 << 20)
                            : (layout != H5D_COMPACT && layout != H5D_CONTIGUOUS) ||
                                  stored != needed) {
    return Bad(source, absl::StrCat(path, ": its shape needs ", needed, " bytes but the file ",
                                    "stores ", stored));
  }
  return absl::OkStatus();
}

// Reads the dataset at `path`: shape, type and (float32) values.
absl::Status ReadDataset(hid_t file, const std::string& path, const std::string& source,
                         FileTensor* t) {
  t->where = path;
  Id ds(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) return Bad(source, absl::StrCat(path, ": cannot open the dataset"));
  Id space(H5Dget_space(ds.get()), H5Sclose);
  Id type(H5Dget_type(ds.get()), H5Tclose);
  if (!space.ok() || !type.ok()) {
    return Bad(source, absl::StrCat(path, ": cannot read its shape or type"));
  }
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > 32) return Bad(source, absl::StrCat(path, ": rank ", rank));
  std::vector<hsize_t> dims(rank);
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
    return Bad(source, absl::StrCat(path, ": cannot read its shape"));
  }
  int64_t count = 1;
  for (hsize_t d : dims) {
    if (d > (hsize_t{1} << 40)) return Bad(source, absl::StrCat(path, ": dimension ", d));
    t->shape.push_back(static_cast<int64_t>(d));
    count *= static_cast<int64_t>(d);
    if (count > (int64_t{1} << 40)) return Bad(source, absl::StrCat(path, ": too large"));
  }
  const bool f32 = H5Tget_class(type.get()) == H5T_FLOAT && H5Tget_size(type.get()) == 4 &&
                   StringAttribute(ds.get(), "dtype").empty();
  t->dtype = f32 ? "float32" : TypeName(ds.get(), type.get());
  if (!f32) return absl::OkStatus();
  if (absl::Status s = CheckStorage(file, ds.get(), count * 4, path, source); !s.ok()) return s;
  t->values.resize(count);
  if (count > 0 && H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                           t->values.data()) < 0) {
    return Bad(source, absl::StrCat(path, ": cannot read its values"));
  }
  return absl::OkStatus();
}

// Keras 3: the model's layers with variables, each under its group's
// name (class prefix numbered in first-application order), and each
// layer's variables in order.
struct Keras3Names {
  std::map<std::string, std::string> layer_of_group;  // "dense_1" -> "fc"
  std::map<std::string, std::vector<std::string>> variables;  // "fc" -> {"fc/kernel", ...}
};

Keras3Names NamesFor(const ModelSpec& spec) {
  Keras3Names n;
  std::map<std::string, int> used;
  std::set<std::string> seen;
  for (const LayerSpec& l : spec.layers) {
    if (!seen.insert(l.name).second) continue;  // a shared layer's later application
    const std::string prefix = KerasGroupPrefix(l);
    if (prefix.empty()) continue;
    const int k = used[prefix]++;
    n.layer_of_group[k == 0 ? prefix : absl::StrCat(prefix, "_", k)] = l.name;
  }
  for (const VariableSpec& v : spec.variables) {
    n.variables[v.name.substr(0, v.name.rfind('/'))].push_back(v.name);
  }
  return n;
}

// A MultiHeadAttention's EinsumDense projections: the attribute Keras 3
// keeps each under, and the parser's Dense part (<layer>/<part>, Keras 2's
// sublayer name too).
struct MultiHeadPart {
  const char* keras3;
  const char* part;
};
constexpr MultiHeadPart kMultiHeadParts[] = {{"query_dense", "query"},
                                             {"key_dense", "key"},
                                             {"value_dense", "value"},
                                             {"output_dense", "attention_output"}};

// The layer of a Keras 3 layer's sub-object group (`attr`, the attribute
// that holds it): an LSTM's or GRU's cell is the layer itself, a
// MultiHeadAttention's EinsumDense projections the parser's Dense parts;
// "" for any other.
std::string SubLayer(const std::string& layer, std::string attr) {
  if (attr == "cell") return layer;
  if (!attr.empty() && attr[0] == '_') attr.erase(0, 1);  // Keras before the properties
  for (const MultiHeadPart& p : kMultiHeadParts) {
    if (attr == p.keras3) return absl::StrCat(layer, "/", p.part);
  }
  return "";
}

// A MultiHeadAttention part's tensor in Keras's shape ([features, heads,
// key_dim], [heads, key_dim], the output's [heads, value_dim, features])
// takes its variable's ([features, heads x key_dim], ...): the same values
// in the same order. Any other shape is left for FlattenWeights to name.
void FitMultiHeadShape(const ModelSpec& spec, FileTensor* t) {
  if (t->variable.empty() || t->dtype != "float32") return;
  const std::string layer = t->variable.substr(0, t->variable.rfind('/'));
  if (layer.find('/') == std::string::npos) return;  // not a part
  for (const VariableSpec& v : spec.variables) {
    if (v.name != t->variable) continue;
    if (static_cast<int64_t>(t->values.size()) == v.size && t->shape.size() == v.shape.size() + 1) {
      t->shape = v.shape;
    }
    return;
  }
}

absl::StatusOr<std::vector<FileTensor>> ReadKeras3(hid_t file, const std::string& root,
                                                   const std::string& source,
                                                   const ModelSpec& spec) {
  const Keras3Names names = NamesFor(spec);
  Id layers(H5Gopen2(file, root.c_str(), H5P_DEFAULT), H5Gclose);
  if (!layers.ok()) return Bad(source, absl::StrCat(root, " is not a group"));
  std::vector<std::string> paths;
  Datasets(layers.get(), root, 0, &paths);
  std::map<std::string, std::string> named;  // group -> its vars' "name" attribute
  std::vector<FileTensor> out;
  for (const std::string& path : paths) {
    FileTensor t;
    if (absl::Status s = ReadDataset(file, path, source, &t); !s.ok()) return s;
    // <root>/<group>/vars/<i>, or <root>/<group>/<attr>/vars/<i> for an
    // LSTM's, a GRU's or a MultiHeadAttention's (SubLayer); anything else
    // (a nested model's layers) is for no variable of ours.
    const std::vector<std::string> parts = absl::StrSplit(path, '/');
    const size_t n = parts.size();
    int index = -1;
    if ((n == 4 || n == 5) && parts[n - 2] == "vars" && absl::SimpleAtoi(parts[n - 1], &index) &&
        index >= 0 && absl::StrCat(index) == parts[n - 1]) {
      const std::string& group = parts[1];
      auto attr = named.find(group);
      if (attr == named.end()) {
        Id vars(H5Gopen2(file, absl::StrCat(root, "/", group, "/vars").c_str(), H5P_DEFAULT),
                H5Gclose);
        attr = named.emplace(group, vars.ok() ? StringAttribute(vars.get(), "name") : "").first;
      }
      std::string layer = attr->second;
      if (layer.empty()) {
        auto it = names.layer_of_group.find(group);
        if (it != names.layer_of_group.end()) layer = it->second;
      }
      if (n == 5) layer = SubLayer(layer, parts[2]);
      auto vars = names.variables.find(layer);
      if (vars != names.variables.end() && index < static_cast<int>(vars->second.size())) {
        t.variable = vars->second[index];
        FitMultiHeadShape(spec, &t);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Keras 2: <layer>/.../<var>:<n> under `root` ("" or "model_weights"); a
// MultiHeadAttention's <layer>/.../<part>/<var>:<n> is the parser's
// <layer>/<part>/<var>.
absl::StatusOr<std::vector<FileTensor>> ReadKeras2(hid_t file, const std::string& root,
                                                   const std::string& source,
                                                   const ModelSpec& spec) {
  std::vector<std::string> paths;
  if (root.empty()) {
    Datasets(file, "", 0, &paths);
  } else {
    Id group(H5Gopen2(file, root.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.ok()) return Bad(source, absl::StrCat(root, " is not a group"));
    Datasets(group.get(), root, 0, &paths);
  }
  std::vector<FileTensor> out;
  for (const std::string& path : paths) {
    std::vector<std::string> parts = absl::StrSplit(path, '/');
    if (!root.empty()) parts.erase(parts.begin());
    if (parts[0] == "optimizer_weights") continue;  // the optimizer's state
    FileTensor t;
    if (absl::Status s = ReadDataset(file, path, source, &t); !s.ok()) return s;
    if (parts.size() >= 2) {
      std::string var = parts.back();
      if (const size_t colon = var.rfind(':'); colon != std::string::npos) var.resize(colon);
      const std::string& sub = parts[parts.size() - 2];
      const bool part = parts.size() >= 4 &&
                        std::any_of(std::begin(kMultiHeadParts), std::end(kMultiHeadParts),
                                    [&sub](const MultiHeadPart& p) { return sub == p.part; });
      t.variable =
          part ? absl::StrCat(parts[0], "/", sub, "/", var) : absl::StrCat(parts[0], "/", var);
      FitMultiHeadShape(spec, &t);
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<FileTensor>> ReadOpenFile(hid_t file, const std::string& source,
                                                     const ModelSpec& spec) {
  for (const char* root : {"layers", "_layer_checkpoint_dependencies"}) {
    if (HasLink(file, root)) return ReadKeras3(file, root, source, spec);
  }
  if (H5Aexists(file, "layer_names") > 0) return ReadKeras2(file, "", source, spec);
  if (HasLink(file, "model_weights")) return ReadKeras2(file, "model_weights", source, spec);
  return Bad(source,
             "neither Keras 3 weights (no layers/ group: model.save_weights(\"x.weights.h5\") "
             "or a .keras archive's model.weights.h5) nor Keras 2 ones (no layer_names "
             "attribute or model_weights/ group)");
}

// Silences HDF5's printing of its error stack while one call runs.
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The bytes of `entry` in zip archive `path`.
absl::StatusOr<std::string> ReadZipEntry(const std::string& path, const char* entry) {
  absl::StatusOr<std::unique_ptr<ZipArchive>> archive = ZipArchive::Open(path, "a .keras");
  if (!archive.ok()) return archive.status();
  if (!(*archive)->Has(entry)) {
    return Bad(path, absl::StrCat("the archive has no ", entry,
                                  " (saved without weights, or with weights_format=\"npz\")"));
  }
  return (*archive)->Read(entry, uint64_t{64} << 30);
}

// --- The reading process ---------------------------------------------------
//
// libhdf5 (Debian's 1.10) trusts a file's metadata: on malformed files it
// crashes (a memcpy whose length comes from a corrupt global heap) or
// allocates tens of GB (hdf5_weights_fuzzer; docs/testing.md). A weights
// file is outside input, so libhdf5 reads it in a child process: forked,
// the child reads the tensors, writes them (or the error) into a pipe and
// exits; the parent bounds the child's memory and time, kills it past
// them, and names what happened. The parent never calls libhdf5, so its
// global state (error stack, id tables) is never shared between threads.

WeightsReaderHooks reader_hooks;

// A result on the pipe: u64 fields in host order (both ends are this
// binary), strings as u64 length + bytes. A status code (0 = OK), then
// the message, or the tensor count and each tensor's variable, where,
// dtype, rank, dims and values.
void PutU64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}
void PutBytes(std::string* out, std::string_view s) {
  PutU64(out, s.size());
  out->append(s);
}

std::string Encoded(const absl::StatusOr<std::vector<FileTensor>>& r) {
  std::string out;
  PutU64(&out, static_cast<uint64_t>(r.status().code()));
  if (!r.ok()) {
    PutBytes(&out, std::string_view(r.status().message().data(), r.status().message().size()));
    return out;
  }
  PutU64(&out, r->size());
  for (const FileTensor& t : *r) {
    PutBytes(&out, t.variable);
    PutBytes(&out, t.where);
    PutBytes(&out, t.dtype);
    PutU64(&out, t.shape.size());
    for (int64_t d : t.shape) PutU64(&out, static_cast<uint64_t>(d));
    PutBytes(&out, std::string_view(reinterpret_cast<const char*>(t.values.data()),
                                    t.values.size() * sizeof(float)));
  }
  return out;
}

class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {}
  bool good() const { return ok_; }                   // nothing cut short so far
  bool ok() const { return ok_ && in_.empty(); }      // all of it read, exactly
  uint64_t U64() {
    uint64_t v = 0;
    if (in_.size() < sizeof v) {
      ok_ = false;
      return 0;
    }
    std::memcpy(&v, in_.data(), sizeof v);
    in_.remove_prefix(sizeof v);
    return v;
  }
  std::string_view Bytes() {
    const uint64_t n = U64();
    if (n > in_.size()) {
      ok_ = false;
      return {};
    }
    std::string_view s = in_.substr(0, n);
    in_.remove_prefix(n);
    return s;
  }

 private:
  std::string_view in_;
  bool ok_ = true;
};

// The result in `in`; nullopt when `in` is not one.
std::optional<absl::StatusOr<std::vector<FileTensor>>> Decoded(std::string_view in) {
  Decoder d(in);
  const uint64_t code = d.U64();
  if (code != 0) {
    const std::string_view message = d.Bytes();
    if (!d.ok() || code > static_cast<uint64_t>(absl::StatusCode::kUnauthenticated)) {
      return std::nullopt;
    }
    return absl::Status(static_cast<absl::StatusCode>(code), std::string(message));
  }
  std::vector<FileTensor> out;
  for (uint64_t n = d.U64(); n > 0 && d.good(); --n) {
    FileTensor t;
    t.variable = d.Bytes();
    t.where = d.Bytes();
    t.dtype = d.Bytes();
    for (uint64_t rank = d.U64(); rank > 0 && d.good(); --rank) {
      t.shape.push_back(static_cast<int64_t>(d.U64()));
    }
    const std::string_view values = d.Bytes();
    t.values.resize(values.size() / sizeof(float));
    if (!values.empty()) std::memcpy(t.values.data(), values.data(), values.size());
    out.push_back(std::move(t));
  }
  if (!d.ok()) return std::nullopt;
  return out;
}

// Resident bytes of process `pid`; 0 when it cannot be read (gone).
int64_t ResidentBytes(pid_t pid) {
  std::ifstream statm(absl::StrCat("/proc/", pid, "/statm"));
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

using ReadFn = absl::FunctionRef<absl::StatusOr<std::vector<FileTensor>>()>;

// `read()` run in a child process for a file of `file_bytes` named
// `source`, under `limits`.
absl::StatusOr<std::vector<FileTensor>> ReadInChild(const std::string& source,
                                                    int64_t file_bytes,
                                                    const Hdf5ReadLimits& limits, ReadFn read) {
  const int64_t memory =
      limits.memory_bytes > 0 ? limits.memory_bytes : (int64_t{512} << 20) + 4 * file_bytes;
  const absl::Duration time = limits.time > absl::ZeroDuration()
                                  ? limits.time
                                  : absl::Seconds(60) + absl::Seconds(file_bytes / 10'000'000);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat(source, ": cannot make a pipe to read it through: ", std::strerror(errno)));
  }
  // The child starts with the parent's pages mapped: its own use is what
  // grows past them.
  const int64_t base = ResidentBytes(::getpid());
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return absl::InternalError(
        absl::StrCat(source, ": cannot start a process to read it: ", std::strerror(e)));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // A crash inside libhdf5 ends the child by its signal, for the parent
    // to name (no handler of the daemon's or a sanitizer's in between).
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, SIG_DFL);
    if (reader_hooks.at_start != nullptr) reader_hooks.at_start();
    const std::string answer = Encoded(read());
    if (reader_hooks.before_exit != nullptr) reader_hooks.before_exit();
    ::_exit(WriteAll(fds[1], answer) ? 0 : 3);
  }
  ::close(fds[1]);
  const absl::Time deadline = absl::Now() + time;
  std::string answer, over;
  std::vector<char> buf(1 << 16);
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, /*ms=*/10) > 0) {
      const ssize_t n = ::read(fds[0], buf.data(), buf.size());
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;  // it is done
      if (n > 0) answer.append(buf.data(), static_cast<size_t>(n));
    }
    if (ResidentBytes(pid) - base > memory ||
        static_cast<int64_t>(answer.size()) > memory) {
      over = absl::StrCat("more than ", memory >> 20, " MiB of memory");
    } else if (absl::Now() > deadline) {
      over = absl::StrCat("longer than ", absl::FormatDuration(time));
    }
    if (!over.empty()) {
      ::kill(pid, SIGKILL);
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!over.empty()) {
    return Bad(source, absl::StrCat("reading it took ", over, ", which a weights file of ",
                                    file_bytes, " bytes does not need: the file is malformed"));
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return Bad(source, absl::StrCat("the HDF5 library crashed reading it (signal ", sig, ", ",
                                    ::strsignal(sig), "): the file is malformed"));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        source, ": the process reading it exited with status ", WEXITSTATUS(status)));
  }
  std::optional<absl::StatusOr<std::vector<FileTensor>>> r = Decoded(answer);
  if (!r) {
    return absl::InternalError(absl::StrCat(source, ": the process reading it answered ",
                                            answer.size(), " bytes that are not a result"));
  }
  return *std::move(r);
}

}  // namespace

absl::StatusOr<bool> KerasArchiveHasWeights(const std::string& path) {
  absl::StatusOr<std::unique_ptr<ZipArchive>> archive = ZipArchive::Open(path, "a .keras");
  if (!archive.ok()) return archive.status();
  return (*archive)->Has("model.weights.h5");
}

std::string KerasGroupPrefix(const LayerSpec& layer) {
  if (layer.name.find('/') != std::string::npos) return "";  // a MultiHeadAttention's part
  switch (layer.kind) {
    case LayerKind::kConv2D:
      return layer.one_d ? "conv1d" : "conv2d";
    case LayerKind::kLstm:
      return "lstm";
    case LayerKind::kGru:
      return "gru";
    case LayerKind::kAttention:
      return layer.multi_head ? "multi_head_attention" : "";
    case LayerKind::kDense:
      return "dense";
    case LayerKind::kBatchNorm:
      return "batch_normalization";
    case LayerKind::kDepthwiseConv2D:
      return "depthwise_conv2d";
    case LayerKind::kSeparableConv2D:
      return "separable_conv2d";
    case LayerKind::kLayerNorm:
      return "layer_normalization";
    case LayerKind::kEmbedding:
      return "embedding";
    default:
      return "";
  }
}

absl::StatusOr<std::vector<FileTensor>> ParseKerasWeights(std::string_view h5_bytes,
                                                          const std::string& source,
                                                          const ModelSpec& spec,
                                                          const Hdf5ReadLimits& limits) {
  static constexpr char kSignature[] = "\x89HDF\r\n\x1a\n";
  if (h5_bytes.size() < 8 || h5_bytes.substr(0, 8) != std::string_view(kSignature, 8)) {
    return Bad(source, "not an HDF5 file (no HDF5 signature at its start)");
  }
  return ReadInChild(source, static_cast<int64_t>(h5_bytes.size()), limits, [&] {
    QuietErrors quiet;
    Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    // The core driver serves the file from memory; the image is copied.
    if (!fapl.ok() || H5Pset_fapl_core(fapl.get(), 1 << 20, /*backing_store=*/0) < 0 ||
        H5Pset_file_image(fapl.get(), const_cast<char*>(h5_bytes.data()), h5_bytes.size()) <
            0) {
      return absl::StatusOr<std::vector<FileTensor>>(
          absl::InternalError(absl::StrCat(source, ": cannot set up HDF5's memory driver")));
    }
    Id file(H5Fopen(source.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    if (!file.ok()) return absl::StatusOr<std::vector<FileTensor>>(Bad(source, "not a readable HDF5 file"));
    return ReadOpenFile(file.get(), source, spec);
  });
}

absl::StatusOr<std::vector<FileTensor>> ReadKerasWeights(const std::string& path,
                                                         const ModelSpec& spec,
                                                         const Hdf5ReadLimits& limits) {
  if (absl::EndsWith(path, ".keras")) {
    absl::StatusOr<std::string> h5 = ReadZipEntry(path, "model.weights.h5");
    if (!h5.ok()) return h5.status();
    return ParseKerasWeights(*h5, absl::StrCat(path, ": model.weights.h5"), spec, limits);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !std::ifstream(path, std::ios::binary)) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open it"));
  }
  return ReadInChild(path, static_cast<int64_t>(st.st_size), limits, [&] {
    QuietErrors quiet;
    if (H5Fis_hdf5(path.c_str()) <= 0) {
      return absl::StatusOr<std::vector<FileTensor>>(Bad(path, "not an HDF5 file"));
    }
    Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file.ok()) return absl::StatusOr<std::vector<FileTensor>>(Bad(path, "not a readable HDF5 file"));
    return ReadOpenFile(file.get(), path, spec);
  });
}

void SetWeightsReaderHooks(const WeightsReaderHooks& hooks) { reader_hooks = hooks; }

}  // namespace pscluster
