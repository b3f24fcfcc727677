// Task identities (common/identity.h): their text, the URI in a
// certificate, and the token list.
#include "common/identity.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

std::string Read(const std::string& name) {
  std::ifstream in("tests/fixtures/identity/" + name);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

TEST(IdentityTest, ParsesRoleAndIndex) {
  absl::StatusOr<TaskIdentity> id = ParseIdentity("worker/3");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, (TaskIdentity{Role::kWorker, 3}));
  EXPECT_EQ(id->ToString(), "worker/3");
  EXPECT_EQ(*ParseIdentity("chief"), (TaskIdentity{Role::kChief, 0}));
  EXPECT_EQ(*ParseIdentity("evaluator/0"), (TaskIdentity{Role::kEvaluator, 0}));
  EXPECT_EQ(*ParseIdentity("ps/1048576"), (TaskIdentity{Role::kPs, kMaxTaskIndex}));
  EXPECT_EQ(IdentityUri(TaskIdentity{Role::kPs, 2}), "pscluster://ps/2");
  for (const char* bad :
       {"", "boss/1", "Worker/1", "worker/", "worker/-1", "worker/+1", "worker/01", "worker/1/2",
        "worker/ 1", "worker/1048577", "worker/99999999999", "worker/1x", "ps\n/1"}) {
    absl::StatusOr<TaskIdentity> r = ParseIdentity(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseIdentity("boss/1").status().message().find(
                "the role 'boss' is not chief, worker, ps or evaluator"),
            std::string::npos);
}

TEST(IdentityTest, ReadsTheUriInACertificate) {
  absl::StatusOr<TaskIdentity> id = IdentityFromCertificate(Read("worker3.pem"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, (TaskIdentity{Role::kWorker, 3}));
  // Another scheme is not ours; the same task twice is one identity.
  EXPECT_EQ(*IdentityFromCertificate(Read("spiffe.pem")), (TaskIdentity{Role::kChief, 0}));
  EXPECT_EQ(*IdentityFromCertificate(Read("same_twice.pem")), (TaskIdentity{Role::kPs, 1}));

  absl::StatusOr<TaskIdentity> none = IdentityFromCertificate(Read("none.pem"));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("URI:pscluster://ROLE/INDEX"), std::string::npos);
  absl::StatusOr<TaskIdentity> two = IdentityFromCertificate(Read("two.pem"));
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(two.status().message().find("names two tasks, worker/3 and ps/0"), std::string::npos)
      << two.status();
  absl::StatusOr<TaskIdentity> bad = IdentityFromCertificate(Read("bad_role.pem"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("boss"), std::string::npos) << bad.status();
  EXPECT_EQ(IdentityFromCertificate("not a certificate").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(IdentityTest, TokenListFindsEachTasksToken) {
  EXPECT_EQ(TokenDigest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string text = "# the cluster's tokens\n\nchief " + TokenDigest("c-token") +
                           "\nworker/1\t" + TokenDigest("w1-token") + "  \n";
  absl::StatusOr<TokenIdentities> ids = TokenIdentities::Parse(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 2u);
  EXPECT_EQ(ids->Find("c-token"), (TaskIdentity{Role::kChief, 0}));
  EXPECT_EQ(ids->Find("w1-token"), (TaskIdentity{Role::kWorker, 1}));
  EXPECT_FALSE(ids->Find("w1-token ").has_value());
  EXPECT_FALSE(ids->Find("").has_value());
  // A task with two tokens (while it rotates them): either is it.
  absl::StatusOr<TokenIdentities> two = TokenIdentities::Parse(
      "worker/1 " + TokenDigest("old") + "\nworker/1 " + TokenDigest("new") + "\n");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->Find("old"), (TaskIdentity{Role::kWorker, 1}));
  EXPECT_EQ(two->Find("new"), (TaskIdentity{Role::kWorker, 1}));
  // Upper-case hex is the same digest.
  absl::StatusOr<TokenIdentities> upper =
      TokenIdentities::Parse("ps/0 " + absl::AsciiStrToUpper(TokenDigest("p")));
  ASSERT_TRUE(upper.ok()) << upper.status();
  EXPECT_EQ(upper->Find("p"), (TaskIdentity{Role::kPs, 0}));
}

TEST(IdentityTest, TokenListErrorsNameTheLine) {
  const std::string d1 = TokenDigest("one"), d2 = TokenDigest("two");
  const struct {
    std::string text, want;
  } cases[] = {
      {"", "no identities listed"},
      {"# only a comment\n", "no identities listed"},
      {"worker/1\n", "line 1: want 'ROLE/INDEX SHA256-HEX'"},
      {"worker/1 " + d1 + " extra\n", "line 1: want"},
      {"chief " + d1 + "\nboss/2 " + d2, "line 2: identity 'boss/2'"},
      {"worker/1 " + d1.substr(1), "line 1: the digest of worker/1 is not 64 hex digits"},
      {"worker/1 " + d1.substr(1) + "g", "not 64 hex digits"},
      {"worker/1 " + d1 + "\nworker/2 " + d1, "line 2: worker/2 has the token of worker/1"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<TokenIdentities> r = TokenIdentities::Parse(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << r.status() << " lacks " << c.want;
  }
}

}  // namespace
}  // namespace pscluster
