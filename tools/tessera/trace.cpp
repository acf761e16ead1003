#include "trace.hpp"

#include <filesystem>
#include <iostream>

#include "tessera/runtime/trace_files.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

constexpr const char* kUsage =
    "usage: tessera trace merge -o OUT FILE...\n"
    "  joins the per-rank traces of one run (train --trace FILE wrote FILE with .rankR\n"
    "  inserted, one per rank) into OUT, one file for Perfetto or chrome://tracing\n"
    "  (docs/tracing.md)\n";

}  // namespace

int run_trace(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  if (args.empty() || args[0] != "merge") {
    throw UsageError(std::string("trace: expected 'merge'\n") + kUsage);
  }
  std::filesystem::path output;
  std::vector<std::filesystem::path> inputs;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "-o" || args[i] == "--output") {
      if (i + 1 == args.size()) throw UsageError("trace merge: " + args[i] + " needs a file");
      output = args[++i];
    } else if (args[i].starts_with("-")) {
      throw UsageError("trace merge: unknown flag " + args[i] + "\n" + kUsage);
    } else {
      inputs.emplace_back(args[i]);
    }
  }
  if (output.empty()) throw UsageError(std::string("trace merge: -o OUT is required\n") + kUsage);
  if (inputs.empty()) throw UsageError(std::string("trace merge: no FILE to merge\n") + kUsage);
  merge_trace_files(inputs, output);
  std::cout << "merged " << inputs.size() << " trace(s) into " << output.string() << "\n";
  return 0;
}

}  // namespace tessera::cli
