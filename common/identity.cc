#include "common/identity.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pscluster {
namespace {

constexpr char kUriScheme[] = "pscluster://";
constexpr size_t kDigestBytes = 32;

std::string Sha256(absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out, &n, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(out), n);
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kChief:
      return "chief";
    case Role::kWorker:
      return "worker";
    case Role::kPs:
      return "ps";
    case Role::kEvaluator:
      return "evaluator";
  }
  return "unknown";
}

std::optional<Role> RoleFromName(absl::string_view name) {
  for (Role r : {Role::kChief, Role::kWorker, Role::kPs, Role::kEvaluator}) {
    if (name == RoleName(r)) return r;
  }
  return std::nullopt;
}

std::string TaskIdentity::ToString() const { return absl::StrCat(RoleName(role), "/", index); }

absl::StatusOr<TaskIdentity> ParseIdentity(absl::string_view text) {
  const size_t slash = text.find('/');
  const absl::string_view role_name = text.substr(0, slash);
  std::optional<Role> role = RoleFromName(role_name);
  if (!role.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("identity '", absl::CHexEscape(text),
                                                   "': the role '", absl::CHexEscape(role_name),
                                                   "' is not chief, worker, ps or evaluator"));
  }
  TaskIdentity id{*role, 0};
  if (slash == absl::string_view::npos) return id;
  const absl::string_view index = text.substr(slash + 1);
  // Digits only: no sign, no spaces, no leading zeros but "0" itself.
  const bool digits = !index.empty() && index.size() <= 7 &&
                      std::all_of(index.begin(), index.end(), absl::ascii_isdigit) &&
                      (index.size() == 1 || index[0] != '0');
  if (!digits || !absl::SimpleAtoi(index, &id.index) || id.index > kMaxTaskIndex) {
    return absl::InvalidArgumentError(
        absl::StrCat("identity '", absl::CHexEscape(text), "': the index '",
                     absl::CHexEscape(index), "' is not a number in [0, ", kMaxTaskIndex, "]"));
  }
  return id;
}

std::string IdentityUri(const TaskIdentity& id) { return kUriScheme + id.ToString(); }

absl::StatusOr<TaskIdentity> IdentityFromCertificate(absl::string_view pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  if (bio == nullptr) return absl::InternalError("BIO_new_mem_buf failed");
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), X509_free);
  if (cert == nullptr) return absl::InvalidArgumentError("the certificate does not parse as PEM");
  std::unique_ptr<GENERAL_NAMES, void (*)(GENERAL_NAMES*)> names(
      static_cast<GENERAL_NAMES*>(
          X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)),
      [](GENERAL_NAMES* n) { GENERAL_NAMES_free(n); });
  std::optional<TaskIdentity> found;
  const int count = names == nullptr ? 0 : sk_GENERAL_NAME_num(names.get());
  for (int i = 0; i < count; ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    absl::string_view text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                           static_cast<size_t>(ASN1_STRING_length(uri)));
    if (!absl::ConsumePrefix(&text, kUriScheme)) continue;
    absl::StatusOr<TaskIdentity> id = ParseIdentity(text);
    if (!id.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the certificate's URI:", kUriScheme, id.status().message()));
    }
    if (found.has_value() && *found != *id) {
      return absl::InvalidArgumentError(absl::StrCat("the certificate names two tasks, ",
                                                     found->ToString(), " and ", id->ToString()));
    }
    found = *id;
  }
  if (!found.has_value()) {
    return absl::NotFoundError(absl::StrCat("the certificate has no subject alternative name ",
                                            "URI:", kUriScheme, "ROLE/INDEX"));
  }
  return *found;
}

std::string TokenDigest(absl::string_view token) { return absl::BytesToHexString(Sha256(token)); }

absl::StatusOr<TokenIdentities> TokenIdentities::Parse(absl::string_view text) {
  TokenIdentities out;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    auto bad = [line_number](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", what));
    };
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) return bad("want 'ROLE/INDEX SHA256-HEX' (two fields)");
    absl::StatusOr<TaskIdentity> id = ParseIdentity(fields[0]);
    if (!id.ok()) return bad(id.status().message());
    const absl::string_view hex = fields[1];
    if (hex.size() != 2 * kDigestBytes ||
        !std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); })) {
      return bad(absl::StrCat("the digest of ", id->ToString(), " is not 64 hex digits"));
    }
    Entry e{*id, absl::HexStringToBytes(absl::AsciiStrToLower(hex))};
    for (const Entry& other : out.entries_) {
      // A task listed twice has two tokens: its old and new one while it
      // rotates them (docs/security.md).
      if (other.digest == e.digest) {
        return bad(absl::StrCat(e.id.ToString(), " has the token of ", other.id.ToString()));
      }
    }
    out.entries_.push_back(std::move(e));
  }
  if (out.entries_.empty()) {
    return absl::InvalidArgumentError("no identities listed (want 'ROLE/INDEX SHA256-HEX' lines)");
  }
  return out;
}

std::optional<TaskIdentity> TokenIdentities::Find(absl::string_view token) const {
  const std::string digest = Sha256(token);
  std::optional<TaskIdentity> found;
  for (const Entry& e : entries_) {
    // Both kDigestBytes long (Parse, Sha256): OpenSSL's constant-time compare.
    if (CRYPTO_memcmp(digest.data(), e.digest.data(), kDigestBytes) == 0) found = e.id;
  }
  return found;
}

}  // namespace pscluster
