#pragma once
// Where a job's processes meet, written as one URL: what `tessera launch --store` takes, and
// what the launcher hands each worker in TESSERA_STORE_URL so that it opens the same store.
//
//   SCHEME://LOCATION   the store plugin that declared SCHEME (plugin_abi.h, url_scheme) reads
//                       LOCATION (tessera/plugin/store_url_scheme.hpp): tcp://HOST:PORT,
//                       etcd://HOST:PORT[,HOST:PORT...][/PREFIX], file:///ABSOLUTE/PATH, or any
//                       third-party store's own scheme
//   HOST:PORT           the tcp store, which `tessera launch` serves itself
//
// A launcher's URL names where the job's store lives; for_job() narrows it to one job (an etcd
// key prefix, a subfolder: the plugin decides), so that jobs sharing a server or a folder never
// see each other's keys. The workers get that narrowed URL and use it as it is.

#include <map>
#include <memory>
#include <string>

#include "tessera/plugin/store.hpp"
#include "tessera/plugin/store_url_scheme.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {

// The scheme a URL without one ("HOST:PORT") stands for: the store the launcher serves.
inline constexpr const char* kLauncherStoreScheme = "tcp";

struct StoreUrl {
  std::string scheme;    // the part before "://"
  std::string store;     // the store plugin that serves it
  std::string location;  // the part after "://", canonical: the plugin's to read
  std::shared_ptr<const StoreUrlScheme> reader;  // the plugin's reader of its URLs

  // The canonical text: "tcp://h:1", "etcd://h:1,g:2/tessera/job/", "file:///shared/x".
  [[nodiscard]] std::string text() const { return scheme + "://" + location; }

  // The same store narrowed to job `job_id` (letters, digits, '.', '_', '-'), as the plugin
  // narrows it. Throws ConfigError for an id outside that alphabet.
  [[nodiscard]] StoreUrl for_job(const std::string& job_id) const;

  // The values of the store plugin's options that open this store. Every other option keeps its
  // default or the config's.
  [[nodiscard]] std::map<std::string, std::string> plugin_options() const;

  // Removes what the job left in this store once it is over (its keys, its folder: the plugin
  // knows); `opened` is open on it.
  void forget_job(Store& opened) const;
};

// Parses `text` in one of the forms above, through the store plugins `registry` holds. `what`
// names where it came from ("--store", "TESSERA_STORE_URL") for the ConfigError thrown on an
// empty text, a scheme no loaded store serves (listing the forms that are served), or a location
// its plugin refuses (the plugin's reason, with the forms it takes).
[[nodiscard]] StoreUrl parse_store_url(const PluginRegistry& registry, const std::string& text,
                                       const std::string& what);

// A job id from the job's token: 16 hex digits of a SHA-1 name-based UUID of it, the same on
// every host given the same token, and telling nothing about the token to whoever reads the
// store's keys.
[[nodiscard]] std::string job_id_from_token(const std::string& token);

// Throws ConfigError, naming `what`, unless `id` is 1-64 letters, digits, '.', '_' or '-'
// (and not "." or ".."): it becomes a key segment or a folder name in the job's store.
void check_job_id(const std::string& id, const std::string& what);

}  // namespace tessera
