#include "data.hpp"

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "tessera/registry/registry.hpp"
#include "text/corpus.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

constexpr const char* kUsage =
    "usage: tessera data prepare [SOURCE] [--output FILE] [--validation FRACTION]\n"
    "  SOURCE        a text file (gzip'ed or not) or a folder of .rst/.txt(.gz) files\n"
    "                (default: /usr/share/doc/linux-doc-6.1/Documentation, Debian's "
    "linux-doc-6.1)\n"
    "  --output      token file to write, atomically (default: linux-doc-6.1.tokens)\n"
    "  --validation  fraction of the tokens, at the end, kept for validation (default: 0.1)\n"
    "The `text` data set reads the token file ([dataset.text] path); docs/models.md, \"Data "
    "sets\", defines the corpus.";

int prepare(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description flags;
  flags.add_options()("output", po::value<std::string>()->default_value(text::kDefaultTokenFile))(
      "validation", po::value<double>()->default_value(text::kDefaultValidationFraction))(
      "source", po::value<std::vector<std::string>>());
  po::positional_options_description positional;
  positional.add("source", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(flags).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\n" + kUsage);
  }
  std::string source = text::kDefaultCorpus;
  if (vm.count("source")) {
    const auto& sources = vm["source"].as<std::vector<std::string>>();
    if (sources.size() != 1) throw UsageError(std::string("one SOURCE only\n") + kUsage);
    source = sources.front();
  }
  const auto& output = vm["output"].as<std::string>();
  const double fraction = vm["validation"].as<double>();
  if (!(fraction > 0.0 && fraction < 1.0)) {
    std::ostringstream text;
    text << "--validation " << fraction
         << ": give a fraction above 0 and below 1 (a run needs both parts)";
    throw UsageError(text.str());
  }
  const auto start = std::chrono::steady_clock::now();
  const auto prepared = text::prepare_token_file(source, output, fraction);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto& header = prepared.header;
  char summary[128];
  std::snprintf(summary, sizeof summary, "), CRC-32 %08x, in %.2f s\n", header.token_crc, seconds);
  std::cout << "prepared " << output << " from " << source << ": " << prepared.documents
            << " document(s), " << header.token_count << " byte tokens (training " << header.split
            << ", validation " << header.token_count - header.split << summary;
  return 0;
}

}  // namespace

int run_data(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kUsage << "\n";
    return 0;
  }
  if (!args.empty() && args[0] == "prepare") {
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (rest.size() == 1 && (rest[0] == "--help" || rest[0] == "-h")) {
      std::cout << kUsage << "\n";
      return 0;
    }
    return prepare(rest);
  }
  std::string message = "unknown data command";
  if (!args.empty()) {
    message += " '" + args[0] + "'";
    if (auto near = nearest_name(args[0], {"prepare"}))
      message += "; did you mean '" + *near + "'?";
  }
  throw UsageError(message + "\n" + kUsage);
}

}  // namespace tessera::cli
