// The tessera CLI: a table of subcommands, each in its own file, and one place that turns
// errors into "tessera: error: ..." and an exit code (2: usage or config, 1: anything else).
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "bench.hpp"
#include "checkpoint.hpp"
#include "config_check.hpp"
#include "data.hpp"
#include "launch.hpp"
#include "plugins.hpp"
#include "sample.hpp"
#include "selfcheck.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/version.hpp"
#include "tessera/plugin/build_id.hpp"
#include "tessera/plugin/plugin_abi.h"
#include "tessera/registry/registry.hpp"
#include "trace.hpp"
#include "train.hpp"
#include "usage_error.hpp"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);  // args: the words after the name
};

// A new subcommand is one line here plus its own file.
constexpr Subcommand kSubcommands[] = {
    {"plugins", "list the plugins found, with every option", &tessera::cli::run_plugins},
    {"config", "check a config file and show where each value comes from",
     &tessera::cli::run_config},
    {"launch", "start the processes of one job on this host", &tessera::cli::run_launch},
    {"train", "train a model as the config says, over N ranks", &tessera::cli::run_train},
    {"selfcheck", "all-reduce self-check of a transport over N ranks",
     &tessera::cli::run_selfcheck},
    {"bench", "measure collectives over a transport (the nccl-tests table)",
     &tessera::cli::run_bench},
    {"checkpoint", "consolidate a sharded checkpoint into one full checkpoint, or inspect one",
     &tessera::cli::run_checkpoint},
    {"data", "prepare a text corpus as the token file the `text` data set reads",
     &tessera::cli::run_data},
    {"sample", "generate text from a trained language model's checkpoint",
     &tessera::cli::run_sample},
    {"trace", "merge the per-rank traces of `train --trace`, or draw them as a text timeline",
     &tessera::cli::run_trace},
};

void print_usage(std::ostream& out) {
  out << "usage: tessera [--version] [--help] COMMAND [ARGS...]\n\ncommands:\n";
  for (const auto& command : kSubcommands) {
    out << "  " << command.name << std::string(12 - std::string(command.name).size(), ' ')
        << command.summary << "\n";
  }
  out << "\n'tessera COMMAND --help' describes one command. Configuration: docs/config.md.\n";
}

int dispatch(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  // The CLI's own flags come before the command; everything after belongs to the command.
  std::size_t first_word = 0;
  while (first_word < args.size() && args[first_word].starts_with("-")) ++first_word;
  po::options_description flags;
  flags.add_options()("help,h", "this text")("version", "print the version and build id");
  po::variables_map vm;
  try {
    po::store(
        po::command_line_parser(std::vector<std::string>(args.begin(), args.begin() + first_word))
            .options(flags)
            .run(),
        vm);
  } catch (const po::error& e) {
    throw tessera::cli::UsageError(e.what());
  }
  if (vm.count("version")) {
    std::cout << "tessera " << tessera::version() << "\nbuild id " << tessera::host_build_id()
              << ", plugin ABI " << TESSERA_PLUGIN_ABI_MAJOR << "." << TESSERA_PLUGIN_ABI_MINOR
              << "\n";
    return 0;
  }
  if (vm.count("help")) {
    print_usage(std::cout);
    return 0;
  }
  if (first_word == args.size()) {
    print_usage(std::cerr);
    return 2;
  }
  const std::string& name = args[first_word];
  std::vector<std::string> names;
  for (const auto& command : kSubcommands) {
    if (name == command.name) {
      return command.run(std::vector<std::string>(args.begin() + first_word + 1, args.end()));
    }
    names.emplace_back(command.name);
  }
  std::string message = "unknown command '" + name + "'";
  if (auto near = tessera::nearest_name(name, names)) message += "; did you mean '" + *near + "'?";
  throw tessera::cli::UsageError(message + " (tessera --help lists them)");
}

// The error line goes out in one write(2): written piecewise (std::cerr's unbuffered inserts),
// a launched worker stopped between the pieces by the launcher's SIGTERM leaves a line cut to
// "tessera: error: " with no text.
void print_error(const char* what) {
  const std::string line = std::string("tessera: error: ") + what + "\n";
  std::string_view rest = line;
  while (!rest.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // stdout carries results (tables, --json rows, plugin listings); UCX writes its log lines
  // there unless told otherwise, read once when the ucx plugin loads libucs. A user's own
  // UCX_LOG_FILE wins; launched workers inherit the choice.
  ::setenv("UCX_LOG_FILE", "stderr", /*overwrite=*/0);
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tessera::cli::UsageError& e) {
    print_error(e.what());
    return 2;
  } catch (const tessera::ConfigError& e) {
    print_error(e.what());
    return 2;
  } catch (const tessera::InvalidArgument& e) {
    // Every mistake in a config is a ConfigError found before this; what remains is tessera's.
    std::cerr << "tessera: internal error: " << e.what()
              << "\n(this is a bug in tessera or a plugin, not in your input; please report it "
                 "with the command line)\n";
    return 1;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  }
}
