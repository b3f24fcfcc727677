#include "common/security.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/reloadable_certificates.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace pscluster {
namespace {

constexpr size_t kMaxTokenBytes = 4096;
constexpr size_t kMaxPemBytes = 1 << 20;
constexpr char kBearer[] = "Bearer ";

absl::Status FlagError(absl::string_view flag, absl::string_view value, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": ", problem));
}

// The whole file, or an error naming the flag and the file.
absl::StatusOr<std::string> ReadSmallFile(absl::string_view flag, const std::string& path,
                                          size_t max_bytes) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return FlagError(flag, path,
                     absl::StrCat("cannot read: ", errno ? std::strerror(errno) : "open failed"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return FlagError(flag, path, "cannot read: I/O error");
  std::string text = ss.str();
  if (text.size() > max_bytes) {
    return FlagError(flag, path,
                     absl::StrCat("is ", text.size(), " bytes; at most ", max_bytes, " expected"));
  }
  return text;
}


struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};

std::unique_ptr<BIO, BioFree> MemBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Checks what gRPC would otherwise only report as a failed handshake (or
// a port it "cannot bind"): the PEM parses, the key is the certificate's,
// and the CA, when given, signed the certificate.
absl::Status CheckTlsMaterial(const SecurityFlags& flags, const SecurityConfig& c) {
  ERR_clear_error();
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(MemBio(c.cert_pem).get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return FlagError("tls_cert", flags.tls_cert,
                     absl::StrCat("no PEM certificate in it (",
                                  OpenSslErrors("not valid PEM"), ")"));
  }
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(MemBio(c.key_pem).get(), nullptr, nullptr, nullptr));
  if (!key) {
    return FlagError("tls_key", flags.tls_key,
                     absl::StrCat("no unencrypted PEM private key in it (",
                                  OpenSslErrors("not valid PEM"), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return FlagError("tls_key", flags.tls_key,
                     absl::StrCat("is not the private key of --tls_cert=", flags.tls_cert));
  }
  if (c.ca_pem.empty()) return absl::OkStatus();
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  std::unique_ptr<BIO, BioFree> ca_bio = MemBio(c.ca_pem);
  int num_ca = 0;
  while (X509* ca = PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store.get(), ca);
    X509_free(ca);
    ++num_ca;
  }
  ERR_clear_error();  // the end of the PEM stream reads as an error
  if (num_ca == 0) {
    return FlagError("tls_ca", flags.tls_ca, "no PEM certificate in it");
  }
  // The chain the task presents: its certificate plus any intermediates.
  STACK_OF(X509)* chain = sk_X509_new_null();
  std::unique_ptr<BIO, BioFree> chain_bio = MemBio(c.cert_pem);
  X509_free(PEM_read_bio_X509(chain_bio.get(), nullptr, nullptr, nullptr));  // the leaf
  while (X509* extra = PEM_read_bio_X509(chain_bio.get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(chain, extra);
  }
  ERR_clear_error();
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), chain);
  const int ok = X509_verify_cert(ctx.get());
  const int err = X509_STORE_CTX_get_error(ctx.get());
  sk_X509_pop_free(chain, X509_free);
  ERR_clear_error();
  if (ok != 1) {
    return FlagError("tls_cert", flags.tls_cert,
                     absl::StrCat("does not verify against --tls_ca=", flags.tls_ca, ": ",
                                  X509_verify_cert_error_string(err)));
  }
  return absl::OkStatus();
}

class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(std::string header) : header_(std::move(header)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kAuthMetadataKey, header_});
    }
    methods->Proceed();
  }

 private:
  const std::string header_;  // the metadata must outlive the call's send
};

// Adds the token to each call: `config`'s, or the process's current one
// when `config` is the process's (a reloaded token is sent from then on).
class TokenInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const SecurityConfig& config)
      : follow_process_(config.process), header_(absl::StrCat(kBearer, config.token)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    // gRPC owns and deletes it.
    return new TokenInterceptor(follow_process_ ? absl::StrCat(kBearer, ProcessSecurity()->token)
                                                : header_);
  }

 private:
  const bool follow_process_;
  const std::string header_;
};

