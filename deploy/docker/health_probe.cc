// pscluster-health-probe: asks the standard grpc.health.v1 service of a
// daemon whether it serves, for container health checks (Compose has no gRPC
// check of its own, and Debian 12 packages no grpc_health_probe).
//
//   pscluster-health-probe [HOST:]PORT [--service=NAME] [--timeout_ms=N]
//       [--tls_cert=F --tls_key=F [--tls_ca=F] [--tls_server_name=NAME]]
//
// --service: "" (the default) asks whether the process is up;
// "pscluster.Ready" whether the task is ready for its role
// (common/task_server.h, docs/observability.md).
//
// The health service needs no cluster token; with TLS on
// (docs/security.md) the probe needs the daemons' TLS flags: a mutual-TLS server
// accepts no connection without a client certificate.
//
// Exit status: 0 SERVING; 1 anything else (not serving, unreachable,
// timeout), with the reason on stderr; 2 bad arguments.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/rpc.h"
#include "common/security.h"

namespace {

constexpr char kUsage[] =
    "usage: pscluster-health-probe [HOST:]PORT [--service=NAME] [--timeout_ms=N]\n"
    "           [--tls_cert=FILE --tls_key=FILE [--tls_ca=FILE] [--tls_server_name=NAME]]\n";

int Usage(const std::string& message) {
  std::fprintf(stderr, "error: %s\n%s", message.c_str(), kUsage);
  return 2;
}

// The value of "--name=value" in `arg` when it is that flag.
bool FlagValue(const std::string& arg, const std::string& name, std::string* value) {
  const std::string prefix = "--" + name + "=";
  if (arg.rfind(prefix, 0) != 0) return false;
  *value = arg.substr(prefix.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string address;
  std::string service;
  long timeout_ms = 2000;
  pscluster::SecurityFlags tls;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "%s"
          "Exit 0 when the grpc.health.v1 service at HOST:PORT (default host\n"
          "127.0.0.1) answers SERVING for --service within N ms (default 2000),\n"
          "else 1. --service=\"\" (the default): the process is up;\n"
          "--service=pscluster.Ready: the task is ready for its role.\n"
          "With TLS on, give the daemons' --tls_cert, --tls_key, --tls_ca (and\n"
          "--tls_server_name); the health service needs no cluster token.\n",
          kUsage);
      return 0;
    }
    if (FlagValue(arg, "tls_cert", &tls.tls_cert) || FlagValue(arg, "tls_key", &tls.tls_key) ||
        FlagValue(arg, "tls_ca", &tls.tls_ca) ||
        FlagValue(arg, "tls_server_name", &tls.tls_server_name) ||
        FlagValue(arg, "service", &service)) {
      continue;
    }
    if (arg.rfind("--timeout_ms=", 0) == 0) {
      char* end = nullptr;
      timeout_ms = std::strtol(arg.c_str() + 13, &end, 10);
      if (*end != '\0' || timeout_ms < 1)
        return Usage("bad value in '" + arg + "'");
    } else if (arg.rfind("--", 0) == 0) {
      return Usage("unknown flag '" + arg + "'");
    } else if (!address.empty()) {
      return Usage("more than one address ('" + address + "', '" + arg + "')");
    } else {
      address = arg;
    }
  }
  if (address.empty()) return Usage("no address");
  if (address.find(':') == std::string::npos) address = "127.0.0.1:" + address;

  absl::StatusOr<pscluster::SecurityConfig> security =
      pscluster::LoadSecurityConfig(tls, "grpc", "the command line");
  if (!security.ok()) return Usage(std::string(security.status().message()));
  pscluster::RpcOptions options;
  options.security = std::make_shared<const pscluster::SecurityConfig>(*std::move(security));
  std::shared_ptr<grpc::Channel> channel = pscluster::MakeChannel(address, options);
  if (!pscluster::IsServing(*channel, std::chrono::milliseconds(timeout_ms), service)) {
    std::fprintf(stderr, "%s: service \"%s\" not serving (no SERVING answer within %ld ms)\n",
                 address.c_str(), service.c_str(), timeout_ms);
    return 1;
  }
  return 0;
}
