#include "trace.hpp"

#include <filesystem>
#include <iostream>

#include "tessera/runtime/trace_files.hpp"
#include "trace_timeline.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

constexpr const char* kUsage =
    "usage: tessera trace merge -o OUT FILE...\n"
    "  joins the per-rank traces of one run (train --trace FILE wrote FILE with .rankR\n"
    "  inserted, one per rank) into OUT, one file for Perfetto or chrome://tracing\n"
    "       tessera trace timeline [--width N] [--step S] FILE...\n"
    "  draws the traces (per-rank files or a merged one) as text: one row per rank and\n"
    "  pipeline stage, N columns of time (default 100) over the traced train steps (or\n"
    "  step S only), each showing the forward or backward pass of a micro-batch, an\n"
    "  optimizer step, a wait on communication, or idle\n"
    "  (docs/tracing.md)\n";

int run_merge(const std::vector<std::string>& args) {
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

// The integer after `flag`, at least `least`.
long long number_after(const std::vector<std::string>& args, std::size_t& i, long long least) {
  const std::string& flag = args[i];
  if (i + 1 == args.size()) throw UsageError("trace timeline: " + flag + " needs a number");
  const std::string& text = args[++i];
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < least) {
    throw UsageError("trace timeline: " + flag + " " + text + ": give a whole number of at least " +
                     std::to_string(least));
  }
  return value;
}

int run_timeline(const std::vector<std::string>& args) {
  TimelineOptions options;
  std::vector<std::filesystem::path> inputs;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--width") {
      options.width = static_cast<int>(std::min(number_after(args, i, 10), 1000000LL));
    } else if (args[i] == "--step") {
      options.step = number_after(args, i, 1);
    } else if (args[i].starts_with("-")) {
      throw UsageError("trace timeline: unknown flag " + args[i] + "\n" + kUsage);
    } else {
      inputs.emplace_back(args[i]);
    }
  }
  if (inputs.empty()) throw UsageError(std::string("trace timeline: no FILE to draw\n") + kUsage);
  std::cout << render_timeline(inputs, options);
  return 0;
}

}  // namespace

int run_trace(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  if (!args.empty() && args[0] == "merge") return run_merge(args);
  if (!args.empty() && args[0] == "timeline") return run_timeline(args);
  throw UsageError(std::string("trace: expected 'merge' or 'timeline'\n") + kUsage);
}

}  // namespace tessera::cli
