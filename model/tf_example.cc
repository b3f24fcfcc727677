#include "model/tf_example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::internal::WireFormatLite;

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("not a tf.train.Example: ", what));
}

// Calls field(number, wire_type, stream) for each field of the message in
// `in`'s current limit; `field` returns false on a malformed field. Fields
// it does not want it skips with SkipField.
template <typename F>
absl::Status ForEachField(CodedInputStream* in, const char* message, F field) {
  for (;;) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) {
      // 0: the end of the limit, or a zero tag (malformed) inside it.
      if (in->BytesUntilLimit() != 0) {
        return Malformed(absl::StrCat("a bad tag or a cut-short field in ", message));
      }
      return absl::OkStatus();
    }
    if (!field(WireFormatLite::GetTagFieldNumber(tag), WireFormatLite::GetTagWireType(tag),
               tag, in)) {
      return Malformed(absl::StrCat("bad field ", WireFormatLite::GetTagFieldNumber(tag),
                                    " in ", message));
    }
  }
}

// Reads a length-delimited submessage with `parse` inside its limit.
template <typename F>
bool Nested(CodedInputStream* in, F parse, absl::Status* status) {
  uint32_t length;
  if (!in->ReadVarint32(&length)) return false;
  if (length > static_cast<uint32_t>(in->BytesUntilLimit())) return false;
  const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
  *status = parse(in);
  const bool ok = status->ok() && in->BytesUntilLimit() == 0;
  in->PopLimit(limit);
  return ok || !status->ok();
}

bool ReadBytes(CodedInputStream* in, std::string* out) {
  uint32_t length;
  if (!in->ReadVarint32(&length)) return false;
  if (length > static_cast<uint32_t>(in->BytesUntilLimit())) return false;
  return in->ReadString(out, static_cast<int>(length));
}

// One repeated scalar field element or packed run: wire type `wt` of field 1.
template <typename T, typename ReadOne>
bool ReadRepeated(CodedInputStream* in, int wt, int packed_item_size, ReadOne read_one,
                  std::vector<T>* out) {
  if (wt == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
    uint32_t length;
    if (!in->ReadVarint32(&length)) return false;
    if (length > static_cast<uint32_t>(in->BytesUntilLimit())) return false;
    if (packed_item_size > 0 && length % packed_item_size != 0) return false;
    const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
    if (packed_item_size > 0) out->reserve(out->size() + length / packed_item_size);
    while (in->BytesUntilLimit() > 0) {
      T v;
      if (!read_one(in, &v)) return false;
      out->push_back(v);
    }
    in->PopLimit(limit);
    return true;
  }
  T v;
  if (!read_one(in, &v)) return false;
  out->push_back(v);
  return true;
}

bool ReadFloat(CodedInputStream* in, float* v) {
  uint32_t bits;
  if (!in->ReadLittleEndian32(&bits)) return false;
  std::memcpy(v, &bits, 4);
  return true;
}

bool ReadInt64(CodedInputStream* in, int64_t* v) {
  uint64_t u;
  if (!in->ReadVarint64(&u)) return false;
  *v = static_cast<int64_t>(u);
  return true;
}

absl::Status ParseList(CodedInputStream* in, TFFeature* f) {
  return ForEachField(in, "a feature's list", [&](int number, int wt, uint32_t tag,
                                                  CodedInputStream* s) {
    if (number != 1) return WireFormatLite::SkipField(s, tag);
    switch (f->kind) {
      case TFFeature::Kind::kBytes:
        if (wt != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) return false;
        f->bytes.emplace_back();
        return ReadBytes(s, &f->bytes.back());
      case TFFeature::Kind::kFloat:
        if (wt != WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
            wt != WireFormatLite::WIRETYPE_FIXED32) {
          return false;
        }
        return ReadRepeated<float>(s, wt, 4, ReadFloat, &f->floats);
      case TFFeature::Kind::kInt64:
        if (wt != WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
            wt != WireFormatLite::WIRETYPE_VARINT) {
          return false;
        }
        return ReadRepeated<int64_t>(s, wt, 0, ReadInt64, &f->ints);
      default:
        return false;
    }
  });
}

absl::Status ParseFeature(CodedInputStream* in, TFFeature* f) {
  return ForEachField(in, "a Feature", [&](int number, int wt, uint32_t tag,
                                           CodedInputStream* s) {
    if (number < 1 || number > 3) return WireFormatLite::SkipField(s, tag);
    if (wt != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) return false;
    // A oneof: the last list set wins, as protobuf parsers do.
    *f = TFFeature();
    f->kind = number == 1 ? TFFeature::Kind::kBytes
              : number == 2 ? TFFeature::Kind::kFloat
                            : TFFeature::Kind::kInt64;
    absl::Status st;
    return Nested(s, [&](CodedInputStream* c) { return ParseList(c, f); }, &st) && st.ok();
  });
}

absl::Status ParseMapEntry(CodedInputStream* in, TFExample* out) {
  std::string key;
  TFFeature feature;
  absl::Status inner;
  absl::Status st = ForEachField(in, "a features map entry", [&](int number, int wt, uint32_t tag,
                                                               CodedInputStream* s) {
    if (number == 1 && wt == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) return ReadBytes(s, &key);
    if (number == 2 && wt == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      feature = TFFeature();
      return Nested(s, [&](CodedInputStream* c) { return ParseFeature(c, &feature); }, &inner) &&
             inner.ok();
    }
    if (number == 1 || number == 2) return false;
    return WireFormatLite::SkipField(s, tag);
  });
  if (!inner.ok()) return inner;
  if (!st.ok()) return st;
  (*out)[key] = std::move(feature);
  return absl::OkStatus();
}

}  // namespace

const char* TFFeatureKindName(TFFeature::Kind kind) {
  switch (kind) {
    case TFFeature::Kind::kBytes: return "bytes_list";
    case TFFeature::Kind::kFloat: return "float_list";
    case TFFeature::Kind::kInt64: return "int64_list";
    default: return "no list";
  }
}

absl::StatusOr<TFExample> ParseTFExample(std::string_view bytes) {
  if (bytes.size() > (size_t{1} << 31) - 1) return Malformed("over 2 GiB");
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(static_cast<int>(bytes.size()));
  const CodedInputStream::Limit whole = in.PushLimit(static_cast<int>(bytes.size()));
  TFExample out;
  absl::Status inner, entry;  // the first error inside Features, a map entry
  absl::Status st = ForEachField(&in, "the Example", [&](int number, int wt, uint32_t tag,
                                                        CodedInputStream* s) {
    if (number != 1) return WireFormatLite::SkipField(s, tag);
    if (wt != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) return false;
    return Nested(s, [&](CodedInputStream* features) {
      return ForEachField(features, "Features", [&](int n, int w, uint32_t t,
                                                     CodedInputStream* f) {
        if (n != 1) return WireFormatLite::SkipField(f, t);
        if (w != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) return false;
        return Nested(f, [&](CodedInputStream* e) { return ParseMapEntry(e, &out); }, &entry) &&
               entry.ok();
      });
    }, &inner) && inner.ok();
  });
  in.PopLimit(whole);
  if (!entry.ok()) return entry;
  if (!inner.ok()) return inner;
  if (!st.ok()) return st;
  return out;
}

}  // namespace pscluster
