// The authorization table (common/authorization.h): every method of our
// services once, the rules the hostile-task test relies on, and the table
// docs/security.md prints.
#include "common/authorization.h"

#include <google/protobuf/descriptor.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/coordination.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "proto/ring.grpc.pb.h"

namespace pscluster {
namespace {

TEST(AuthorizationTest, EveryMethodOfOurServicesHasOneRule) {
  std::set<std::string> in_protos;
  for (const char* service : {"pscluster.ParameterServer", "pscluster.PsControl",
                              "pscluster.Coordinator", "pscluster.TaskControl", "pscluster.Ring"}) {
    const google::protobuf::ServiceDescriptor* d =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
    ASSERT_NE(d, nullptr) << service;
    for (int i = 0; i < d->method_count(); ++i) {
      in_protos.insert(absl::StrCat(service, "/", d->method(i)->name()));
    }
  }
  std::set<std::string> in_table;
  const std::vector<RpcRule>& table = AuthorizationTable();
  ASSERT_EQ(table.size(), static_cast<size_t>(Rpc::kCount));
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(table[i].rpc), i) << table[i].method << ": out of Rpc's order";
    EXPECT_TRUE(in_table.insert(table[i].method).second) << table[i].method << " twice";
    EXPECT_NE(table[i].roles, 0) << table[i].method << ": no role may call it";
    EXPECT_NE(std::string(table[i].why), "") << table[i].method;
  }
  EXPECT_EQ(in_table, in_protos);
}

TEST(AuthorizationTest, OnlyTheChiefControlsThePsAndOnlyPsReplicate) {
  for (const RpcRule& r : AuthorizationTable()) {
    const std::string m = r.method;
    if (m.rfind("pscluster.PsControl/", 0) == 0) {
      EXPECT_FALSE(Allows(r, Role::kWorker)) << m;
      EXPECT_FALSE(Allows(r, Role::kEvaluator)) << m;
    }
    if (m.rfind("pscluster.TaskControl/", 0) == 0) {
      EXPECT_EQ(r.roles, RoleBit(Role::kChief)) << m;
    }
  }
  EXPECT_EQ(RuleOf(Rpc::kControlReplicate).roles, RoleBit(Role::kPs));
  EXPECT_EQ(RuleOf(Rpc::kCoordinatorReportEval).roles, RoleBit(Role::kEvaluator));
  EXPECT_EQ(RuleOf(Rpc::kPsPush).roles, RoleBit(Role::kWorker));
  EXPECT_EQ(RuleOf(Rpc::kPsPushPull).roles, RoleBit(Role::kWorker));
  EXPECT_STREQ(RuleOf(Rpc::kPsPushPull).as_itself, "worker_index");
}

// docs/security.md prints the table as the code has it.
TEST(AuthorizationTest, TheDocsPrintTheTable) {
  std::ifstream in("docs/security.md");
  ASSERT_TRUE(in.good());
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_NE(doc.str().find(AuthorizationTableMarkdown()), std::string::npos)
      << "docs/security.md must hold, as it is:\n"
      << AuthorizationTableMarkdown();
}

}  // namespace
}  // namespace pscluster
