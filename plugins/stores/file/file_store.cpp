#include "file_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <random>
#include <thread>

#include "tessera/base/error.hpp"

namespace tessera::file {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kFirstPoll = std::chrono::milliseconds(1);
constexpr auto kMaxPoll = std::chrono::milliseconds(50);
// File names longer than this fail on common file systems (the limit is 255 bytes).
constexpr std::size_t kMaxFileName = 240;
constexpr const char* kLockFile = ".lock";
constexpr std::string_view kLeaseFilePrefix = ".lease.";

std::string system_error(const std::string& what, const std::filesystem::path& path) {
  return "file store: " + what + " " + path.string() + ": " + std::strerror(errno);
}

// Keys are arbitrary bytes; file names are not. Letters, digits, '-', '_' and '.' are kept,
// every other byte becomes %XX, and a "k" prefix keeps names clear of ".", ".." and the
// store's own dot files. No code is a prefix of another, so a key starts with a prefix exactly
// when its name starts with the prefix's name: list() filters names without decoding them.
std::string encode_key(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name = "k";
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.') {
      name.push_back(ch);
    } else {
      name.push_back('%');
      name.push_back(kHex[c >> 4]);
      name.push_back(kHex[c & 15]);
    }
  }
  return name;
}

// The key of a name encode_key made; nullopt for any other name.
std::optional<std::string> decode_key(std::string_view name) {
  if (!name.starts_with('k')) return std::nullopt;
  std::string key;
  for (std::size_t i = 1; i < name.size(); ++i) {
    if (name[i] != '%') {
      key.push_back(name[i]);
      continue;
    }
    unsigned byte = 0;
    if (i + 2 >= name.size()) return std::nullopt;
    const auto [end, ec] = std::from_chars(name.data() + i + 1, name.data() + i + 3, byte, 16);
    if (ec != std::errc() || end != name.data() + i + 3) return std::nullopt;
    key.push_back(static_cast<char>(byte));
    i += 2;
  }
  return key;
}

// Sleeps the next step of a 1 ms..50 ms backoff; false once the deadline has passed.
bool backoff(Clock::time_point deadline, std::chrono::milliseconds& step) {
  const auto now = Clock::now();
  if (now >= deadline) return false;
  std::this_thread::sleep_for(std::min<Clock::duration>(step, deadline - now));
  step = std::min(step * 2, std::chrono::milliseconds(kMaxPoll));
  return true;
}

std::string duration_text(Duration d) {
  return std::to_string(d.count()) + " ms";
}

// Lease deadlines are wall-clock time, the one clock that every process and host sharing the
// folder can read; microseconds, so a deadline is never a rounding earlier than promised.
std::int64_t wall_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t lease_number(LeaseId lease) {
  return static_cast<std::int64_t>(lease);
}

// Parses a decimal int64 filling all of `text`.
std::optional<std::int64_t> parse_int(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

// Holds the folder's lock file flock()ed exclusively. Each lock opens its own descriptor, so
// threads of one process exclude each other as processes do.
class FileStore::WriteLock {
 public:
  WriteLock(const std::filesystem::path& folder, Duration timeout) {
    const auto path = folder / kLockFile;
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(system_error("cannot open", path));
    const auto deadline = Clock::now() + timeout;
    auto step = std::chrono::milliseconds(kFirstPoll);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        const auto message = system_error("cannot lock", path);
        ::close(fd_);
        throw Error(message);
      }
      if (!backoff(deadline, step)) {
        ::close(fd_);
        throw Timeout("file store: lock " + path.string() + " still held by another writer after " +
                      duration_text(timeout));
      }
    }
  }
  ~WriteLock() { ::close(fd_); }  // closing the descriptor releases the flock
  WriteLock(const WriteLock&) = delete;
  WriteLock& operator=(const WriteLock&) = delete;

 private:
  int fd_ = -1;
};

FileStore::FileStore(const Options& options)
    : FileStore(options.get_string("path"), options.get_duration("timeout")) {}

