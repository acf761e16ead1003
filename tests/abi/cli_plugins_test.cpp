// The CLI over the broken plugins: `tessera plugins` lists the good ones and warns about each
// refused file; errors exit with the documented codes.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "abi_test_support.hpp"

namespace tessera {
namespace {

using abi_test::contains;

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CliResult run_cli(const std::string& args) {
  // One file per process and call: ctest runs the tests of this binary as parallel processes.
  static int calls = 0;
  const std::string err_file = ::testing::TempDir() + "tessera_cli_stderr." +
                               std::to_string(::getpid()) + "." + std::to_string(calls++) + ".txt";
  const std::string command = std::string(TESSERA_CLI) + " " + args + " 2>" + err_file;
  CliResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    result.out.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ostringstream err;
  err << std::ifstream(err_file).rdbuf();
  result.err = err.str();
  std::remove(err_file.c_str());
  return result;
}

TEST(CliPlugins, ListsGoodPluginsAsJsonAndWarnsAboutEachRefusedFile) {
  const auto r = run_cli("plugins --kind optimizer --json --path " TESSERA_ABI_PLUGIN_DIR);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto listing = nlohmann::ordered_json::parse(r.out);  // throws unless stdout is JSON
  const auto& plugins = listing.at("plugins");
  const auto good = std::find_if(plugins.begin(), plugins.end(),
                                 [](const auto& p) { return p.at("name") == "abi_good"; });
  ASSERT_NE(good, plugins.end()) << r.out;
  EXPECT_EQ(good->at("kind"), "optimizer");
  EXPECT_EQ(good->at("aliases"), nlohmann::ordered_json::array());
  EXPECT_EQ(good->at("version"), "1.2.3");
  const auto mode = nlohmann::ordered_json::parse(
      R"({"name": "mode", "type": "string", "default": "plain", "help": "how to add",)"
      R"( "choices": ["plain", "fancy"], "minimum": null, "maximum": null})");
  EXPECT_TRUE(std::find(good->at("options").begin(), good->at("options").end(), mode) !=
              good->at("options").end())
      << r.out;
  EXPECT_FALSE(listing.at("failures").empty()) << r.out;
  EXPECT_EQ(good->at("capabilities"),
            nlohmann::ordered_json::parse(
                R"({"spans_processes": false, "spans_hosts": false, "replicated_state": false,)"
                R"( "devices": []})"))
      << "only a transport declares devices";
  EXPECT_TRUE(contains(r.err, "tessera: warning: " + abi_test::plugin_file("abi_one").string() +
                                  ": exports tessera_plugin_descriptor_v1: it was built for "
                                  "plugin ABI 1"));
  EXPECT_TRUE(contains(
      r.err, abi_test::plugin_file("not_a_library").string() + ": not a loadable shared object"));
}

TEST(CliPlugins, TransportsStoresAndStrategiesShowTheirCapabilities) {
  const auto transports = run_cli("plugins --kind transport --json");
  EXPECT_EQ(transports.exit_code, 0) << transports.err;
  const auto listing = nlohmann::ordered_json::parse(transports.out);
  const auto& plugins = listing.at("plugins");
  const auto shm = std::find_if(plugins.begin(), plugins.end(),
                                [](const auto& p) { return p.at("name") == "shm"; });
  ASSERT_NE(shm, plugins.end()) << transports.out;
  EXPECT_EQ(shm->at("aliases"), nlohmann::ordered_json::parse(R"(["shared_memory"])"));
  EXPECT_EQ(shm->at("capabilities"),
            nlohmann::ordered_json::parse(
                R"({"spans_processes": true, "spans_hosts": false, "replicated_state": false,)"
                R"( "devices": ["cpu"]})"));
  const auto stores = run_cli("plugins --kind store");
  EXPECT_EQ(stores.exit_code, 0) << stores.err;
  EXPECT_TRUE(contains(stores.out, "store.memory 1.0.0\n"));
  EXPECT_TRUE(contains(stores.out, "  capabilities: one process only\n"));
  EXPECT_TRUE(contains(stores.out, "  capabilities: spans processes, spans hosts\n"));
  // The URL scheme a store reads itself (ABI 3.0); the memory store has none.
  EXPECT_TRUE(contains(stores.out, "  named by URL: file://\n")) << stores.out;
  const auto store_listing =
      nlohmann::ordered_json::parse(run_cli("plugins --kind store --json").out).at("plugins");
  const auto scheme_of = [&](const std::string& name) {
    const auto it = std::find_if(store_listing.begin(), store_listing.end(),
                                 [&](const auto& p) { return p.at("name") == name; });
    return it == store_listing.end() ? nlohmann::ordered_json("absent") : it->at("url_scheme");
  };
  EXPECT_EQ(scheme_of("tcp"), "tcp");
  EXPECT_EQ(scheme_of("file"), "file");
  EXPECT_EQ(scheme_of("memory"), nlohmann::ordered_json(nullptr));
  // ddp declares TESSERA_REPLICATED_STATE (the elastic runtime keeps no copies of it); zero2's
  // state is sharded.
  const auto strategies = run_cli("plugins --kind strategy --json");
  EXPECT_EQ(strategies.exit_code, 0) << strategies.err;
  const auto listed = nlohmann::ordered_json::parse(strategies.out).at("plugins");
  const auto state_of = [&](const std::string& name) {
    const auto it = std::find_if(listed.begin(), listed.end(),
                                 [&](const auto& p) { return p.at("name") == name; });
    return it == listed.end() ? nlohmann::ordered_json() : it->at("capabilities");
  };
  EXPECT_EQ(state_of("ddp").at("replicated_state"), true) << strategies.out;
  EXPECT_EQ(state_of("zero2").at("replicated_state"), false) << strategies.out;
  const auto text = run_cli("plugins --kind strategy");
  EXPECT_TRUE(contains(text.out, "strategy.ddp 1.0.0\n")) << text.out;
  EXPECT_TRUE(contains(text.out, "  capabilities: replicated state, devices cpu cuda\n"))
      << text.out;
  // Where a strategy's state may live (ABI 2.3): hybrid's only on the host.
  EXPECT_EQ(state_of("zero2").at("devices"), nlohmann::ordered_json::parse(R"(["cpu", "cuda"])"))
      << strategies.out;
  if (!state_of("hybrid").is_null()) {
    EXPECT_EQ(state_of("hybrid").at("devices"), nlohmann::ordered_json::parse(R"(["cpu"])"))
        << strategies.out;
  }
}

TEST(CliPlugins, UnknownKindIsAUsageErrorWithASuggestion) {
  const auto r = run_cli("plugins --kind optimiser");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err,
                       "tessera: error: plugins: unknown kind 'optimiser'; did you mean "
                       "'optimizer'?"));
}

TEST(CliConfigCheck, MissingFileExitsTwoNamingTheFile) {
  const auto r = run_cli("config check /nonexistent/run.ini");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "tessera: error: /nonexistent/run.ini: cannot open the config file"));
}

TEST(CliConfigCheck, PrintsEveryCoreValueWithItsOrigin) {
  const std::string file = ::testing::TempDir() + "tessera_cli_check.ini";
  std::ofstream(file) << "[runtime]\nworld_size = 3\n";
  const auto r = run_cli("config check " + file + " --runtime.timeout=20s");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "world_size = 3  # " + file + ":2"));
  EXPECT_TRUE(contains(r.out, "timeout    = 20s  # flag --runtime.timeout"));
  EXPECT_TRUE(contains(r.out, "transport  = local  # default"));
}

TEST(CliMain, UnknownCommandSuggestsTheNearest) {
  const auto r = run_cli("plugin");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "unknown command 'plugin'; did you mean 'plugins'?"));
}

}  // namespace
}  // namespace tessera