absl::Mutex process_mu;
std::shared_ptr<const SecurityConfig>* process_config ABSL_GUARDED_BY(process_mu) = nullptr;
// The process's certificate, key and CA as gRPC reads them: what its
// servers and channels present and trust, from then on, after a reload.
// Null before the first TLS config, or when it could not be made (then
// credentials hold the config's material, fixed). Never freed: gRPC's
// credentials read it for the life of the process.
ReloadableCertificates* process_certificates ABSL_GUARDED_BY(process_mu) = nullptr;

// Puts `config`'s certificates where the process's credentials read them.
absl::Status InstallProcessCertificates(const SecurityConfig& config)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(process_mu) {
  if (!config.tls) return absl::OkStatus();
  if (process_certificates != nullptr && process_certificates->has_ca() == !config.ca_pem.empty()) {
    return process_certificates->Replace(config.cert_pem, config.key_pem, config.ca_pem);
  }
  // The first TLS config (or, in tests, one that adds or drops the CA).
  absl::StatusOr<std::unique_ptr<ReloadableCertificates>> made =
      ReloadableCertificates::Create(config.cert_pem, config.key_pem, config.ca_pem);
  if (!made.ok()) return made.status();
  process_certificates = made->release();
  return absl::OkStatus();
}

// The provider of `config`'s certificates for gRPC's TLS credentials, and
// whether it has root certificates: the process's reloadable ones when
// `config` is the process's, else its own, fixed. Null when `config` has
// neither a certificate nor a CA (a client trusting the system's roots).
std::shared_ptr<grpc::experimental::CertificateProviderInterface> CertificateProvider(
    const SecurityConfig& config, bool* has_ca) {
  if (config.process) {
    absl::ReaderMutexLock lock(&process_mu);
    if (process_certificates != nullptr) {
      *has_ca = process_certificates->has_ca();
      return process_certificates->provider();
    }
  }
  *has_ca = !config.ca_pem.empty();
  if (config.cert_pem.empty() && config.ca_pem.empty()) return nullptr;
  std::vector<grpc::experimental::IdentityKeyCertPair> pairs;
  if (!config.cert_pem.empty()) pairs.push_back({config.key_pem, config.cert_pem});
  return std::make_shared<grpc::experimental::StaticDataCertificateProvider>(config.ca_pem, pairs);
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  if (path.empty()) return FlagError("auth_token_file", path, "no file named");
  absl::StatusOr<std::string> text = ReadSmallFile("auth_token_file", path, kMaxTokenBytes);
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) return FlagError("auth_token_file", path, "the file is empty");
  for (char ch : token) {
    if (ch < 0x20 || ch > 0x7e) {
      return FlagError("auth_token_file", path,
                       "holds a character other than printable ASCII (gRPC metadata "
                       "cannot carry it); use e.g. `openssl rand -hex 32`");
    }
  }
  return token;
}

