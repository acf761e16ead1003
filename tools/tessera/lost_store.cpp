#include "lost_store.hpp"

#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/runtime/store_url.hpp"

namespace tessera::cli {

namespace {

// As long as the launcher waits for a store before it counts it lost (docs/launch.md).
constexpr const char* kAnswerWithin = "3s";

}  // namespace

bool launcher_store_answers(const PluginRegistry& registry, const LaunchInfo& launch) {
  if (launch.store_url.empty()) return true;
  try {
    const auto url = parse_store_url(registry, launch.store_url, "TESSERA_STORE_URL");
    const auto defaults = registry.default_options(PluginKind::store, url.store);
    auto values = defaults.values();
    for (const auto& [key, value] : url.plugin_options()) values[key] = value;
    if (url.scheme == kLauncherStoreScheme) {
      // A client of the store the launcher serves, not a second server.
      values["serve"] = "false";
      values["token"] = launch.store_token;
    }
    values["timeout"] = kAnswerWithin;
    const auto store =
        registry.create<Store>(url.store, Options(defaults.section(), defaults.specs(), values));
    (void)store->check("membership/generation");
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::string lost_store_message(const std::string& store_url, const std::string& cause,
                               const std::filesystem::path& checkpoint_dir) {
  const std::string lead = "elastic: lost the job's store " + store_url + " (" + cause +
                           "); the members agree on the world through it, so the run cannot go "
                           "on or finish without it; ";
  if (checkpoint_dir.empty())
    return lead +
           "no checkpoint to resume from: [train] checkpoint_dir (--train.checkpoint_dir) is "
           "not set";
  try {
    const auto newest = open_newest_checkpoint(checkpoint_dir);
    if (!newest) return lead + "there is no checkpoint in " + checkpoint_dir.string() + " yet";
    return lead + "the newest checkpoint is " + newest->folder().string() + " (step " +
           std::to_string(newest->manifest().step) +
           "): once the store runs again, go on from it with `tessera train --resume` (the same "
           "config and checkpoint_dir)";
  } catch (const CheckpointError& e) {
    return lead + "and the newest checkpoint does not verify: " + e.what();
  }
}

}  // namespace tessera::cli
