// defines: how the cutrain program turns failures into messages and exit statuses.
//
//   0  done
//   1  cutrain failed: a bug or the machine (cutrain::Error, with file:line; out of memory)
//   2  the user's input is wrong: an unknown option or a bad value (CLI11), a bad file, data
//      that do not fit, a full disk (cutrain::UserError): a message that says what to do
//
// A stop by a signal is 128 + the signal (train/run/run.h).
#pragma once
#include <cstdio>
#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace cutrain {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Parses the command line into `app`. Returns -1 when a command is to run; otherwise the exit
// status, with the help printed (0) or the error (2) on `err`: "cutrain train: unknown option
// --trian (did you mean --train?)", or CLI11's own message for a bad value.
int parse_command_line(CLI::App& app, int argc, const char* const* argv, FILE* err = stderr);

// The long option of `cmd` (or of its parent) closest to `unknown` by edit distance, when it
// is close enough to be a likely typo ("--trian" -> "--train"); "" when none is.
std::string closest_option(const CLI::App& cmd, const std::string& unknown);

// Runs a command: its return value, or, when it throws, the message on `err` ("cutrain: ...")
// and the status of the table above. Every message printed here and by parse_command_line is
// made printable (kernels/printable.h, printable_message): nothing a file, a folder name or the
// command line held reaches the terminal raw.
int run_reporting_errors(const std::function<int()>& command, FILE* err = stderr);

}  // namespace cutrain
