#include "model/idx_dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pscluster {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
// Refuse headers that claim more than this much data (16 GiB), so a corrupt
// header yields an error, not an attempt to allocate it.
constexpr uint64_t kMaxPayload = uint64_t{1} << 34;
constexpr size_t kChunk = size_t{1} << 20;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads a gzip or raw file (zlib passes non-gzip content through).
class ByteReader {
 public:
  static absl::StatusOr<ByteReader> Open(const std::string& path) {
    errno = 0;
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
      const int error = errno != 0 ? errno : ENOMEM;
      return absl::ErrnoToStatus(error, absl::StrCat(path, ": cannot open"));
    }
    gzbuffer(file, kChunk);
    return ByteReader(path, file);
  }

  // Appends up to n bytes to `out`; fewer only at the end of the content.
  absl::StatusOr<size_t> Read(size_t n, std::vector<uint8_t>* out) {
    size_t total = 0;
    while (total < n) {
      const unsigned want =
          static_cast<unsigned>(std::min<size_t>(n - total, kChunk));
      const size_t old_size = out->size();
      out->resize(old_size + want);
      const int got = gzread(file_.get(), out->data() + old_size, want);
      out->resize(old_size + std::max(got, 0));
      int errnum = Z_OK;
      const char* message = gzerror(file_.get(), &errnum);
      // Z_BUF_ERROR is zlib's "unexpected end of file" in a gzip stream.
      if (got < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
        if (errnum == Z_ERRNO) {
          return absl::ErrnoToStatus(errno,
                                     absl::StrCat(path_, ": read failed"));
        }
        // gzerror's text starts with the path; keep only the reason.
        std::string reason = message;
        if (reason.rfind(path_ + ": ", 0) == 0) {
          reason = reason.substr(path_.size() + 2);
        }
        if (errnum == Z_BUF_ERROR) reason += " (the gzip file is truncated)";
        return Bad(path_, absl::StrCat("corrupt gzip data: ", reason));
      }
      if (got == 0) break;
      total += static_cast<size_t>(got);
    }
    return total;
  }

 private:
  struct Closer {
    void operator()(gzFile f) const { gzclose(f); }
  };

  ByteReader(std::string path, gzFile file)
      : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::unique_ptr<gzFile_s, Closer> file_;
};

std::string MagicName(uint32_t magic) {
  if (magic == kImagesMagic) return "an IDX image file (0x00000803)";
  if (magic == kLabelsMagic) return "an IDX label file (0x00000801)";
  return absl::StrFormat("magic 0x%08x", magic);
}

// Reads the header (magic + dims) and then exactly the payload it announces.
absl::StatusOr<std::vector<uint8_t>> ReadIdx(const std::string& path,
                                             uint32_t magic, int num_dims,
                                             std::vector<uint32_t>* dims) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(path);
  if (!reader.ok()) return reader.status();
  const size_t header_size = 4 + 4 * static_cast<size_t>(num_dims);
  std::vector<uint8_t> header;
  absl::StatusOr<size_t> got = reader->Read(header_size, &header);
  if (!got.ok()) return got.status();
  if (*got == 0) return Bad(path, "file is empty");
  if (*got < 4) {
    return Bad(path, absl::StrCat("truncated header: ", *got,
                                  " bytes, expected ", header_size));
  }
  const uint32_t found = BigEndian32(header.data());
  if (found != magic) {
    return Bad(path, absl::StrCat("is ", MagicName(found), ", expected ",
                                  MagicName(magic)));
  }
  if (*got < header_size) {
    return Bad(path, absl::StrCat("truncated header: ", *got,
                                  " bytes, expected ", header_size));
  }
  dims->clear();
  uint64_t payload = 1;
  const char* names[] = {"count", "rows", "columns"};
  for (int i = 0; i < num_dims; ++i) {
    const uint32_t d = BigEndian32(header.data() + 4 + 4 * i);
    if (d == 0) return Bad(path, absl::StrCat(names[i], " is 0"));
    if (d > static_cast<uint32_t>(INT_MAX)) {
      return Bad(path, absl::StrCat(names[i], " ", d, " is too large"));
    }
    if (payload > kMaxPayload / d) {
      return Bad(path, absl::StrCat("header announces more than ", kMaxPayload,
                                    " bytes of data (", names[i], " ", d,
                                    "); the header is corrupt"));
    }
    payload *= d;
    dims->push_back(d);
  }
  std::vector<uint8_t> data;
  data.reserve(std::min<uint64_t>(payload, 64 * kChunk));
  got = reader->Read(payload, &data);
  if (!got.ok()) return got.status();
  if (*got < payload) {
    return Bad(path, absl::StrCat("truncated: the header announces ", payload,
                                  " bytes of data, the file has ", *got));
  }
  std::vector<uint8_t> extra;
  got = reader->Read(1, &extra);
  if (!got.ok()) return got.status();
  if (*got != 0) {
    return Bad(path, absl::StrCat("trailing data after the ", payload,
                                  " bytes the header announces"));
  }
  return data;
}