absl::StatusOr<SecurityConfig> LoadSecurityConfig(const SecurityFlags& flags,
                                                  absl::string_view rpc_layer,
                                                  absl::string_view source) {
  SecurityConfig c;
  const bool tls_flags = !flags.tls_cert.empty() || !flags.tls_key.empty() ||
                         !flags.tls_ca.empty() || !flags.tls_server_name.empty();
  c.tls = rpc_layer == "grpc+tls" || tls_flags;
  if (c.tls) {
    // Every task is a server and a client, so each needs its own pair.
    const std::string why = tls_flags ? std::string("TLS flags are given")
                                      : absl::StrCat(source, " sets rpc_layer \"grpc+tls\"");
    if (flags.tls_cert.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_cert is required: ", why,
                       " (give --tls_cert, --tls_key and --tls_ca; "
                       "deploy/tls/make_test_ca.sh makes a test set)"));
    }
    if (flags.tls_key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_key is required: ", why, " (the key of --tls_cert=", flags.tls_cert, ")"));
    }
    absl::StatusOr<std::string> pem = ReadSmallFile("tls_cert", flags.tls_cert, kMaxPemBytes);
    if (!pem.ok()) return pem.status();
    c.cert_pem = *std::move(pem);
    pem = ReadSmallFile("tls_key", flags.tls_key, kMaxPemBytes);
    if (!pem.ok()) return pem.status();
    c.key_pem = *std::move(pem);
    if (!flags.tls_ca.empty()) {
      pem = ReadSmallFile("tls_ca", flags.tls_ca, kMaxPemBytes);
      if (!pem.ok()) return pem.status();
      c.ca_pem = *std::move(pem);
    }
    c.server_name = flags.tls_server_name;
    PSCLUSTER_RETURN_IF_ERROR(CheckTlsMaterial(flags, c));
  }
  if (!flags.auth_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(flags.auth_token_file);
    if (!token.ok()) return token.status();
    c.token = *std::move(token);
  }
  if (!flags.auth_identities_file.empty()) {
    if (c.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_identities_file=", flags.auth_identities_file,
                       " needs --auth_token_file: this task's own token, one of the file's"));
    }
    absl::StatusOr<std::string> text =
        ReadSmallFile("auth_identities_file", flags.auth_identities_file, 1 << 24);
    if (!text.ok()) return text.status();
    absl::StatusOr<TokenIdentities> ids = TokenIdentities::Parse(*text);
    if (!ids.ok()) {
      return FlagError("auth_identities_file", flags.auth_identities_file, ids.status().message());
    }
    c.identities = std::make_shared<const TokenIdentities>(*std::move(ids));
  }
  c.authorize = flags.authorize;
  if (c.authorize && !c.mutual_tls() && c.identities == nullptr) {
    return absl::InvalidArgumentError(
        "--authorize needs the callers' identities: mutual TLS with certificates naming their "
        "tasks (URI:pscluster://ROLE/INDEX; --tls_cert, --tls_key, --tls_ca) or a token per "
        "task (--auth_token_file and --auth_identities_file); deploy/tls/make_test_ca.sh "
        "--tasks writes both");
  }
  return c;
}

absl::Status CheckOwnIdentity(const SecurityConfig& config, const TaskIdentity& self) {
  if (config.mutual_tls() && config.authorize) {
    absl::StatusOr<TaskIdentity> mine = IdentityFromCertificate(config.cert_pem);
    if (!mine.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--authorize: --tls_cert must name this task (URI:", IdentityUri(self),
                       "): ", mine.status().message()));
    }
    if (*mine != self) {
      return absl::InvalidArgumentError(absl::StrCat("--tls_cert names ", mine->ToString(),
                                                     ", but this task is ", self.ToString()));
    }
  }
  if (config.identities != nullptr) {
    std::optional<TaskIdentity> mine = config.identities->Find(config.token);
    if (!mine.has_value()) {
      return absl::InvalidArgumentError(
          "--auth_token_file: this task's token is not in --auth_identities_file");
    }
    if (*mine != self) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_token_file: --auth_identities_file lists this token as ",
                       mine->ToString(), ", but this task is ", self.ToString()));
    }
  }
  return absl::OkStatus();
}

std::string DescribeSecurity(const SecurityConfig& config) {
  std::string out = config.mutual_tls() ? "mutual TLS"
                    : config.tls        ? "TLS (servers only are verified)"
                                        : "plaintext";
  if (!config.server_name.empty()) {
    absl::StrAppend(&out, " checking server name \"", config.server_name, "\"");
  }
  absl::StrAppend(&out, config.token.empty()           ? ", no cluster token"
                        : config.identities != nullptr ? ", a token per task required"
                                                       : ", cluster token required");
  if (config.authorize) absl::StrAppend(&out, ", each call authorized by the caller's identity");
  return out;
}

void SetProcessSecurity(SecurityConfig config) {
  if (absl::Status s = TrySetProcessSecurity(std::move(config)); !s.ok()) {
    spdlog::warn("{}; the certificates in use stay until a restart", std::string(s.message()));
  }
}

absl::Status TrySetProcessSecurity(SecurityConfig config) {
  config.process = true;
  absl::MutexLock lock(&process_mu);
  const absl::Status installed = InstallProcessCertificates(config);
  if (!installed.ok() && process_config != nullptr && (*process_config)->tls) {
    // gRPC keeps the certificates it has; so does everything else.
    config.cert_pem = (*process_config)->cert_pem;
    config.key_pem = (*process_config)->key_pem;
    config.ca_pem = (*process_config)->ca_pem;
  }
  auto value = std::make_shared<const SecurityConfig>(std::move(config));
  // Never freed: handlers may still read it while the process exits.
  if (process_config == nullptr) {
    process_config = new std::shared_ptr<const SecurityConfig>(std::move(value));
  } else {
    *process_config = std::move(value);
  }
  return installed;
}

