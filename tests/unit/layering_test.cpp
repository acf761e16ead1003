// The layers of libtessera (docs/architecture.md, "Layers") hold for every file of the tree: a
// file includes headers of its own layer and of the layers below it, never of one above, and a
// plugin includes only what plugins may (the plugin contract, the kits, the SDK). The build
// enforces the same for the core's layers (each links only those below it); this test also
// covers plugins, private headers and headers that only a test would notice.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = TESSERA_SOURCE_DIR;

// Layer of each public header folder, tessera/<folder>/.
const std::map<std::string, std::string> kFolderLayer = {{"base", "base"},
                                                         {"plugin", "base"},
                                                         {"config", "base"},
                                                         {"registry", "base"},
                                                         {"transport_kit", "transport_kit"},
                                                         {"strategy_kit", "strategy_kit"},
                                                         {"runtime", "runtime"},
                                                         {"elastic", "elastic"},
                                                         {"launch", "launch"},
                                                         {"sdk", "sdk"}};

// What each layer may include (itself included).
const std::map<std::string, std::set<std::string>> kMayInclude = {
    {"base", {"base"}},
    {"transport_kit", {"base", "transport_kit"}},
    {"strategy_kit", {"base", "strategy_kit"}},
    {"runtime", {"base", "transport_kit", "strategy_kit", "runtime"}},
    {"elastic", {"base", "transport_kit", "strategy_kit", "runtime", "elastic"}},
    {"launch", {"base", "transport_kit", "strategy_kit", "runtime", "elastic", "launch"}},
    // Plugins and the SDK see the contract and the kits, never the host's runtime.
    {"plugin", {"base", "transport_kit", "strategy_kit", "sdk"}},
};
const std::vector<std::string> kCoreLayers = {"base",    "transport_kit", "strategy_kit",
                                              "runtime", "elastic",       "launch"};

// A tessera header folder a plugin may not include even though its layer is allowed: the host's
// side of the core layer.
const std::set<std::string> kHostOnlyFolders = {"config", "registry"};

struct Include {
  int line = 0;
  std::string path;
};

std::vector<Include> includes_of(const fs::path& file) {
  static const std::regex quoted(R"re(^\s*#\s*include\s+"([^"]+)")re");
  std::vector<Include> out;
  std::ifstream in(file);
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    std::smatch m;
    if (std::regex_search(text, m, quoted)) out.push_back({line, m[1]});
  }
  return out;
}

bool is_source(const fs::path& p) {
  const auto ext = p.extension().string();
  return ext == ".cpp" || ext == ".hpp" || ext == ".h" || ext == ".cu" || ext == ".cuh";
}

std::vector<fs::path> sources_under(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && is_source(e.path())) out.push_back(e.path());
  }
  return out;
}

// The layer a private (non-tessera/) include of a core file resolves to: the first layer whose
// src/ holds it, searching the file's own layer first; empty when no layer's src/ holds it (a
// header of the file's own folder, or a third-party one).
std::string private_header_layer(const std::string& include, const std::string& own) {
  if (fs::exists(kRoot / "core" / own / "src" / include)) return own;
  for (const auto& layer : kCoreLayers) {
    if (fs::exists(kRoot / "core" / layer / "src" / include)) return layer;
  }
  return {};
}

std::string tree_path(const fs::path& file) {
  return fs::relative(file, kRoot).string();
}

TEST(Layering, EveryPublicHeaderFolderBelongsToTheLayerThatHoldsIt) {
  for (const auto& layer : kCoreLayers) {
    const auto include = kRoot / "core" / layer / "include" / "tessera";
    ASSERT_TRUE(fs::is_directory(include)) << include;
    for (const auto& folder : fs::directory_iterator(include)) {
      const auto name = folder.path().filename().string();
      const auto it = kFolderLayer.find(name);
      ASSERT_NE(it, kFolderLayer.end()) << tree_path(folder.path()) << " is in no layer";
      EXPECT_EQ(it->second, layer) << tree_path(folder.path());
    }
  }
}

TEST(Layering, NoCoreFileIncludesAHigherLayer) {
  std::vector<std::string> violations;
  std::size_t checked = 0;
  for (const auto& layer : kCoreLayers) {
    const auto& allowed = kMayInclude.at(layer);
    for (const auto& file : sources_under(kRoot / "core" / layer)) {
      for (const auto& inc : includes_of(file)) {
        ++checked;
        std::string target;
        if (inc.path.starts_with("tessera/")) {
          const auto folder = inc.path.substr(8, inc.path.find('/', 8) - 8);
          const auto it = kFolderLayer.find(folder);
          target = it == kFolderLayer.end() ? "unknown" : it->second;
        } else {
          target = private_header_layer(inc.path, layer);
          if (target.empty()) continue;
        }
        if (allowed.count(target) == 0) {
          violations.push_back(tree_path(file) + ":" + std::to_string(inc.line) + ": layer " +
                               layer + " includes \"" + inc.path + "\" of layer " + target);
        }
      }
    }
  }
  EXPECT_GT(checked, 300U) << "the scan found too few includes: is TESSERA_SOURCE_DIR right?";
  for (const auto& v : violations) ADD_FAILURE() << v;
}

TEST(Layering, PluginsIncludeOnlyTheContractTheKitsAndTheSdk) {
  const auto& allowed = kMayInclude.at("plugin");
  std::vector<std::string> violations;
  std::size_t plugin_files = 0;
  for (const auto* tree : {"plugins", "sdk"}) {
    for (const auto& file : sources_under(kRoot / tree)) {
      ++plugin_files;
      for (const auto& inc : includes_of(file)) {
        if (!inc.path.starts_with("tessera/")) continue;
        const auto folder = inc.path.substr(8, inc.path.find('/', 8) - 8);
        const auto it = kFolderLayer.find(folder);
        const bool ok = it != kFolderLayer.end() && allowed.count(it->second) != 0 &&
                        kHostOnlyFolders.count(folder) == 0;
        if (!ok) {
          violations.push_back(tree_path(file) + ":" + std::to_string(inc.line) + ": \"" +
                               inc.path + "\" is the host's, not a plugin's to include");
        }
      }
    }
  }
  EXPECT_GT(plugin_files, 50U);
  for (const auto& v : violations) ADD_FAILURE() << v;
}

// The rule itself: a file that includes a higher layer is found (a check that cannot fail tests
// nothing).
TEST(Layering, TheCheckFindsAnIncludeOfAHigherLayer) {
  const auto dir = fs::temp_directory_path() / "tessera-layering-test";
  fs::create_directories(dir);
  const auto file = dir / "bad.cpp";
  {
    std::ofstream out(file);
    out << "#include <vector>\n#include \"tessera/base/error.hpp\"\n"
        << "  #  include \"tessera/runtime/trainer.hpp\"\n";
  }
  const auto found = includes_of(file);
  fs::remove_all(dir);
  ASSERT_EQ(found.size(), 2U);
  EXPECT_EQ(found[1].line, 3);
  EXPECT_EQ(found[1].path, "tessera/runtime/trainer.hpp");
  EXPECT_EQ(kMayInclude.at("strategy_kit").count(kFolderLayer.at("runtime")), 0U);
  EXPECT_EQ(private_header_layer("copy_ring.hpp", "base"), "elastic");
}

}  // namespace