FileStore::FileStore(std::filesystem::path folder, Duration lock_timeout)
    : folder_(std::move(folder)), lock_timeout_(lock_timeout) {
  if (folder_.empty())
    throw ConfigError("store.file.path: empty; name a folder every rank can see");
  std::error_code ec;
  std::filesystem::create_directories(folder_, ec);
  if (ec || !std::filesystem::is_directory(folder_))
    throw ConfigError("store.file.path: cannot use folder " + folder_.string() +
                      (ec ? ": " + ec.message() : ": not a folder"));
}

std::filesystem::path FileStore::key_path(const std::string& key) const {
  auto name = encode_key(key);
  TESSERA_CHECK(name.size() <= kMaxFileName, "file store: key of " + std::to_string(key.size()) +
                                                 " bytes is too long for a file name");
  return folder_ / name;
}

std::filesystem::path FileStore::lease_path(LeaseId lease) const {
  return folder_ / (std::string(kLeaseFilePrefix) + std::to_string(lease_number(lease)));
}

std::optional<std::string> FileStore::read_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw Error(system_error("cannot open", path));
  }
  std::string content;
  char buffer[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const auto message = system_error("cannot read", path);
      ::close(fd);
      throw Error(message);
    }
    content.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return content;
}

void FileStore::write_file(const std::filesystem::path& path, const std::string& content) const {
  static std::atomic<unsigned> counter{0};
  // Unique per process and call, and dot-prefixed so it never looks like a key.
  const auto temp =
      folder_ / (".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) +
                 "." + path.filename().string().substr(0, 32));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(system_error("cannot create", temp));
  std::string_view rest = content;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const auto message = system_error("cannot write", temp);
      ::close(fd);
      ::unlink(temp.c_str());
      throw Error(message);
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const auto message = system_error("cannot rename onto", path);
    ::unlink(temp.c_str());
    throw Error(message);
  }
}

std::optional<FileStore::Entry> FileStore::read_entry(const std::filesystem::path& path) const {
  const auto content = read_file(path);
  if (!content) return std::nullopt;
  const auto newline = content->find('\n');
  const auto lease = newline == std::string::npos
                         ? std::nullopt
                         : parse_int(std::string_view(*content).substr(0, newline));
  if (!lease)
    throw Error("file store: " + path.string() +
                " is not a key file of this tessera release (a lease number, a newline, the "
                "value); give the store a fresh folder");
  Entry entry{content->substr(newline + 1), LeaseId{*lease}};
  if (entry.lease != LeaseId{}) {
    const auto record = read_lease(entry.lease);
    if (!record || record->deadline_us <= wall_now_us()) return std::nullopt;
  }
  return entry;
}

std::optional<std::string> FileStore::read(const std::string& key) const {
  auto entry = read_entry(key_path(key));
  if (!entry) return std::nullopt;
  return std::move(entry->value);
}

void FileStore::write(const std::string& key, const std::string& value, LeaseId lease) const {
  write_file(key_path(key), std::to_string(lease_number(lease)) + "\n" + value);
}

// A lease file: "<deadline, wall-clock us> <ttl ms>\n", then the names of the key files bound
// to it, one a line (names hold no newline). The list may name files bound elsewhere since;
// ending the lease deletes only those that still name it.
std::optional<FileStore::LeaseRecord> FileStore::read_lease(LeaseId lease) const {
  const auto path = lease_path(lease);
  const auto content = read_file(path);
  if (!content) return std::nullopt;
  LeaseRecord record;
  std::string_view rest = *content;
  const auto line_end = rest.find('\n');
  const auto first = rest.substr(0, line_end);
  const auto space = first.find(' ');
  const auto deadline = parse_int(first.substr(0, space));
  const auto ttl =
      space == std::string_view::npos ? std::nullopt : parse_int(first.substr(space + 1));
  if (line_end == std::string_view::npos || !deadline || !ttl)
    throw Error("file store: " + path.string() +
                " is not a lease file of this tessera release; give the store a fresh folder");
  record.deadline_us = *deadline;
  record.ttl = Duration(*ttl);
  rest.remove_prefix(line_end + 1);
  while (!rest.empty()) {
    const auto end = rest.find('\n');
    record.key_files.emplace_back(rest.substr(0, end));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
  }
  return record;
}

