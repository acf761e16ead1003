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

// Entries in file order. Throws ConfigError "FILE:LINE: ..." for a line that is neither a
// [section] nor key = value, for a key outside any section, and for a key set twice.
[[nodiscard]] std::vector<IniEntry> read_ini_file(const std::filesystem::path& file);

}  // namespace tessera::detail
