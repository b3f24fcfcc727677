// ReloadableCertificates with real gRPC servers and channels on loopback:
// a Replace changes what a server presents and what a client presents and
// trusts, for connections made from then on. Certificates come from
// deploy/tls/make_test_ca.sh (two CAs); every case skips without openssl.
#include "common/reloadable_certificates.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"

namespace pscluster {
namespace {

using grpc::experimental::IdentityKeyCertPair;
using grpc::experimental::StaticDataCertificateProvider;

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Answers every health check with SERVING.
class Healthy final : public grpc::health::v1::Health::Service {
  grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest*,
                     grpc::health::v1::HealthCheckResponse* resp) override {
    resp->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    return grpc::Status::OK;
  }
};

// One CA's files from make_test_ca.sh: a task certificate for 127.0.0.1.
struct Pki {
  std::string cert, key, ca;
};

// The certificate a new channel's server presents, by a health check over
// `creds` ("" when the connection or the call fails).
std::string PresentedCertificate(const std::string& address,
                                 std::shared_ptr<grpc::ChannelCredentials> creds) {
  auto channel = grpc::CreateChannel(address, std::move(creds));
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(3)));
  grpc::health::v1::HealthCheckResponse resp;
  if (!stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok()) return "";
  std::vector<grpc::string_ref> pems = ctx.auth_context()->FindPropertyValues("x509_pem_cert");
  return pems.empty() ? "" : std::string(pems[0].begin(), pems[0].end());
}

// The leaf of a PEM chain (its first certificate), as gRPC reports it.
std::string Leaf(const std::string& chain) {
  const std::string end = "-----END CERTIFICATE-----\n";
  return chain.substr(0, chain.find(end) + end.size());
}

class ReloadableCertificatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("openssl version >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "no openssl on PATH to make the test certificates";
    }
    for (auto [name, pki] : {std::make_pair("a", &a_), std::make_pair("b", &b_)}) {
      const std::string dir = TempDir() + "/reload-" + name;
      const std::string cmd =
          absl::StrCat("deploy/tls/make_test_ca.sh --force ", dir, " >/dev/null 2>&1");
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      *pki = {Read(dir + "/task.pem"), Read(dir + "/task.key"), Read(dir + "/ca.pem")};
    }
  }

  // A server on a free loopback port with `options`' credentials.
  std::unique_ptr<grpc::Server> Serve(const grpc::experimental::TlsServerCredentialsOptions& o,
                                      std::string* address) {
    int port = 0;
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::experimental::TlsServerCredentials(o), &port);
    b.RegisterService(&healthy_);
    std::unique_ptr<grpc::Server> server = b.BuildAndStart();
    *address = absl::StrCat("127.0.0.1:", port);
    return server;
  }

  // Channel credentials that trust `roots` and present `identity` (when set).
  static std::shared_ptr<grpc::ChannelCredentials> Client(const std::string& roots,
                                                          const Pki* identity = nullptr) {
    std::vector<IdentityKeyCertPair> pairs;
    if (identity != nullptr) pairs.push_back({identity->key, identity->cert});
    grpc::experimental::TlsChannelCredentialsOptions o;
    o.set_certificate_provider(std::make_shared<StaticDataCertificateProvider>(roots, pairs));
    o.watch_root_certs();
    if (identity != nullptr) o.watch_identity_key_cert_pairs();
    return grpc::experimental::TlsCredentials(o);
  }

  Healthy healthy_;
  Pki a_, b_;
};