std::shared_ptr<const SecurityConfig> ProcessSecurity() {
  {
    absl::ReaderMutexLock lock(&process_mu);
    if (process_config != nullptr) return *process_config;
  }
  static const auto* const kNone =
      new std::shared_ptr<const SecurityConfig>(std::make_shared<const SecurityConfig>());
  return *kNone;
}

std::string CurrentToken(const SecurityConfig& config) {
  return config.process ? ProcessSecurity()->token : config.token;
}

absl::Status ReloadSecurity(const SecurityFlags& flags, absl::string_view rpc_layer,
                            absl::string_view source, const std::optional<TaskIdentity>& self,
                            std::string* what) {
  absl::StatusOr<SecurityConfig> fresh = LoadSecurityConfig(flags, rpc_layer, source);
  if (!fresh.ok()) return fresh.status();
  if (self.has_value()) PSCLUSTER_RETURN_IF_ERROR(CheckOwnIdentity(*fresh, *self));
  std::shared_ptr<const SecurityConfig> now = ProcessSecurity();
  if (fresh->tls != now->tls || fresh->mutual_tls() != now->mutual_tls() ||
      fresh->token.empty() != now->token.empty() ||
      (fresh->identities == nullptr) != (now->identities == nullptr) ||
      fresh->authorize != now->authorize) {
    return absl::FailedPreconditionError(
        "the files would change the security mode (TLS, mutual TLS, a token, identities): "
        "restart the task for that");
  }
  std::vector<std::string> changed;
  if (fresh->cert_pem != now->cert_pem) changed.push_back("a new certificate");
  if (fresh->key_pem != now->key_pem) changed.push_back("a new key");
  if (fresh->ca_pem != now->ca_pem) changed.push_back("a new CA");
  changed.push_back(fresh->token != now->token ? "a new token" : "the same token");
  *what = absl::StrJoin(changed, ", ");
  if (fresh->identities != nullptr) {
    absl::StrAppend(what, ", ", fresh->identities->size(), " tokens listed");
  }
  return TrySetProcessSecurity(*std::move(fresh));
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const SecurityConfig& config) {
  if (!config.tls) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions o;
  bool has_ca = false;
  if (auto provider = CertificateProvider(config, &has_ca); provider != nullptr) {
    o.set_certificate_provider(std::move(provider));
    if (!config.cert_pem.empty()) o.watch_identity_key_cert_pairs();
    if (has_ca) o.watch_root_certs();  // else the system's roots
  }
  return grpc::experimental::TlsCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const SecurityConfig& config) {
  if (!config.tls) return grpc::InsecureServerCredentials();
  bool has_ca = false;
  grpc::experimental::TlsServerCredentialsOptions o(CertificateProvider(config, &has_ca));
  o.watch_identity_key_cert_pairs();
  if (has_ca) {
    o.watch_root_certs();
    o.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    o.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(o);
}

void AddSecurityChannelArgs(const SecurityConfig& config, grpc::ChannelArguments* args) {
  if (config.tls && !config.server_name.empty()) {
    args->SetSslTargetNameOverride(config.server_name);
  }
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
MakeClientInterceptors(const SecurityConfig& config) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> v;
  if (!config.token.empty()) {
    v.push_back(std::make_unique<TokenInterceptorFactory>(config));
  }
  return v;
}

bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  // Every byte of `expected` is visited whatever `given` holds; a shorter
  // `given` is read cyclically so no index depends on where they differ.
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  const size_t n = given.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = n == 0 ? 0 : static_cast<unsigned char>(given[i % n]);
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

namespace {

// What a call's authorization metadata (`header`, null when absent) sends
// as its token: nullopt for none; "\n", which no token is (tokens are
// printable ASCII, ReadTokenFile), for a header that is not "Bearer ...".
std::optional<std::string> TokenOfHeader(const absl::string_view* header) {
  if (header == nullptr) return std::nullopt;
  absl::string_view given = *header;
  return absl::ConsumePrefix(&given, kBearer) ? std::string(given) : std::string("\n");
}

// The shared token's rule: the token sent (nullopt: none) is `expected`
// ("" = none needed); UNAUTHENTICATED otherwise, never echoing it.
grpc::Status CheckSharedToken(const std::optional<std::string>& token, absl::string_view expected) {
  if (expected.empty()) return grpc::Status::OK;
  if (!token.has_value()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this cluster requires a token: the call carries no "
                        "authorization metadata (give --auth_token_file)");
  }
  if (!ConstantTimeEquals(*token, expected)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the call's cluster token is wrong (check --auth_token_file)");
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status CheckBearerToken(const absl::string_view* header, absl::string_view expected) {
  return CheckSharedToken(TokenOfHeader(header), expected);
}

namespace {

absl::Mutex denied_mu;
std::function<void(const std::string&, const std::string&)>* denied_hook
    ABSL_GUARDED_BY(denied_mu) = nullptr;
absl::flat_hash_set<std::string>* denied_peers ABSL_GUARDED_BY(denied_mu) = nullptr;

// A refused call: counted, logged once per peer, PERMISSION_DENIED.
grpc::Status Deny(const std::string& peer, absl::string_view method,
                  const std::optional<TaskIdentity>& caller, const std::string& why) {
  const std::string role = caller.has_value() ? RoleName(caller->role) : "none";
  bool first = false;
  std::function<void(const std::string&, const std::string&)> hook;
  {
    absl::MutexLock lock(&denied_mu);
    if (denied_peers == nullptr) denied_peers = new absl::flat_hash_set<std::string>();
    if (denied_peers->size() < 4096) first = denied_peers->insert(peer).second;
    if (denied_hook != nullptr) hook = *denied_hook;
  }
  if (hook) hook(std::string(method), role);
  if (first) spdlog::warn("refused {} from {} ({}): {}", std::string(method), peer, role, why);
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why);
}

// Who may call `rule`, for messages: "the chief or a ps".
std::string Callers(const RpcRule& rule) {
  std::string out;
  for (Role r : {Role::kChief, Role::kWorker, Role::kPs, Role::kEvaluator}) {
    if (!Allows(rule, r)) continue;
    if (!out.empty()) out += " or ";
    out += r == Role::kChief       ? "the chief"
           : r == Role::kEvaluator ? "the evaluator"
                                   : absl::StrCat("a ", RoleName(r));
  }
  return out;
}

// The identity in a peer's certificate, parsed once per certificate.
absl::StatusOr<TaskIdentity> CachedCertificateIdentity(const std::string& pem) {
  static absl::Mutex mu;
  static auto* cache = new absl::flat_hash_map<std::string, absl::StatusOr<TaskIdentity>>();
  absl::MutexLock lock(&mu);
  auto it = cache->find(pem);
  if (it != cache->end()) return it->second;
  if (cache->size() >= 1024) cache->clear();
  absl::StatusOr<TaskIdentity> id = IdentityFromCertificate(pem);
  cache->emplace(pem, id);
  return id;
}

// The peer's certificate under mutual TLS (gRPC's auth context), or "".
std::string PeerCertificatePem(const grpc::ServerContextBase* ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth == nullptr) return "";
  std::vector<grpc::string_ref> pems = auth->FindPropertyValues("x509_pem_cert");
  return pems.empty() ? "" : std::string(pems[0].data(), pems[0].size());
}

}  // namespace

void SetDeniedCallHook(std::function<void(const std::string&, const std::string&)> hook) {
  absl::MutexLock lock(&denied_mu);
  delete denied_hook;
  denied_hook = new std::function<void(const std::string&, const std::string&)>(std::move(hook));
}

grpc::Status IdentifyCaller(const SecurityConfig& config, const std::optional<std::string>& token,
                            const std::string& peer_pem, const std::string& peer,
                            absl::string_view method, std::optional<TaskIdentity>* caller) {
  caller->reset();
  std::optional<TaskIdentity> by_token;
  if (config.identities == nullptr || !token.has_value()) {
    grpc::Status s = CheckSharedToken(token, config.token);
    if (!s.ok()) return s;
  } else {
    // A token of its own: the list says whose.
    by_token = config.identities->Find(*token);
    if (!by_token.has_value()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the call's token is not one of the cluster's tasks' (check "
                          "--auth_token_file and --auth_identities_file)");
    }
  }
  if (!config.authorize) return grpc::Status::OK;
  std::optional<TaskIdentity> id = by_token;
  if (config.mutual_tls()) {
    absl::StatusOr<TaskIdentity> by_cert = peer_pem.empty()
                                               ? absl::NotFoundError("the peer sent no certificate")
                                               : CachedCertificateIdentity(peer_pem);
    if (!by_cert.ok()) {
      return Deny(peer, method, by_token,
                  absl::StrCat("no task identity in the caller's certificate: ",
                               by_cert.status().message()));
    }
    if (by_token.has_value() && *by_token != *by_cert) {
      return Deny(peer, method, *by_cert,
                  absl::StrCat("the caller's certificate names ", by_cert->ToString(),
                               " but its token is ", by_token->ToString(), "'s"));
    }
    id = *by_cert;
  }
  if (!id.has_value()) return Deny(peer, method, id, "the caller has no task identity");
  *caller = id;
  return grpc::Status::OK;
}

