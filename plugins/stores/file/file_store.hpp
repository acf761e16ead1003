#pragma once
// FileStore: the `file` store plugin's object, a store on a file system every rank can see
// (a local folder for one host, NFS or Lustre for several). Each key is one file in the folder;
// a value is published by writing a temporary file and renaming it over the key, so a reader
// sees the old value or the new one, never a torn one. Writers serialize on an flock()ed lock
// file, which makes add and compare_set atomic across processes and hosts. Waits poll with
// backoff (1 ms growing to 50 ms), so a wait costs at most one stat per poll.

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "tessera/plugin/options.hpp"
#include "tessera/plugin/store.hpp"

namespace tessera::file {

class FileStore final : public Store {
 public:
  explicit FileStore(const Options& options);
  // Creates `folder` if needed. `lock_timeout` bounds how long a write waits for the lock.
  FileStore(std::filesystem::path folder, Duration lock_timeout);

  void set(const std::string& key, const std::string& value) override;
  [[nodiscard]] std::string get(const std::string& key, Duration timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  [[nodiscard]] bool check(const std::string& key) override;
  bool remove(const std::string& key) override;

 private:
  class WriteLock;
  [[nodiscard]] std::filesystem::path key_path(const std::string& key) const;
  // The value, or nullopt when the key does not exist.
  [[nodiscard]] std::optional<std::string> read(const std::string& key) const;
  void write(const std::string& key, const std::string& value) const;

  std::filesystem::path folder_;
  Duration lock_timeout_;
};

}  // namespace tessera::file
