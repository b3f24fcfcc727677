// The command line of every binary of ours (the daemons, the tools): flags
// parsed in Abseil's syntax with bad input exiting 2, naming it, and
// --help. Without common/daemon.h a tool takes its own flags only.
#ifndef PSCLUSTER_COMMON_COMMAND_LINE_H_
#define PSCLUSTER_COMMON_COMMAND_LINE_H_

#include <set>
#include <string>

namespace pscluster {

// Parses the command line into the Abseil flags of the program's main and,
// in a daemon, common/daemon.cc's shared ones, in Abseil's syntax (flags
// count as the main's when defined in a file whose name contains "main").
// --help (or -h) prints `usage` and those flags, then exits 0. Any bad
// input exits 2 with one line naming it: an unknown flag, a value that does
// not parse (Abseil's own message, e.g. "Illegal value 'abc' specified for
// flag 'epochs'"), a missing value, an argument that is not a flag.
// Abseil's own flags (--flagfile, ...) are not taken.
void ParseFlagsOrExit(int argc, char** argv, const std::string& usage);

// The names of the flags `argv` sets (--name=value, --name value, --name,
// and for --noname both "noname" and "name"), up to a lone "--": for a
// program whose defaults give way to another source (a model file's
// compiled optimizer) only where the command line is silent.
std::set<std::string> FlagsGiven(int argc, char** argv);

// Prints "error: <message>" to stderr and exits with code 2.
[[noreturn]] void ExitWithUsageError(const std::string& message);

// Prints "error: <message>" to stderr and exits with kExitBadData (the
// data is missing or unreadable: starting again changes nothing).
[[noreturn]] void ExitWithDataError(const std::string& message);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_COMMAND_LINE_H_
