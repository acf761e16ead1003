// Every option of every in-tree plugin is documented in its README, with the type and default
// the plugin declares. The README is the one whose title names the plugin in backticks
// (`# transport `ucx``); its options table has rows "| `name` | type | `default` | help |",
// where a required option's default reads `required` and an empty one `""`.
// A renamed option, a changed default or a new option without a row fails here.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tessera/registry/registry.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct Row {
  std::string type;
  std::string default_value;  // one value, or per plugin: "`0` (adam), `0.01` (adamw)"

  [[nodiscard]] bool documents_default(const std::string& value, const std::string& plugin) const {
    return default_value == value ||
           default_value.find("`" + value + "` (" + plugin + ")") != std::string::npos;
  }
};

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t");
  const auto last = s.find_last_not_of(" \t");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

std::string unquote(std::string s) {
  s = trim(std::move(s));
  if (s.size() >= 2 && s.front() == '`' && s.back() == '`') s = s.substr(1, s.size() - 2);
  return s;
}

struct Readme {
  fs::path path;
  std::string title;
  std::map<std::string, Row> rows;  // option name -> its table row
};

Readme read_readme(const fs::path& path) {
  Readme readme{path, {}, {}};
  std::ifstream in(path);
  std::getline(in, readme.title);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    // Cells split at '|' but not at an escaped "\|" (choices: "string (`relu`\|`gelu`)").
    std::vector<std::string> cells(1);
    for (std::size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
        cells.back() += '|';
        ++i;
      } else if (line[i] == '|') {
        cells.emplace_back();
      } else {
        cells.back() += line[i];
      }
    }
    if (cells.size() < 4) continue;
    // The type may be followed by its choices: "string (`none`, `bf16`)".
    const std::string type = trim(cells[1]);
    std::string default_value = trim(cells[2]);
    if (default_value.find("` (") == std::string::npos) default_value = unquote(default_value);
    if (default_value == "\"\"") default_value.clear();
    readme.rows[unquote(cells[0])] = {type.substr(0, type.find(' ')), default_value};
  }
  return readme;
}

TEST(PluginReadmes, DocumentEveryOptionWithItsTypeAndDefault) {
  std::vector<Readme> readmes;
  for (const auto& entry : fs::recursive_directory_iterator(TESSERA_SOURCE_DIR "/plugins")) {
    if (entry.path().filename() == "README.md") readmes.push_back(read_readme(entry.path()));
  }
  ASSERT_FALSE(readmes.empty());

  PluginRegistry registry;
  registry.scan_directory(TESSERA_PLUGIN_DIR);
  const auto plugins = registry.plugins();
  ASSERT_GE(plugins.size(), 10U) << "plugins found in " << TESSERA_PLUGIN_DIR;
  for (const PluginInfo* plugin : plugins) {
    const std::string quoted = "`" + plugin->name + "`";
    const Readme* readme = nullptr;
    for (const Readme& r : readmes) {
      if (r.title.rfind('#', 0) == 0 && r.title.find(quoted) != std::string::npos) readme = &r;
    }
    ASSERT_NE(readme, nullptr) << "no plugins/**/README.md titled with " << quoted;
    for (const OptionSpec& option : plugin->options) {
      const auto row = readme->rows.find(option.name);
      ASSERT_NE(row, readme->rows.end())
          << readme->path << " has no row for option `" << option.name << "` of " << plugin->name;
      EXPECT_EQ(row->second.type, option_type_name(option.type))
          << readme->path << ": type of `" << option.name << "`";
      const std::string declared = option.default_value.value_or("required");
      EXPECT_TRUE(row->second.documents_default(declared, plugin->name))
          << readme->path << ": the default of `" << option.name << "` is `" << declared << "` for "
          << plugin->name << ", the README says " << row->second.default_value;
    }
  }
}

// A plugin lists only the options that apply to it, and their help speaks of that plugin: no
// help starts "zero2:" under zero1 (the two once shared one table).
TEST(PluginOptions, NoHelpIsAddressedToAnotherPluginOfTheKind) {
  PluginRegistry registry;
  registry.scan_directory(TESSERA_PLUGIN_DIR);
  for (const PluginInfo* plugin : registry.plugins()) {
    for (const PluginInfo* other : registry.plugins(plugin->kind)) {
      if (other == plugin) continue;
      for (const OptionSpec& option : plugin->options) {
        EXPECT_FALSE(option.help.starts_with(other->name + ":") ||
                     option.help.starts_with(other->name + " only"))
            << plugin->name << "'s option `" << option.name << "` is about " << other->name << ": "
            << option.help;
      }
    }
  }
}

TEST(PluginOptions, ZeroOneHasNoStagingWindowsAndZeroTwoHas) {
  PluginRegistry registry;
  registry.scan_directory(TESSERA_PLUGIN_DIR);
  const auto names = [&](const char* plugin) {
    std::vector<std::string> out;
    for (const auto& option : registry.find(PluginKind::strategy, plugin).options)
      out.push_back(option.name);
    return out;
  };
  EXPECT_EQ(names("zero1"), (std::vector<std::string>{"bucket_cap", "first_bucket"}));
  EXPECT_EQ(names("zero2"),
            (std::vector<std::string>{"bucket_cap", "first_bucket", "staging_windows"}));
}

}  // namespace
}  // namespace tessera
