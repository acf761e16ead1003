#pragma once
// Reads an INI config file with Boost.Program_options and pairs every entry with its line,
// which program_options does not report.

#include <filesystem>
#include <string>
#include <vector>

namespace tessera::detail {

struct IniEntry {
  std::string section;  // "runtime", "transport.local"
  std::string key;
  std::string value;
  int line = 0;
};

// A "[name]" header and its own line, so that an unknown section is reported where it is
// written, even when no key follows it.
struct IniSection {
  std::string name;
  int line = 0;
};

struct IniFile {
  std::vector<IniEntry> entries;     // file order
  std::vector<IniSection> sections;  // file order
};

// Reads FILE; LF, CRLF and CR line endings all end a line. Throws ConfigError "FILE:LINE: ..."
// for a line that is neither a [section] nor key = value, for a key outside any section, and
// for a key set twice.
[[nodiscard]] IniFile read_ini_file(const std::filesystem::path& file);

}  // namespace tessera::detail