TEST_F(ReloadableCertificatesTest, AServerPresentsTheReplacedCertificateToNewConnections) {
  absl::StatusOr<std::unique_ptr<ReloadableCertificates>> certs =
      ReloadableCertificates::Create(a_.cert, a_.key, "");
  ASSERT_TRUE(certs.ok()) << certs.status();
  EXPECT_FALSE((*certs)->has_ca());
  grpc::experimental::TlsServerCredentialsOptions o((*certs)->provider());
  o.watch_identity_key_cert_pairs();
  std::string address;
  std::unique_ptr<grpc::Server> server = Serve(o, &address);
  ASSERT_NE(server, nullptr);

  // A client that trusts both CAs sees which certificate is presented.
  const std::string both = a_.ca + b_.ca;
  EXPECT_EQ(PresentedCertificate(address, Client(both)), Leaf(a_.cert));
  // A connection made before the Replace stays up.
  auto before = grpc::CreateChannel(address, Client(a_.ca));
  ASSERT_TRUE(IsServing(*before, std::chrono::seconds(3)));

  ASSERT_TRUE((*certs)->Replace(b_.cert, b_.key, "").ok());
  std::string presented;
  const absl::Time give_up = absl::Now() + absl::Seconds(10 * kCertificateRefreshSeconds);
  while ((presented = PresentedCertificate(address, Client(both))) != Leaf(b_.cert) &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(presented, Leaf(b_.cert)) << "the server still presents the first certificate";
  EXPECT_EQ(PresentedCertificate(address, Client(a_.ca)), "") << "a's CA did not sign b's";
  EXPECT_TRUE(IsServing(*before, std::chrono::seconds(3)));
  server->Shutdown();
}

TEST_F(ReloadableCertificatesTest, AClientPresentsAndTrustsTheReplacedOnes) {
  // A mutual-TLS server of CA b that trusts only b.
  grpc::experimental::TlsServerCredentialsOptions o(std::make_shared<StaticDataCertificateProvider>(
      b_.ca, std::vector<IdentityKeyCertPair>{{b_.key, b_.cert}}));
  o.watch_identity_key_cert_pairs();
  o.watch_root_certs();
  o.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  std::string address;
  std::unique_ptr<grpc::Server> server = Serve(o, &address);
  ASSERT_NE(server, nullptr);

  absl::StatusOr<std::unique_ptr<ReloadableCertificates>> certs =
      ReloadableCertificates::Create(a_.cert, a_.key, a_.ca);
  ASSERT_TRUE(certs.ok()) << certs.status();
  ASSERT_TRUE((*certs)->has_ca());
  grpc::experimental::TlsChannelCredentialsOptions c;
  c.set_certificate_provider((*certs)->provider());
  c.watch_identity_key_cert_pairs();
  c.watch_root_certs();
  auto creds = grpc::experimental::TlsCredentials(c);
  // Neither side trusts the other's CA.
  EXPECT_EQ(PresentedCertificate(address, creds), "");

  ASSERT_TRUE((*certs)->Replace(b_.cert, b_.key, b_.ca).ok());
  // The same credentials object: a new connection now presents b's
  // certificate and trusts b's CA.
  std::string presented;
  const absl::Time give_up = absl::Now() + absl::Seconds(10 * kCertificateRefreshSeconds);
  while ((presented = PresentedCertificate(address, creds)).empty() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(presented, Leaf(b_.cert));
  server->Shutdown();
}

TEST_F(ReloadableCertificatesTest, ManyReplacesLeaveTheLastSetInPlace) {
  // Replaces faster than gRPC reads (several within one second): gRPC
  // must end with the last set, never a key of one set with the
  // certificate of another (the server would then fail every handshake).
  absl::StatusOr<std::unique_ptr<ReloadableCertificates>> certs =
      ReloadableCertificates::Create(a_.cert, a_.key, "");
  ASSERT_TRUE(certs.ok()) << certs.status();
  grpc::experimental::TlsServerCredentialsOptions o((*certs)->provider());
  o.watch_identity_key_cert_pairs();
  std::string address;
  std::unique_ptr<grpc::Server> server = Serve(o, &address);
  ASSERT_NE(server, nullptr);
  for (int i = 0; i < 50; ++i) {
    const Pki& p = i % 2 == 0 ? b_ : a_;
    ASSERT_TRUE((*certs)->Replace(p.cert, p.key, "").ok());
    absl::SleepFor(absl::Milliseconds(37));
  }
  // Ends on a (i = 49).
  const std::string both = a_.ca + b_.ca;
  std::string presented;
  const absl::Time give_up = absl::Now() + absl::Seconds(10 * kCertificateRefreshSeconds);
  while ((presented = PresentedCertificate(address, Client(both))) != Leaf(a_.cert) &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(presented, Leaf(a_.cert));
  server->Shutdown();
}

TEST_F(ReloadableCertificatesTest, BadArgumentsAreRefused) {
  EXPECT_EQ(ReloadableCertificates::Create("", a_.key, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReloadableCertificates::Create(a_.cert, "", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<ReloadableCertificates>> with_ca =
      ReloadableCertificates::Create(a_.cert, a_.key, a_.ca);
  ASSERT_TRUE(with_ca.ok());
  EXPECT_EQ((*with_ca)->Replace(b_.cert, b_.key, "").code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<ReloadableCertificates>> without_ca =
      ReloadableCertificates::Create(a_.cert, a_.key, "");
  ASSERT_TRUE(without_ca.ok());
  EXPECT_EQ((*without_ca)->Replace(b_.cert, b_.key, b_.ca).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*without_ca)->Replace(b_.cert, "", "").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pscluster