bool Exists(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  std::fclose(f);
  return true;
}

// "<dir>/<stem>.gz" if present, else "<dir>/<stem>".
absl::StatusOr<std::string> Find(const std::string& dir,
                                 const std::string& stem,
                                 const std::string& what) {
  const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  for (const std::string& name : {stem + ".gz", stem}) {
    if (Exists(base + name)) return base + name;
  }
  return absl::NotFoundError(absl::StrCat("MNIST ", what, " not found in ", dir,
                                          ": tried ", stem, ".gz and ", stem));
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound), bound >= 1, without modulo bias: values below
// 2^64 mod bound are rejected.
uint64_t Uniform(uint64_t bound, uint64_t* state) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = SplitMix64(state);
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  std::vector<uint32_t> dims;
  absl::StatusOr<std::vector<uint8_t>> data =
      ReadIdx(path, kImagesMagic, 3, &dims);
  if (!data.ok()) return data.status();
  IdxImages images;
  images.count = static_cast<int>(dims[0]);
  images.height = static_cast<int>(dims[1]);
  images.width = static_cast<int>(dims[2]);
  images.pixels = *std::move(data);
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path) {
  std::vector<uint32_t> dims;
  return ReadIdx(path, kLabelsMagic, 1, &dims);
}

absl::Status CheckMnistFiles(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string split_name = split == Split::kTrain ? "train" : "test";
  for (const auto& [stem, what] :
       {std::pair<std::string, std::string>{prefix + "-images-idx3-ubyte", split_name + " images"},
        {prefix + "-labels-idx1-ubyte", split_name + " labels"}}) {
    absl::StatusOr<std::string> path = Find(dir, stem, what);
    if (!path.ok()) return path.status();
    std::ifstream file(*path, std::ios::binary);
    if (!file) {
      return absl::PermissionDeniedError(
          absl::StrCat("MNIST ", what, " in ", *path, " cannot be read: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadMnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string split_name = split == Split::kTrain ? "train" : "test";
  absl::StatusOr<std::string> images_path =
      Find(dir, prefix + "-images-idx3-ubyte", split_name + " images");
  if (!images_path.ok()) return images_path.status();
  absl::StatusOr<std::string> labels_path =
      Find(dir, prefix + "-labels-idx1-ubyte", split_name + " labels");
  if (!labels_path.ok()) return labels_path.status();

  absl::StatusOr<IdxImages> images = ReadIdxImages(*images_path);
  if (!images.ok()) return images.status();
  absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(*labels_path);
  if (!labels.ok()) return labels.status();
  if (static_cast<size_t>(images->count) != labels->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(*images_path, " has ", images->count, " images but ",
                     *labels_path, " has ", labels->size(), " labels"));
  }
  for (size_t i = 0; i < labels->size(); ++i) {
    if ((*labels)[i] > 9) {
      return Bad(*labels_path,
                 absl::StrCat("label ", (*labels)[i], " at index ", i,
                              " is not a digit 0..9"));
    }
  }
  Dataset dataset;
  dataset.count = images->count;
  dataset.height = images->height;
  dataset.width = images->width;
  dataset.images.resize(images->pixels.size());
  for (size_t i = 0; i < images->pixels.size(); ++i) {
    dataset.images[i] = static_cast<float>(images->pixels[i]) / 255.0f;
  }
  dataset.targets.assign(labels->begin(), labels->end());
  return dataset;
}

std::vector<int32_t> EpochPermutation(int count, uint64_t seed, int epoch) {
  std::vector<int32_t> perm;
  if (count <= 0) return perm;
  perm.resize(count);
  for (int i = 0; i < count; ++i) perm[i] = i;
  // The stream starts at hash(hash(seed) + epoch): different epochs (and
  // seeds) start at unrelated points, not at shifted copies of one stream.
  uint64_t state = seed;
  state =
      SplitMix64(&state) + static_cast<uint64_t>(static_cast<int64_t>(epoch));
  state = SplitMix64(&state);
  for (int i = count - 1; i > 0; --i) {
    const int j =
        static_cast<int>(Uniform(static_cast<uint64_t>(i) + 1, &state));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

std::vector<int32_t> ShardOf(const std::vector<int32_t>& perm, int shard,
                             int num_shards) {
  std::vector<int32_t> out;
  if (num_shards <= 0 || shard < 0 || shard >= num_shards) return out;
  out.reserve(perm.size() / num_shards + 1);
  for (size_t i = static_cast<size_t>(shard); i < perm.size();
       i += static_cast<size_t>(num_shards)) {
    out.push_back(perm[i]);
  }
  return out;
}

}  // namespace pscluster
