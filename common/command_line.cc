#include "common/command_line.h"

#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <iostream>
#include <optional>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/exit_codes.h"

namespace pscluster {

namespace {

// common/daemon.cc's flags (TF_CONFIG, /metrics, transport security),
// shared by every daemon; linked only into the daemons.
bool IsShared(const absl::CommandLineFlag& flag) {
  return absl::EndsWith(flag.Filename(), "common/daemon.cc");
}

// The flags a program takes: those of its main and, in a daemon, the shared
// ones. Abseil's own (--flagfile, --fromenv, --helpfull, ...) are not among
// them.
bool IsOurs(const absl::CommandLineFlag& flag) {
  return !flag.IsRetired() && (IsShared(flag) || absl::StrContains(flag.Filename(), "main"));
}

absl::CommandLineFlag* FindOurFlag(absl::string_view name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && IsOurs(*flag) ? flag : nullptr;
}

// --help: the usage line, then the main's flags and the shared ones (a
// program that is not a daemon has none).
void PrintHelp(const char* argv0, const std::string& usage) {
  std::vector<const absl::CommandLineFlag*> own, shared;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsOurs(*flag)) (IsShared(*flag) ? shared : own).push_back(flag);
  }
  auto by_name = [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
    return a->Name() < b->Name();
  };
  std::sort(own.begin(), own.end(), by_name);
  std::sort(shared.begin(), shared.end(), by_name);
  auto list = [](const std::vector<const absl::CommandLineFlag*>& flags) {
    for (const absl::CommandLineFlag* f : flags) {
      std::cout << "  --" << f->Name() << "  " << f->Help() << " (default: \""
                << f->DefaultValue() << "\")\n";
    }
  };
  std::string program = argv0;
  program = program.substr(program.rfind('/') + 1);
  std::cout << program << ": " << usage << "\n\nFlags (--name=value):\n";
  list(own);
  if (shared.empty()) return;
  std::cout << "\nShared by every daemon (TLS and the token: docs/security.md):\n";
  list(shared);
}

bool IsHelp(absl::string_view arg) {
  return arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpshort" ||
         arg == "--helpfull";
}

}  // namespace

std::set<std::string> FlagsGiven(int argc, char** argv) {
  std::set<std::string> given;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    const absl::string_view name = arg.substr(0, arg.find('='));
    if (name.empty()) continue;
    given.emplace(name);
    if (absl::StartsWith(name, "no")) given.emplace(name.substr(2));
  }
  return given;
}

void ParseFlagsOrExit(int argc, char** argv, const std::string& usage) {
  for (int i = 1; i < argc; ++i) {
    if (IsHelp(argv[i])) {
      PrintHelp(argv[0], usage);
      std::exit(0);  // asking for help is not an error
    }
  }
  // Abseil's syntax (--name=value, -name=value, --name value, --name and
  // --noname for bools), parsed with Abseil's public reflection API: its
  // ParseCommandLine exits 1 on a bad flag, and bad input exits 2 here.
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') {
      const char* unexpected = arg == "--" ? (i + 1 < argc ? argv[i + 1] : nullptr) : argv[i];
      if (unexpected == nullptr) break;
      ExitWithUsageError(absl::StrCat("unexpected argument '", unexpected,
                                      "' (flags look like --name=value; try --help)"));
    }
    const absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const absl::string_view name = body.substr(0, eq);
    std::optional<std::string> value;
    if (eq != absl::string_view::npos) value = std::string(body.substr(eq + 1));
    absl::CommandLineFlag* flag = FindOurFlag(name);
    if (flag == nullptr && !value.has_value() && absl::StartsWith(name, "no")) {
      flag = FindOurFlag(name.substr(2));
      if (flag != nullptr && !flag->IsOfType<bool>()) flag = nullptr;
      if (flag != nullptr) value = "false";
    }
    if (flag == nullptr) {
      ExitWithUsageError(absl::StrCat("unknown flag '", arg, "' (try --help)"));
    }
    if (!value.has_value()) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc && !absl::StartsWith(argv[i + 1], "--")) {
        value = argv[++i];
      } else {
        ExitWithUsageError(absl::StrCat("missing value for flag '--", name,
                                        "' (flags look like --name=value; try --help)"));
      }
    }
    std::string error;
    if (!flag->ParseFrom(*value, &error)) {
      ExitWithUsageError(absl::StrCat(error, " (try --help)"));  // names flag and value
    }
  }
}

void ExitWithUsageError(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(kExitBadInput);
}

void ExitWithDataError(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(kExitBadData);
}

}  // namespace pscluster
