#include "common/command_line.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

std::set<std::string> Given(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return FlagsGiven(static_cast<int>(argv.size()), argv.data());
}

TEST(FlagsGivenTest, NamesEveryFlagOnTheCommandLineInEachSpelling) {
  EXPECT_EQ(Given({"chief", "--optimizer=rmsprop", "--learning_rate", "0.1", "-momentum=0.5",
                   "--noprintversion", "--push_overlap"}),
            (std::set<std::string>{"optimizer", "learning_rate", "momentum", "noprintversion",
                                   "printversion", "push_overlap"}));
  // Nothing after a lone "--"; values and the program name are not flags.
  EXPECT_EQ(Given({"chief", "0.1", "--epochs=2", "--", "--optimizer=sgd"}),
            (std::set<std::string>{"epochs"}));
  EXPECT_TRUE(Given({"chief"}).empty());
}

}  // namespace
}  // namespace pscluster
