// pscluster-health-probe: asks the standard grpc.health.v1 service of a
// daemon whether it serves, for container health checks (Compose has no gRPC
// check of its own, and Debian 12 packages no grpc_health_probe).
//
//   pscluster-health-probe [HOST:]PORT [--timeout_ms=N]
//
// Exit status: 0 SERVING; 1 anything else (not serving, unreachable,
// timeout), with the reason on stderr; 2 bad arguments.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/rpc.h"

namespace {

int Usage(const std::string& message) {
  std::fprintf(
      stderr,
      "error: %s\nusage: pscluster-health-probe [HOST:]PORT [--timeout_ms=N]\n",
      message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string address;
  long timeout_ms = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: pscluster-health-probe [HOST:]PORT [--timeout_ms=N]\n"
          "Exit 0 when the grpc.health.v1 service at HOST:PORT (default host\n"
          "127.0.0.1) answers SERVING within N ms (default 2000), else 1.\n");
      return 0;
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

  std::shared_ptr<grpc::Channel> channel = pscluster::MakeChannel(address);
  if (!pscluster::IsServing(*channel, std::chrono::milliseconds(timeout_ms))) {
    std::fprintf(stderr, "%s: not serving (no SERVING answer within %ld ms)\n",
                 address.c_str(), timeout_ms);
    return 1;
  }
  return 0;
}