void FileStore::write_lease(LeaseId lease, const LeaseRecord& record) const {
  std::string content =
      std::to_string(record.deadline_us) + " " + std::to_string(record.ttl.count()) + "\n";
  for (const auto& name : record.key_files) content += name + "\n";
  write_file(lease_path(lease), content);
}

void FileStore::end_lease(LeaseId lease, const LeaseRecord& record) const {
  // The lease file first: once it is gone, readers see the keys as gone whatever is left.
  const auto path = lease_path(lease);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw Error(system_error("cannot remove", path));
  for (const auto& name : record.key_files) {
    const auto key_file = folder_ / name;
    const auto content = read_file(key_file);
    const auto newline = content ? content->find('\n') : std::string::npos;
    if (newline == std::string::npos) continue;
    if (parse_int(std::string_view(*content).substr(0, newline)) != lease_number(lease)) continue;
    if (::unlink(key_file.c_str()) != 0 && errno != ENOENT)
      throw Error(system_error("cannot remove", key_file));
  }
}

std::optional<FileStore::LeaseRecord> FileStore::alive_lease(LeaseId lease) const {
  auto record = read_lease(lease);
  if (!record) return std::nullopt;
  if (record->deadline_us > wall_now_us()) return record;
  end_lease(lease, *record);
  return std::nullopt;
}

LeaseExpired FileStore::expired(const std::string& what, LeaseId lease) const {
  return LeaseExpired("file store " + folder_.string() + ": " + what + " under lease " +
                          std::to_string(lease_number(lease)) +
                          ", which has expired or was revoked: its keys are gone; take a new "
                          "lease and join again",
                      lease);
}

void FileStore::set(const std::string& key, const std::string& value) {
  // Under the lock too: a set between an add's read and its write would otherwise be lost.
  WriteLock lock(folder_, lock_timeout_);
  write(key, value, LeaseId{});
}

void FileStore::set(const std::string& key, const std::string& value, LeaseId lease) {
  WriteLock lock(folder_, lock_timeout_);
  auto record = alive_lease(lease);
  if (!record) throw expired("set of key '" + key + "'", lease);
  const auto name = key_path(key).filename().string();
  // Listed before it is bound, so that a crash between the two leaves nothing unaccounted.
  if (std::find(record->key_files.begin(), record->key_files.end(), name) ==
      record->key_files.end()) {
    record->key_files.push_back(name);
    write_lease(lease, *record);
  }
  write(key, value, lease);
}

std::string FileStore::get(const std::string& key, Duration timeout) {
  const auto deadline = Clock::now() + std::min(timeout, kMaxStoreDuration);
  auto step = std::chrono::milliseconds(kFirstPoll);
  for (;;) {
    if (auto value = read(key)) return *std::move(value);
    if (!backoff(deadline, step))
      throw Timeout("file store: key '" + key + "' did not appear within " +
                    duration_text(timeout));
  }
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  WriteLock lock(folder_, lock_timeout_);
  const auto entry = read_entry(key_path(key));
  std::int64_t value = 0;
  if (entry) {
    const auto parsed = parse_int(entry->value);
    if (!parsed)
      throw InvalidArgument("file store: add: key '" + key + "' holds '" + entry->value +
                            "', not an integer");
    value = *parsed;
  }
  value += delta;
  write(key, std::to_string(value), entry ? entry->lease : LeaseId{});
  return value;
}

std::string FileStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  WriteLock lock(folder_, lock_timeout_);
  const auto entry = read_entry(key_path(key));
  const bool matches = entry ? entry->value == expected : expected.empty();
  if (!matches) return entry ? entry->value : std::string();
  write(key, desired, entry ? entry->lease : LeaseId{});
  return desired;
}

void FileStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  const auto deadline = Clock::now() + std::min(timeout, kMaxStoreDuration);
  auto step = std::chrono::milliseconds(kFirstPoll);
  for (;;) {
    const auto missing_now = std::count_if(keys.begin(), keys.end(),
                                           [&](const std::string& key) { return !check(key); });
    if (missing_now == 0) return;
    if (!backoff(deadline, step)) {
      std::string missing;
      for (const auto& key : keys)
        if (!check(key)) missing += (missing.empty() ? "'" : ", '") + key + "'";
      throw Timeout("file store: waited " + duration_text(timeout) +
                    "; keys still missing: " + missing);
    }
  }
}