grpc::Status AuthorizeCaller(const SecurityConfig& config, Rpc rpc,
                             const std::optional<TaskIdentity>& caller, const std::string& peer) {
  if (!config.authorize) return grpc::Status::OK;
  const RpcRule& rule = RuleOf(rpc);
  if (!caller.has_value())
    return Deny(peer, rule.method, caller, "the caller has no task identity");
  if (!Allows(rule, caller->role)) {
    return Deny(peer, rule.method, caller,
                absl::StrCat(caller->ToString(), " may not call ", rule.method, " (only ",
                             Callers(rule), " may)"));
  }
  return grpc::Status::OK;
}

grpc::Status CheckAuth(const grpc::ServerContextBase* ctx, Rpc rpc,
                       std::optional<TaskIdentity>* caller) {
  if (caller != nullptr) caller->reset();
  std::shared_ptr<const SecurityConfig> config = ProcessSecurity();
  if (config->token.empty() && !config->authorize) return grpc::Status::OK;
  if (ctx == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no call context to check");
  }
  std::optional<std::string> token;
  if (!config->token.empty()) {
    const auto& md = ctx->client_metadata();
    auto it = md.find(kAuthMetadataKey);
    if (it != md.end()) {
      const absl::string_view header(it->second.data(), it->second.size());
      token = TokenOfHeader(&header);
    }
  }
  // Named only in refusals, which only --authorize makes.
  const std::string peer = config->authorize ? ctx->peer() : std::string();
  std::optional<TaskIdentity> id;
  grpc::Status s = IdentifyCaller(
      *config, token,
      config->mutual_tls() && config->authorize ? PeerCertificatePem(ctx) : std::string(), peer,
      RuleOf(rpc).method, &id);
  if (s.ok()) s = AuthorizeCaller(*config, rpc, id, peer);
  if (s.ok() && caller != nullptr) *caller = id;
  return s;
}

