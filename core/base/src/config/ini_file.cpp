#include "config/ini_file.hpp"

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/parsers.hpp>
#include <fstream>
#include <map>
#include <sstream>

#include "tessera/base/error.hpp"

namespace tessera::detail {

namespace {

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r");
  return std::string(s.substr(first, last - first + 1));
}

struct KeyLine {
  std::string full_key;  // "section.key", as program_options spells it
  int line = 0;
};

// The same line grammar program_options uses ('#' starts a comment anywhere, "[name]" opens a
// section, "key = value"), read only to learn where each key sits.
std::vector<KeyLine> index_lines(const std::filesystem::path& file, const std::string& text,
                                 std::vector<IniSection>& sections) {
  std::vector<KeyLine> keys;
  std::istringstream in(text);
  std::string raw;
  std::string prefix;
  for (int line = 1; std::getline(in, raw); ++line) {
    const std::string s = trim(std::string_view(raw).substr(0, raw.find('#')));
    if (s.empty()) continue;
    const std::string where = file.string() + ":" + std::to_string(line) + ": ";
    if (s.front() == '[' && s.back() == ']') {
      prefix = s.substr(1, s.size() - 2);
      sections.push_back({trim(prefix), line});
      if (prefix.empty() || prefix.back() != '.') prefix += '.';
    } else if (const auto eq = s.find('='); eq != std::string::npos) {
      const std::string key = trim(std::string_view(s).substr(0, eq));
      if (key.empty()) throw ConfigError(where + "'" + s + "' has no key before '='");
      if (prefix.empty()) {
        throw ConfigError(where + "'" + key + "' comes before any [section] header");
      }
      keys.push_back({prefix + key, line});
    } else {
      throw ConfigError(where + "expected '[section]' or 'key = value', got '" + s + "'");
    }
  }
  return keys;
}

}  // namespace

IniFile read_ini_file(const std::filesystem::path& file) {
  std::ifstream stream(file, std::ios::binary);
  if (!stream) throw ConfigError(file.string() + ": cannot open the config file");
  std::ostringstream buffer;
  buffer << stream.rdbuf();
  // Lines may end in LF, CRLF or a lone CR (classic Mac OS, some editors' exports); both
  // readers below split on LF only, and would see a CR-only file as one long comment-less line
  // or, worse, as nothing at all. So every line ending becomes LF first.
  std::string text;
  const std::string raw = buffer.str();
  text.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\r') {
      text += raw[i];
    } else if (i + 1 >= raw.size() || raw[i + 1] != '\n') {
      text += '\n';
    }
  }
  IniFile result;
  const std::vector<KeyLine> lines = index_lines(file, text, result.sections);

  std::istringstream in(text);
  boost::program_options::parsed_options parsed(nullptr);
  try {
    // Nothing is registered: every key comes back "unregistered", and the config validates
    // them itself against schemas that depend on which plugins were found.
    parsed = boost::program_options::parse_config_file(
        in, boost::program_options::options_description(), true);
  } catch (const boost::program_options::error& e) {
    throw ConfigError(file.string() + ": " + e.what());
  }
  if (parsed.options.size() != lines.size()) {
    throw ConfigError(file.string() + ": program_options read " +
                      std::to_string(parsed.options.size()) + " entries, the line index " +
                      std::to_string(lines.size()) +
                      "; the file uses a syntax tessera does not know");
  }

  std::vector<IniEntry>& entries = result.entries;
  std::map<std::string, int> first_line;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& option = parsed.options[i];
    const std::string& full = option.string_key;
    const std::string where = file.string() + ":" + std::to_string(lines[i].line) + ": ";
    if (full != lines[i].full_key) {
      throw ConfigError(where + "program_options read '" + full + "' where the line index read '" +
                        lines[i].full_key + "'");
    }
    const auto dot = full.rfind('.');
    IniEntry entry{full.substr(0, dot), full.substr(dot + 1),
                   option.value.empty() ? std::string() : trim(option.value.front()),
                   lines[i].line};
    if (auto [it, inserted] = first_line.emplace(full, entry.line); !inserted) {
      throw ConfigError(where + "[" + entry.section + "] " + entry.key +
                        " is already set on line " + std::to_string(it->second));
    }
    entries.push_back(std::move(entry));
  }
  return result;
}

}  // namespace tessera::detail
