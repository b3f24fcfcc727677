// Transport security and the shared cluster token, for every connection.
//
// A SecurityConfig holds this task's TLS material (PEM text, not paths) and
// the cluster token. LoadSecurityConfig builds one from the flags' values
// and TF_CONFIG's rpc_layer. Each daemon's main installs it once with
// SetProcessSecurity, before it makes any channel or server; MakeChannel
// and TaskServer (common/rpc.h, common/task_server.h) and CheckAuth read it.
// This process-wide value is a deliberate exception to "configuration is
// passed in": channels are made deep inside the clients, and every handler
// of every service must check the same token.
//
// Every service handler of ours starts with
//   if (grpc::Status s = CheckAuth(ctx); !s.ok()) return s;
// so that a call without the right token is refused (UNAUTHENTICATED)
// before anything is done. The standard grpc.health.v1 service has no such
// check: probes cannot send a token.
//
// All functions are thread-safe.
#ifndef PSCLUSTER_COMMON_SECURITY_H_
#define PSCLUSTER_COMMON_SECURITY_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/authorization.h"
#include "common/identity.h"

namespace pscluster {

// The metadata key that carries "Bearer <token>" on every call.
inline constexpr char kAuthMetadataKey[] = "authorization";

// The flags' values, as given (paths, unread).
struct SecurityFlags {
  std::string tls_cert;         // --tls_cert: this task's certificate chain
  std::string tls_key;          // --tls_key: its private key
  std::string tls_ca;           // --tls_ca: CA that signs every task's cert
  std::string tls_server_name;  // --tls_server_name: name checked in servers' certs
  std::string auth_token_file;  // --auth_token_file: the shared token, or this task's own
  // --auth_identities_file: which identity each task's token is (identity.h)
  std::string auth_identities_file;
  bool authorize = false;  // --authorize: each call checked against the table
};

struct SecurityConfig {
  // TLS on every connection. Then cert_pem and key_pem are set.
  bool tls = false;
  std::string cert_pem;
  std::string key_pem;
  // Empty: servers ask no client certificate and clients verify servers
  // against the system's roots. Set: mutual TLS, both sides verified
  // against this CA.
  std::string ca_pem;
  // Non-empty: clients check this name in the server's certificate instead
  // of the host part of the address they dial.
  std::string server_name;
  // Empty: calls carry no token and servers require none.
  std::string token;
  // Set: each task has a token of its own (`token`), and a call's token
  // must be one of these; it is the caller's identity.
  std::shared_ptr<const TokenIdentities> identities;
  // Each call authorized by the caller's identity (common/authorization.h):
  // its certificate's (mutual TLS) and its token's (`identities`); where
  // both are there they must agree.
  bool authorize = false;
  // Set by SetProcessSecurity: this is (or was) the process's config.
  // Whoever holds it reads the token anew from ProcessSecurity() when it
  // sends one (CurrentToken), so a reloaded token (ReloadSecurity) takes
  // effect on channels and connections made before.
  bool process = false;

  bool mutual_tls() const { return tls && !ca_pem.empty(); }
};

// The token to send under `config`: the process's current one when `config`
// is the process's, else its own.
std::string CurrentToken(const SecurityConfig& config);

// Reads the flags' files again and installs what changed, for calls,
// handshakes and data-plane connections from then on (the connections open
// stay as they were made and authenticated): tokens and the identities
// list at once; a certificate, key or CA within a second (gRPC's servers
// and channels read them as ReloadableCertificates, the data plane makes
// its TLS contexts anew). Refused, keeping the config in use, when a file
// fails LoadSecurityConfig's checks (a key that is not the certificate's,
// a certificate the CA did not sign), when the files would change the
// mode (TLS on or off, mutual TLS, a token or not, identities or not), or
// when they name another task (CheckOwnIdentity). OK with a one-line
// summary in *what.
absl::Status ReloadSecurity(const SecurityFlags& flags, absl::string_view rpc_layer,
                            absl::string_view source, const std::optional<TaskIdentity>& self,
                            std::string* what);

// Reads the files the flags name. TLS is on when `rpc_layer` is "grpc+tls"
// (then --tls_cert and --tls_key are required) or when TLS flags are given.
// Errors are InvalidArgument naming the flag and the file, e.g.
// "--auth_token_file=/run/secrets/token: the file is empty"; `source`
// ("TF_CONFIG" or a path) names where rpc_layer came from.
absl::StatusOr<SecurityConfig> LoadSecurityConfig(const SecurityFlags& flags,
                                                  absl::string_view rpc_layer,
                                                  absl::string_view source);

// A token file's content without surrounding whitespace. InvalidArgument
// naming `path` when it cannot be read, is empty, or holds characters that
// gRPC metadata cannot carry (anything but printable ASCII).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// One line for logs: "mutual TLS, cluster token required".
std::string DescribeSecurity(const SecurityConfig& config);

// The process's configuration; plaintext and no token until set. Its
// certificates are what the process's servers and channels use from then
// on, the ones made before included (see ReloadSecurity). Should they not
// be installed (TrySetProcessSecurity's error), SetProcessSecurity logs it,
// and credentials made from then on hold `config`'s material, fixed.
void SetProcessSecurity(SecurityConfig config);
absl::Status TrySetProcessSecurity(SecurityConfig config);
std::shared_ptr<const SecurityConfig> ProcessSecurity();

// Credentials for a channel (client side) and for a listening port.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const SecurityConfig& config);
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const SecurityConfig& config);

