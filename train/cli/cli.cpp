#include "train/cli/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <new>
#include <vector>

#include "kernels/check.h"
#include "kernels/printable.h"

namespace cutrain {

namespace {

// Levenshtein distance with adjacent transpositions counted as one edit ("trian" -> "train").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); i++) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); j++) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); i++)
    for (size_t j = 1; j <= b.size(); j++) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The deepest subcommand the command line chose ("train" in `cutrain train ...`).
const CLI::App& chosen_command(const CLI::App& app) {
  const CLI::App* cmd = &app;
  for (;;) {
    const std::vector<const CLI::App*> subs = cmd->get_subcommands({});
    const auto it = std::find_if(subs.begin(), subs.end(),
                                 [](const CLI::App* s) { return s->parsed(); });
    if (it == subs.end()) return *cmd;
    cmd = *it;
  }
}

std::string command_name(const CLI::App& cmd) {
  std::string name;
  for (const CLI::App* c = &cmd; c != nullptr; c = c->get_parent())
    name = c->get_name().empty() ? "cutrain" + (name.empty() ? "" : " " + name)
                                 : c->get_name() + (name.empty() ? "" : " " + name);
  return name;
}

}  // namespace

std::string closest_option(const CLI::App& cmd, const std::string& unknown) {
  const std::string word = unknown.substr(std::min(unknown.find_first_not_of('-'), unknown.size()));
  const std::string key = word.substr(0, word.find('='));  // --lr=0.1
  std::string best;
  size_t best_d = std::string::npos;
  for (const CLI::App* c = &cmd; c != nullptr; c = c->get_parent())
    for (const CLI::Option* o : c->get_options())
      for (const std::string& name : o->get_lnames()) {
        const size_t d = edit_distance(key, name);
        if (d < best_d) best_d = d, best = "--" + name;
      }
  // A likely typo: at most a third of the letters wrong (one for a short name).
  return best_d <= std::max<size_t>(1, key.size() / 3) ? best : "";
}

int parse_command_line(CLI::App& app, int argc, const char* const* argv, FILE* err) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError&) {
    const CLI::App& cmd = chosen_command(app);
    const std::string name = command_name(cmd);
    for (const std::string& arg : app.remaining(true)) {
      if (arg.size() > 1 && arg[0] == '-') {
        const std::string guess = closest_option(cmd, arg);
        std::fprintf(err, "%s: unknown option %s%s\n", name.c_str(), printable(arg).c_str(),
                     guess.empty() ? "" : (" (did you mean " + guess + "?)").c_str());
      } else {
        std::fprintf(err, "%s: unexpected argument '%s'\n", name.c_str(), printable(arg).c_str());
      }
    }
    std::fprintf(err, "Run '%s --help' for its options.\n", name.c_str());
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    const std::string name = command_name(chosen_command(app));
    std::fprintf(err, "%s: %s\nRun '%s --help' for its options.\n", name.c_str(),
                 printable_message(e.what()).c_str(), name.c_str());
    return kExitUsage;
  }
}

// The backstop: whatever a message quotes (a path, a name, a library's text) reaches the
// terminal printable (kernels/printable.h), keeping the line breaks of cutrain's own multi-line
// messages; the readers have already escaped those a file held.
int run_reporting_errors(const std::function<int()>& command, FILE* err) {
  try {
    return command();
  } catch (const UserError& e) {
    std::fprintf(err, "cutrain: %s\n", printable_message(e.what()).c_str());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(err, "cutrain: internal error: %s\n", printable_message(e.what()).c_str());
    return kExitFailure;
  } catch (const std::bad_alloc&) {
    std::fprintf(err, "cutrain: out of memory\n");
    return kExitFailure;
  } catch (const std::exception& e) {  // the standard library's (a file system error, ...)
    std::fprintf(err, "cutrain: %s\n", printable_message(e.what()).c_str());
    return kExitFailure;
  }
}

}  // namespace cutrain
