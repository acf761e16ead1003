#pragma once
// FileStore: the `file` store plugin's object, a store on a file system every rank can see
// (a local folder for one host, NFS or Lustre for several). Each key is one file in the folder,
// holding the number of the lease it is bound to (0: none), a newline and the value; a value
// is published by writing a temporary file and renaming it over the key, so a reader sees the
// old value or the new one, never a torn one. Writers serialize on an flock()ed lock file,
// which makes add and compare_set atomic across processes and hosts. Waits poll with backoff
// (1 ms growing to 50 ms), so a wait costs at most one read per poll.
//
// A lease is a file `.lease.<number>` holding its wall-clock deadline and ttl and the keys
// bound to it. Every reader checks the deadline against its own wall clock, so every process
// agrees on a lease's end as far as their clocks agree: hosts sharing a folder need
// synchronized clocks (NTP), well within kLeaseExpirySlack. An ended lease's files are
// deleted by the next keep_alive, set or revoke that names it, or by the next grant_lease
// (which sweeps every ended lease); until then readers already see its keys as absent.

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tessera/plugin/options.hpp"
#include "tessera/plugin/store.hpp"
#include "url_scheme.hpp"

namespace tessera::file {

class FileStore final : public Store {
 public:
  using UrlScheme = FileUrlScheme;  // file:///... names this store

  explicit FileStore(const Options& options);
  // Creates `folder` if needed. `lock_timeout` bounds how long a write waits for the lock.
  FileStore(std::filesystem::path folder, Duration lock_timeout);

  void set(const std::string& key, const std::string& value) override;
  void set(const std::string& key, const std::string& value, LeaseId lease) override;
  [[nodiscard]] std::string get(const std::string& key, Duration timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  std::optional<std::string> wait_for_change(const std::string& key,
                                             const std::optional<std::string>& known,
                                             Duration timeout) override;
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> list(
      const std::string& prefix) override;
  [[nodiscard]] bool check(const std::string& key) override;
  bool remove(const std::string& key) override;
  [[nodiscard]] LeaseId grant_lease(Duration ttl) override;
  void keep_alive(LeaseId lease) override;
  void revoke_lease(LeaseId lease) override;

 private:
  class WriteLock;
  struct Entry {
    std::string value;
    LeaseId lease;
  };
  struct LeaseRecord {
    std::int64_t deadline_us = 0;  // wall clock, microseconds since the epoch
    Duration ttl{};
    std::vector<std::string> key_files;
  };

  [[nodiscard]] std::filesystem::path key_path(const std::string& key) const;
  [[nodiscard]] std::filesystem::path lease_path(LeaseId lease) const;
  // The file's content, or nullopt when it does not exist.
  [[nodiscard]] static std::optional<std::string> read_file(const std::filesystem::path& path);
  void write_file(const std::filesystem::path& path, const std::string& content) const;
  // The key file's entry, or nullopt when it does not exist or its lease has ended.
  [[nodiscard]] std::optional<Entry> read_entry(const std::filesystem::path& path) const;
  [[nodiscard]] std::optional<std::string> read(const std::string& key) const;
  void write(const std::string& key, const std::string& value, LeaseId lease) const;
  [[nodiscard]] std::optional<LeaseRecord> read_lease(LeaseId lease) const;
  void write_lease(LeaseId lease, const LeaseRecord& record) const;
  // The following three write: call them under the lock.
  void end_lease(LeaseId lease, const LeaseRecord& record) const;
  // The lease's record if it is alive; an ended lease's files are deleted.
  [[nodiscard]] std::optional<LeaseRecord> alive_lease(LeaseId lease) const;
  void sweep_expired_leases() const;
  [[nodiscard]] LeaseExpired expired(const std::string& what, LeaseId lease) const;

  std::filesystem::path folder_;
  Duration lock_timeout_;
};

}  // namespace tessera::file
