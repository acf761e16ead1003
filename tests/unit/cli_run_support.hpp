#pragma once
// Runs the tessera CLI as a user would, in a scratch folder, for the CLI tests: its exit code,
// stdout and stderr.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace tessera::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// `tessera ARGS` (cli: the binary) run by the shell in `dir`; stderr goes through a file there.
inline CliRun run_cli(const std::string& cli, const std::filesystem::path& dir,
                      const std::string& args) {
  const auto err_file = dir / "stderr.txt";
  const std::string command =
      "cd '" + dir.string() + "' && " + cli + " " + args + " 2>'" + err_file.string() + "'";
  CliRun run;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  run.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return run;
}

}  // namespace tessera::testing
