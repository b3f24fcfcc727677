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

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pscluster {

// The metadata key that carries "Bearer <token>" on every call.
inline constexpr char kAuthMetadataKey[] = "authorization";

// The flags' values, as given (paths, unread).
struct SecurityFlags {
  std::string tls_cert;         // --tls_cert: this task's certificate chain
  std::string tls_key;          // --tls_key: its private key
  std::string tls_ca;           // --tls_ca: CA that signs every task's cert
  std::string tls_server_name;  // --tls_server_name: name checked in servers' certs
  std::string auth_token_file;  // --auth_token_file: the shared token
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

  bool mutual_tls() const { return tls && !ca_pem.empty(); }
};

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

// The process's configuration; plaintext and no token until set.
void SetProcessSecurity(SecurityConfig config);
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

// OK when the process needs no token or the call carries the right one;
// else UNAUTHENTICATED (the message never repeats what was sent). The
// comparison takes the same time wherever the tokens differ.
grpc::Status CheckAuth(const grpc::ServerContextBase* ctx);

// CheckAuth's rule, for tests: `header` is the call's authorization
// metadata (nullptr when absent), `expected` the token ("" = none needed).
grpc::Status CheckBearerToken(const absl::string_view* header, absl::string_view expected);

// OpenSSL's queued errors as one line, clearing the queue; `if_none` when
// there are none. For messages about certificates and TLS handshakes (here
// and in the data plane's own TLS, wire/data_plane.h).
std::string OpenSslErrors(absl::string_view if_none);

// Equality whose running time depends only on `expected`'s length.
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_SECURITY_H_