// Channel arguments the config needs (the TLS target name override).
void AddSecurityChannelArgs(const SecurityConfig& config, grpc::ChannelArguments* args);

// Interceptors for a channel: one that adds the token to every call when
// `config` has one (it works with and without TLS), else none.
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
MakeClientInterceptors(const SecurityConfig& config);

// Every handler's first check, naming its method. OK when the process
// needs no token or the call carries the right one (the shared token, or
// with `identities` one of the tasks'), else UNAUTHENTICATED (the message
// never repeats what was sent; the comparison takes the same time wherever
// the tokens differ). With `authorize`, the caller's identity must be one
// the method's rule allows, else PERMISSION_DENIED naming the identity and
// the method (counted by the denied-call hook, logged once per peer); then
// *caller (when not null) is set to it, for the handler's "as itself"
// checks (CheckActsAsItself). Without `authorize` *caller is left empty.
grpc::Status CheckAuth(const grpc::ServerContextBase* ctx, Rpc rpc,
                       std::optional<TaskIdentity>* caller = nullptr);

// CheckAuth's two halves, for a transport of its own (the ps's tcp data
// plane, whose hello carries the token). IdentifyCaller: the caller's
// token (nullopt: it sent none) and, under mutual TLS, its certificate
// (PEM; "" when none) give *caller (with `authorize`; else it stays empty);
// UNAUTHENTICATED for a missing or wrong token, PERMISSION_DENIED when
// `authorize` finds no identity or two that disagree (counted under
// `method`, for the peer named `peer`). AuthorizeCaller: the rule of `rpc`
// for that identity (OK without `authorize`).
grpc::Status IdentifyCaller(const SecurityConfig& config, const std::optional<std::string>& token,
                            const std::string& peer_pem, const std::string& peer,
                            absl::string_view method, std::optional<TaskIdentity>* caller);
grpc::Status AuthorizeCaller(const SecurityConfig& config, Rpc rpc,
                             const std::optional<TaskIdentity>& caller, const std::string& peer);

// CheckAuth, then CheckActsAsItself: a caller with `role` must name itself
// in the request (`claimed_index`, its worker_index).
grpc::Status CheckAuth(const grpc::ServerContextBase* ctx, Rpc rpc, Role role,
                       int64_t claimed_index);

// With an identity (authorize on): PERMISSION_DENIED, counted and logged as
// CheckAuth's, when the caller has `role` but calls `rpc` as another task of
// it (`claimed_index`, the request's worker_index). OK otherwise.
grpc::Status CheckActsAsItself(const grpc::ServerContextBase* ctx,
                               const std::optional<TaskIdentity>& caller, Rpc rpc, Role role,
                               int64_t claimed_index);
// The same for a caller of another transport, named `peer` in the log.
grpc::Status CheckActsAsItself(const std::string& peer, const std::optional<TaskIdentity>& caller,
                               Rpc rpc, Role role, int64_t claimed_index);

// Called once per refused call with the method and the caller's role ("none"
// when it has no identity): the daemons count pscluster_denied_calls_total
// {method, role} with it. Set once, before the servers start.
void SetDeniedCallHook(std::function<void(const std::string& method, const std::string& role)>);

// The process's own identity must be the one its TF_CONFIG task names: its
// certificate's (mutual TLS) and its token's (with `identities`). With
// `authorize` and neither source: InvalidArgument naming what is missing.
absl::Status CheckOwnIdentity(const SecurityConfig& config, const TaskIdentity& self);

// The shared token's rule as CheckAuth applies it (and the data plane's
// hello): `header` is the call's authorization metadata (nullptr when
// absent), `expected` the token ("" = none needed).
grpc::Status CheckBearerToken(const absl::string_view* header, absl::string_view expected);

// OpenSSL's queued errors as one line, clearing the queue; `if_none` when
// there are none. For messages about certificates and TLS handshakes (here
// and in the data plane's own TLS, wire/data_plane.h).
std::string OpenSslErrors(absl::string_view if_none);

// Equality whose running time depends only on `expected`'s length.
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_SECURITY_H_