grpc::Status CheckActsAsItself(const std::string& peer, const std::optional<TaskIdentity>& caller,
                               Rpc rpc, Role role, int64_t claimed_index) {
  if (!caller.has_value() || caller->role != role || caller->index == claimed_index) {
    return grpc::Status::OK;
  }
  const RpcRule& rule = RuleOf(rpc);
  return Deny(peer, rule.method, caller,
              absl::StrCat(caller->ToString(), " may not call ", rule.method, " as ",
                           RoleName(role), " ", claimed_index, " (a task acts as itself only)"));
}

grpc::Status CheckActsAsItself(const grpc::ServerContextBase* ctx,
                               const std::optional<TaskIdentity>& caller, Rpc rpc, Role role,
                               int64_t claimed_index) {
  return CheckActsAsItself(ctx != nullptr ? ctx->peer() : std::string(), caller, rpc, role,
                           claimed_index);
}

grpc::Status CheckAuth(const grpc::ServerContextBase* ctx, Rpc rpc, Role role,
                       int64_t claimed_index) {
  std::optional<TaskIdentity> caller;
  grpc::Status s = CheckAuth(ctx, rpc, &caller);
  return s.ok() ? CheckActsAsItself(ctx, caller, rpc, role, claimed_index) : s;
}

std::string OpenSslErrors(absl::string_view if_none) {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string(if_none) : out;
}

}  // namespace pscluster
