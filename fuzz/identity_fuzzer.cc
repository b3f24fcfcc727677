// Fuzz target for task identities (common/identity.h), which --authorize
// reads from outside bytes: a peer's certificate on every call, the
// --auth_identities_file list, and identity text. The first byte picks:
//   0  ParseIdentity on the rest;
//   1  TokenIdentities::Parse on the rest, then Find of a token cut from it;
//   2  IdentityFromCertificate on the rest (PEM text);
//   3  a certificate assembled from fuzzed pieces: one of the seed
//      certificates' PEM with bytes of its base64 body replaced, so that
//      near-valid DER (a SAN extension with odd URIs) comes up often;
//   4-7 as 0-3.
// Besides crashes and sanitizer reports, it aborts when a result breaks the
// header's contract: a parsed identity prints back to text that parses to
// the same identity, its index is in [0, kMaxTaskIndex]; a parsed token
// list is not empty and finds its own entries' tokens only when listed;
// errors are InvalidArgument (NotFound for a certificate without an
// identity).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/identity.h"
#include "fuzz/fuzz_input.h"

namespace pscluster {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "identity_fuzzer: broken contract: %s\n", what);
    std::abort();
  }
}

void CheckIdentity(const absl::StatusOr<TaskIdentity>& id, bool not_found_ok) {
  if (!id.ok()) {
    Check(id.status().code() == absl::StatusCode::kInvalidArgument ||
              (not_found_ok && id.status().code() == absl::StatusCode::kNotFound),
          "an error other than InvalidArgument");
    return;
  }
  Check(id->index >= 0 && id->index <= kMaxTaskIndex, "index out of range");
  absl::StatusOr<TaskIdentity> again = ParseIdentity(id->ToString());
  Check(again.ok() && *again == *id, "ToString does not parse back");
}

// tests/fixtures/identity/worker3.pem, whose base64 body the input edits.
constexpr char kPem[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBrTCCAVOgAwIBAgIUEPWnUOhVqeWFayvQqFDNeGG6Fg4wCgYIKoZIzj0EAwIw\n"
    "EjEQMA4GA1UEAwwHd29ya2VyMzAeFw0yNjExMzAyMTI1NTVaFw0yNjEyMDEyMTI1\n"
    "NTVaMBIxEDAOBgNVBAMMB3dvcmtlcjMwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC\n"
    "AAQRVQdp3Tq5vdtL1//gJHtMuGLgWoEoVTc+W+7QPvnS18pJH0J5SnfRi6aupAOc\n"
    "VAZD4X2GTZVdSMgr0smfthNuo4GGMIGDMB0GA1UdDgQWBBTDQ12a608ny3TpcPbL\n"
    "gOp5t3th8zAfBgNVHSMEGDAWgBTDQ12a608ny3TpcPbLgOp5t3th8zAPBgNVHRMB\n"
    "Af8EBTADAQH/MDAGA1UdEQQpMCeGFHBzY2x1c3RlcjovL3dvcmtlci8zgglsb2Nh\n"
    "bGhvc3SHBH8AAAEwCgYIKoZIzj0EAwIDSAAwRQIgfeunXz6yDSh/pkkgb2cLiwrB\n"
    "FAkfEG8QKECfxKuh+/ACIQDQ3IQsX8Q2kNVaCgauhQIehQDwcECWhLh8Jz5GK7py\n"
    "lg==\n"
    "-----END CERTIFICATE-----\n";

absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;
  FuzzInput in(data, size);
  const int op = in.Byte() % 4;
  if (op == 0) {
    CheckIdentity(ParseIdentity(View(in.Rest())), false);
  } else if (op == 1) {
    const size_t cut = in.Byte();
    const std::string_view text = in.Rest();
    absl::StatusOr<TokenIdentities> ids = TokenIdentities::Parse(View(text));
    if (!ids.ok()) {
      Check(ids.status().code() == absl::StatusCode::kInvalidArgument, "list: not InvalidArgument");
      return 0;
    }
    Check(ids->size() > 0, "an empty list parsed");
    // A token is found only when its digest is listed; the text itself is
    // most unlikely to be one.
    std::optional<TaskIdentity> found = ids->Find(View(text.substr(0, cut)));
    if (found.has_value()) CheckIdentity(*found, false);
  } else if (op == 2) {
    CheckIdentity(IdentityFromCertificate(View(in.Rest())), true);
  } else {
    std::string pem(kPem);
    const size_t body = pem.find('\n') + 1;
    const size_t end = pem.rfind("-----END");
    while (!in.empty()) {
      const size_t at = body + in.Byte() * 3 % (end - body);
      pem[at] = static_cast<char>(in.Byte());
    }
    CheckIdentity(IdentityFromCertificate(pem), true);
  }
  return 0;
}