std::optional<std::string> FileStore::wait_for_change(const std::string& key,
                                                      const std::optional<std::string>& known,
                                                      Duration timeout) {
  const auto deadline = Clock::now() + std::min(timeout, kMaxStoreDuration);
  auto step = std::chrono::milliseconds(kFirstPoll);
  for (;;) {
    auto value = read(key);
    if (value != known) return value;
    if (!backoff(deadline, step))
      throw Timeout("file store: key '" + key + "' did not change within " +
                    duration_text(timeout));
  }
}

std::vector<std::pair<std::string, std::string>> FileStore::list(const std::string& prefix) {
  // Under the lock, so the listing is one state of the folder rather than a mix of writes.
  WriteLock lock(folder_, lock_timeout_);
  const auto wanted = encode_key(prefix);
  std::vector<std::pair<std::string, std::string>> found;
  DIR* dir = ::opendir(folder_.c_str());
  if (dir == nullptr) throw Error(system_error("cannot list", folder_));
  const std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, &::closedir);
  while (const dirent* item = ::readdir(dir)) {
    const std::string_view name = item->d_name;
    if (!name.starts_with(wanted)) continue;
    auto key = decode_key(name);
    if (!key) continue;
    if (auto entry = read_entry(folder_ / name))
      found.emplace_back(*std::move(key), std::move(entry->value));
  }
  std::sort(found.begin(), found.end());
  return found;
}

bool FileStore::check(const std::string& key) {
  return read(key).has_value();
}

bool FileStore::remove(const std::string& key) {
  WriteLock lock(folder_, lock_timeout_);
  const auto path = key_path(key);
  const bool existed = read_entry(path).has_value();
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return existed;
  throw Error(system_error("cannot remove", path));
}

LeaseId FileStore::grant_lease(Duration ttl) {
  if (ttl < Duration(1) || ttl > kMaxStoreDuration)
    throw InvalidArgument("file store: a lease of " + duration_text(ttl) +
                          "; a lease lasts between 1 ms and 30 days");
  WriteLock lock(folder_, lock_timeout_);
  sweep_expired_leases();
  // Random ids, as processes share the folder with no counter; the lock makes the
  // existence check and the creation one step.
  std::random_device random;
  for (;;) {
    const auto lease =
        LeaseId{((static_cast<std::int64_t>(random()) << 31) ^ random()) & 0x7fffffffffffffff};
    if (lease == LeaseId{} || std::filesystem::exists(lease_path(lease))) continue;
    write_lease(lease, LeaseRecord{wall_now_us() + ttl.count() * 1000, ttl, {}});
    return lease;
  }
}

void FileStore::keep_alive(LeaseId lease) {
  WriteLock lock(folder_, lock_timeout_);
  auto record = alive_lease(lease);
  if (!record) throw expired("keep_alive", lease);
  record->deadline_us = wall_now_us() + record->ttl.count() * 1000;
  write_lease(lease, *record);
}

void FileStore::revoke_lease(LeaseId lease) {
  WriteLock lock(folder_, lock_timeout_);
  if (const auto record = read_lease(lease)) end_lease(lease, *record);
}

void FileStore::sweep_expired_leases() const {
  std::vector<LeaseId> leases;
  {
    DIR* dir = ::opendir(folder_.c_str());
    if (dir == nullptr) throw Error(system_error("cannot list", folder_));
    const std::unique_ptr<DIR, int (*)(DIR*)> closer(dir, &::closedir);
    while (const dirent* item = ::readdir(dir)) {
      const std::string_view name = item->d_name;
      if (!name.starts_with(kLeaseFilePrefix)) continue;
      if (const auto id = parse_int(name.substr(kLeaseFilePrefix.size())))
        leases.push_back(LeaseId{*id});
    }
  }
  for (const auto lease : leases) (void)alive_lease(lease);
}

}  // namespace tessera::file
