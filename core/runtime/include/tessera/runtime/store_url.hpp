#pragma once
// Where a job's processes meet, written as one URL: what `tessera launch --store` takes, and
// what the launcher hands each worker in TESSERA_STORE_URL so that it opens the same store.
//
//   HOST:PORT, tcp://HOST:PORT           tessera's tcp store (the launcher serves it)
//   etcd://HOST:PORT[,HOST:PORT...][/P]  the etcd store against those endpoints, keys under P
//   file:///ABSOLUTE/PATH                the file store in that folder (shared by every host)
//
// A launcher's URL names where the job's store lives; for_job() narrows it to one job (an etcd
// key prefix, a subfolder), so that jobs sharing an etcd or a folder never see each other's
// keys. The workers get that narrowed URL and use it as it is.

#include <map>
#include <string>
#include <vector>

namespace tessera {

struct StoreUrl {
  std::string scheme;  // "tcp", "etcd" or "file": the store plugin it names
  // tcp: one "host:port"; etcd: the endpoints, each "host:port" (IPv6 as "[addr]:port").
  std::vector<std::string> endpoints;
  // etcd: the key prefix ("" or ending in '/'); file: the absolute folder. Empty for tcp.
  std::string path;

  // The canonical text: "tcp://h:1", "etcd://h:1,g:2/tessera/job/", "file:///shared/x".
  [[nodiscard]] std::string text() const;

  // The same store narrowed to job `job_id` (letters, digits, '.', '_', '-'): etcd keys under
  // "<prefix or tessera/><job_id>/", a file store in the subfolder <path>/<job_id>; tcp as it
  // is (its server holds one job). Throws ConfigError for an id outside that alphabet.
  [[nodiscard]] StoreUrl for_job(const std::string& job_id) const;

  // The options of the store plugin `scheme` that locate this store: tcp host and port, etcd
  // endpoints and prefix, file path. Every other option keeps its default or the config's.
  [[nodiscard]] std::map<std::string, std::string> plugin_options() const;
};

// Parses `text` in one of the forms above. `what` names where it came from ("--store",
// "TESSERA_STORE_URL") for the ConfigError thrown on an unknown scheme, a missing or bad port,
// a relative file path, a file URL naming a host, or an etcd URL over https.
[[nodiscard]] StoreUrl parse_store_url(const std::string& text, const std::string& what);

// A job id from the job's token: 16 hex digits of a SHA-1 name-based UUID of it, the same on
// every host given the same token, and telling nothing about the token to whoever reads the
// store's keys.
[[nodiscard]] std::string job_id_from_token(const std::string& token);

// Throws ConfigError, naming `what`, unless `id` is 1-64 letters, digits, '.', '_' or '-'
// (and not "." or ".."): it becomes an etcd key segment and a folder name.
void check_job_id(const std::string& id, const std::string& what);

}  // namespace tessera
