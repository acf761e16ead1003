#pragma once
// How a store plugin reads the URLs that name it. `tessera launch --store etcd://h:2379` and the
// TESSERA_STORE_URL a launcher hands its workers name a store by URL; the part before "://" picks
// the store plugin that declared that scheme (plugin_abi.h, url_scheme), and everything after
// it, the location, is the plugin's to read: which options open the store there, how one job is
// kept apart from others sharing it, and what to clean up when the job is over. The core knows
// no store's URL form, option name or leftovers.
//
// A store plugin provides one by naming a class in its store class (the SDK picks it up):
//
//   class EtcdUrlScheme final : public tessera::StoreUrlScheme {
//    public:
//     static constexpr const char* kScheme = "etcd";
//     ...
//   };
//   class EtcdStore final : public tessera::Store {
//    public:
//     using UrlScheme = EtcdUrlScheme;
//     ...
//   };
//
// Thread-safety: every method may be called from any thread; none blocks, except forget_job,
// which calls the store. Errors: ConfigError for a location the plugin cannot read, saying what
// is wrong and what to write; the caller adds where the URL came from (the flag, the variable).

#include <map>
#include <string>

#include "tessera/plugin/store.hpp"

namespace tessera {

class StoreUrlScheme {
 public:
  virtual ~StoreUrlScheme() = default;

  // The forms this scheme takes, for an error about a URL nobody serves:
  // "etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 server)".
  [[nodiscard]] virtual std::string forms() const = 0;

  // Checks `location` (what follows "scheme://") and returns it in canonical form, so that a
  // worker given "scheme://" + canonical(location) reads back the same text. Throws ConfigError.
  [[nodiscard]] virtual std::string canonical(const std::string& location) const = 0;

  // The canonical `location` narrowed to one job, so that jobs sharing a server or a folder never
  // see each other's keys (a key prefix, a subfolder); a store that holds one job returns it as
  // it is. `job_id` is 1-64 letters, digits, '.', '_' or '-', never "." or "..".
  [[nodiscard]] virtual std::string for_job(const std::string& location,
                                            const std::string& job_id) const = 0;

  // The values of this plugin's options that open the store at the canonical `location`; every
  // other option keeps its default or the config's.
  [[nodiscard]] virtual std::map<std::string, std::string> options(
      const std::string& location) const = 0;

  // Removes what a job left at its canonical `location` once it is over, so that a later job with
  // the same id starts clean; `store` is open there. Called once, after every worker ended.
  // By default removes every key `store` lists; a store with more to remove (a folder) says so.
  virtual void forget_job(const std::string& location, Store& store) const {
    (void)location;
    for (const auto& entry : store.list("")) store.remove(entry.first);
  }
};

}  // namespace tessera
