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
// accepts no connection without a client certificate. Without --tls_cert,
// PSCLUSTER_IDENTITY_DIR (the entrypoint's per-task identities) gives them:
// its ca.pem, and the first ROLE-INDEX.pem there (by name) with its .key
// (any task's: the health service checks no identity);
// PSCLUSTER_TLS_SERVER_NAME, the --tls_server_name.
//
// Exit status: 0 SERVING; 1 anything else (not serving, unreachable,
// timeout), with the reason on stderr; 2 bad arguments.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

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

// The TLS flags of PSCLUSTER_IDENTITY_DIR, where set and --tls_cert is not
// given; false with *why when the folder holds no certificate and key.
bool IdentityDirFlags(pscluster::SecurityFlags* tls, std::string* why) {
  const char* dir = std::getenv("PSCLUSTER_IDENTITY_DIR");
  if (dir == nullptr || *dir == '\0' || !tls->tls_cert.empty()) return true;
  const std::filesystem::path d(dir);
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(d, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != "ca.pem" && entry.path().extension() == ".pem") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::filesystem::path key = d / (name.substr(0, name.size() - 4) + ".key");
    if (!std::filesystem::exists(key, ec)) continue;
    tls->tls_cert = (d / name).string();
    tls->tls_key = key.string();
    if (tls->tls_ca.empty()) tls->tls_ca = (d / "ca.pem").string();
    const char* server = std::getenv("PSCLUSTER_TLS_SERVER_NAME");
    if (tls->tls_server_name.empty() && server != nullptr) tls->tls_server_name = server;
    return true;
  }
  *why = "PSCLUSTER_IDENTITY_DIR=" + std::string(dir) +
         (ec ? ": " + ec.message() : " holds no ROLE-INDEX.pem with its .key");
  return false;
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
          "--tls_server_name); the health service needs no cluster token.\n"
          "Without --tls_cert, PSCLUSTER_IDENTITY_DIR gives them (its ca.pem, its\n"
          "first ROLE-INDEX.pem and .key), PSCLUSTER_TLS_SERVER_NAME the server name.\n",
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
  if (std::string why; !IdentityDirFlags(&tls, &why)) return Usage(why);
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
