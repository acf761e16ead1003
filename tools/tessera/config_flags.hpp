#pragma once
// The config overrides on a command line (--section.key=value) pass through program_options
// untouched: it knows none of them, and it would refuse an empty value ("--train.checkpoint_dir="
// clears the option) before the config could read it.

#include <algorithm>
#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "tessera/config/config.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

// For command_line_parser::extra_style_parser: takes a leading "--section.key=value" token as an
// unregistered option, which collect_unrecognized() hands back as it was written.
inline std::vector<boost::program_options::option> take_config_flag(
    std::vector<std::string>& args) {
  std::vector<boost::program_options::option> taken;
  if (args.empty()) return taken;
  const std::string& token = args.front();
  const auto equals = token.find('=');
  const auto dot = token.find('.');
  if (!token.starts_with("--") || equals == std::string::npos || dot == std::string::npos ||
      dot > equals) {
    return taken;
  }
  boost::program_options::option option(token.substr(2, equals - 2), {token.substr(equals + 1)});
  option.unregistered = true;
  option.original_tokens = {token};
  taken.push_back(std::move(option));
  args.erase(args.begin());
  return taken;
}

// Parses a command's own `flags` from `args` into `vm` (notified) and returns the
// --section.key=value words left for the config, as they were written. A mistake in the
// command's flags is a UsageError starting with "<command>: ".
inline std::vector<std::string> parse_command_flags(
    const std::vector<std::string>& args, const boost::program_options::options_description& flags,
    boost::program_options::variables_map& vm, const std::string& command) {
  namespace po = boost::program_options;
  try {
    const auto parsed = po::command_line_parser(args)
                            .options(flags)
                            .extra_style_parser(take_config_flag)
                            .allow_unregistered()
                            .run();
    po::store(parsed, vm);
    po::notify(vm);
    return po::collect_unrecognized(parsed.options, po::include_positional);
  } catch (const po::error& e) {
    throw UsageError(command + ": " + e.what());
  }
}

// `-n N` of `tessera train` and `tessera config check`: [runtime] world_size under a shorter
// name, with the same strict parse and range, returned as that option's flag so that it wins over
// the file and the environment (in launched workers too).
inline std::string world_size_flag(const std::string& command, const std::string& text) {
  const auto& runtime = Config::core_schema().at("runtime");
  const auto spec = std::find_if(runtime.begin(), runtime.end(),
                                 [](const OptionSpec& o) { return o.name == "world_size"; });
  if (auto error = validate_option_value(*spec, text)) {
    throw UsageError(command + ": -n " + text + ": " + *error);
  }
  return "--runtime.world_size=" + text;
}

}  // namespace tessera::cli
