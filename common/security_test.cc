#include "common/security.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << content;
  return path;
}

bool HaveOpenssl() { return std::system("openssl version >/dev/null 2>&1") == 0; }

// Runs deploy/tls/make_test_ca.sh into TEST_TMPDIR/<name>; empty on failure.
std::string MakeCa(const std::string& name) {
  const std::string dir = TempDir() + "/" + name;
  const std::string cmd =
      absl::StrCat("deploy/tls/make_test_ca.sh --force ", dir, " >/dev/null 2>&1");
  return std::system(cmd.c_str()) == 0 ? dir : "";
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret-and-more", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("sec", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secretsecret", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(CheckBearerTokenTest, NoTokenConfiguredLetsEveryCallIn) {
  EXPECT_TRUE(CheckBearerToken(nullptr, "").ok());
  const absl::string_view any = "Bearer whatever";
  EXPECT_TRUE(CheckBearerToken(&any, "").ok());
}

TEST(CheckBearerTokenTest, MissingOrWrongTokenIsUnauthenticated) {
  grpc::Status s = CheckBearerToken(nullptr, "tok");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("no authorization metadata"));
  for (absl::string_view header :
       {"Bearer tok2", "Bearer to", "tok", "Basic tok", "Bearer ", "bearer tok"}) {
    s = CheckBearerToken(&header, "tok");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << header;
    EXPECT_EQ(s.error_message().find("tok2"), std::string::npos) << "echoes what was sent";
  }
  const absl::string_view right = "Bearer tok";
  EXPECT_TRUE(CheckBearerToken(&right, "tok").ok());
}

TEST(ReadTokenFileTest, TrimsWhitespace) {
  absl::StatusOr<std::string> t = ReadTokenFile(WriteFile("tok1", "  abc123\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "abc123");
}

TEST(ReadTokenFileTest, MissingEmptyAndBinaryFilesAreNamed) {
  absl::StatusOr<std::string> t = ReadTokenFile("/no/such/token");
  EXPECT_TRUE(absl::IsInvalidArgument(t.status()));
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("--auth_token_file=/no/such/token: cannot read"));
  const std::string empty = WriteFile("tok2", " \n\t\n");
  t = ReadTokenFile(empty);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("--auth_token_file=" + empty + ": the file is empty"));
  const std::string binary = WriteFile("tok3", std::string("ab\x01"
                                                           "cd",
                                                           5));
  t = ReadTokenFile(binary);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("printable ASCII"));
}

TEST(LoadSecurityConfigTest, PlaintextByDefault) {
  absl::StatusOr<SecurityConfig> c = LoadSecurityConfig({}, "grpc", "TF_CONFIG");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->tls);
  EXPECT_TRUE(c->token.empty());
  EXPECT_EQ(DescribeSecurity(*c), "plaintext, no cluster token");
}

TEST(LoadSecurityConfigTest, TokenWithoutTls) {
  SecurityFlags f;
  f.auth_token_file = WriteFile("tok4", "xyz\n");
  absl::StatusOr<SecurityConfig> c = LoadSecurityConfig(f, "grpc", "TF_CONFIG");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->tls);
  EXPECT_EQ(c->token, "xyz");
}

TEST(LoadSecurityConfigTest, GrpcTlsNeedsCertAndKey) {
  absl::StatusOr<SecurityConfig> c = LoadSecurityConfig({}, "grpc+tls", "TF_CONFIG");
  EXPECT_TRUE(absl::IsInvalidArgument(c.status()));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("--tls_cert is required"));
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("TF_CONFIG sets rpc_layer \"grpc+tls\""));
  SecurityFlags f;
  f.tls_cert = "/x/cert.pem";
  c = LoadSecurityConfig(f, "grpc", "TF_CONFIG");
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("--tls_key is required"));
  f.tls_key = "/x/key.pem";
  c = LoadSecurityConfig(f, "grpc", "TF_CONFIG");
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("--tls_cert=/x/cert.pem: cannot read"));
  SecurityFlags ca_only;
  ca_only.tls_ca = "/x/ca.pem";
  c = LoadSecurityConfig(ca_only, "grpc", "TF_CONFIG");
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("--tls_cert is required"));
}

class TlsMaterialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveOpenssl()) GTEST_SKIP() << "no openssl on PATH to make test certificates";
    a_ = MakeCa("ca_a");
    b_ = MakeCa("ca_b");
    ASSERT_FALSE(a_.empty() || b_.empty()) << "deploy/tls/make_test_ca.sh failed";
  }
  SecurityFlags Flags(const std::string& cert_dir, const std::string& key_dir,
                      const std::string& ca_dir) {
    SecurityFlags f;
    f.tls_cert = cert_dir + "/task.pem";
    f.tls_key = key_dir + "/task.key";
    if (!ca_dir.empty()) f.tls_ca = ca_dir + "/ca.pem";
    return f;
  }
  std::string a_, b_;
};

TEST_F(TlsMaterialTest, MutualTlsFromTheScriptsFiles) {
  SecurityFlags f = Flags(a_, a_, a_);
  f.auth_token_file = a_ + "/token";
  absl::StatusOr<SecurityConfig> c = LoadSecurityConfig(f, "grpc+tls", "TF_CONFIG");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->mutual_tls());
  EXPECT_EQ(c->token.size(), 64u);
  EXPECT_EQ(DescribeSecurity(*c), "mutual TLS, cluster token required");
  // The flags alone turn TLS on.
  c = LoadSecurityConfig(Flags(a_, a_, ""), "grpc", "TF_CONFIG");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tls);
  EXPECT_FALSE(c->mutual_tls());
}

TEST_F(TlsMaterialTest, KeyOfAnotherCertificateIsRefused) {
  absl::StatusOr<SecurityConfig> c = LoadSecurityConfig(Flags(a_, b_, a_), "grpc", "TF_CONFIG");
  EXPECT_TRUE(absl::IsInvalidArgument(c.status()));
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("--tls_key=" + b_ + "/task.key: is not the private key of --tls_cert="));
}

TEST_F(TlsMaterialTest, CertificateOfAnotherCaIsRefused) {
  absl::StatusOr<SecurityConfig> c = LoadSecurityConfig(Flags(a_, a_, b_), "grpc", "TF_CONFIG");
  EXPECT_TRUE(absl::IsInvalidArgument(c.status()));
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("--tls_cert=" + a_ + "/task.pem: does not verify against --tls_ca="));
}

TEST_F(TlsMaterialTest, NotPemIsRefused) {
  SecurityFlags f = Flags(a_, a_, a_);
  f.tls_cert = a_ + "/token";
  absl::StatusOr<SecurityConfig> c = LoadSecurityConfig(f, "grpc", "TF_CONFIG");
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("no PEM certificate"));
  f = Flags(a_, a_, a_);
  f.tls_key = a_ + "/task.pem";
  c = LoadSecurityConfig(f, "grpc", "TF_CONFIG");
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("no unencrypted PEM private key"));
}

}  // namespace
}  // namespace pscluster
