#include "file_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
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

std::string system_error(const std::string& what, const std::filesystem::path& path) {
  return "file store: " + what + " " + path.string() + ": " + std::strerror(errno);
}

// Keys are arbitrary bytes; file names are not. Letters, digits, '-', '_' and '.' are kept,
// every other byte becomes %XX, and a "k" prefix keeps names clear of ".", ".." and the
// store's own dot files.
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

std::optional<std::string> FileStore::read(const std::string& key) const {
  const auto path = key_path(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw Error(system_error("cannot open", path));
  }
  std::string value;
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
    value.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return value;
}

void FileStore::write(const std::string& key, const std::string& value) const {
  static std::atomic<unsigned> counter{0};
  const auto path = key_path(key);
  // Unique per process and call, and dot-prefixed so it never looks like a key.
  const auto temp =
      folder_ / (".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) +
                 "." + encode_key(key).substr(0, 32));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(system_error("cannot create", temp));
  std::string_view rest = value;
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

void FileStore::set(const std::string& key, const std::string& value) {
  // Under the lock too: a set between an add's read and its write would otherwise be lost.
  WriteLock lock(folder_, lock_timeout_);
  write(key, value);
}

std::string FileStore::get(const std::string& key, Duration timeout) {
  const auto deadline = Clock::now() + std::min(timeout, Duration(30LL * 24 * 3600 * 1000));
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
  std::int64_t value = 0;
  if (const auto text = read(key)) {
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (ec != std::errc() || end != text->data() + text->size())
      throw InvalidArgument("file store: add: key '" + key + "' holds '" + *text +
                            "', not an integer");
  }
  value += delta;
  write(key, std::to_string(value));
  return value;
}

std::string FileStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  WriteLock lock(folder_, lock_timeout_);
  const auto current = read(key);
  const bool matches = current ? *current == expected : expected.empty();
  if (!matches) return current.value_or(std::string());
  write(key, desired);
  return desired;
}

void FileStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  const auto deadline = Clock::now() + std::min(timeout, Duration(30LL * 24 * 3600 * 1000));
  auto step = std::chrono::milliseconds(kFirstPoll);
  std::size_t next = 0;  // keys never disappear from a wait's point of view, so resume here
  for (;;) {
    while (next < keys.size() && check(keys[next])) ++next;
    if (next == keys.size()) return;
    if (!backoff(deadline, step)) {
      std::string missing;
      for (auto i = next; i < keys.size(); ++i)
        if (!check(keys[i])) missing += (missing.empty() ? "'" : ", '") + keys[i] + "'";
      throw Timeout("file store: waited " + duration_text(timeout) +
                    "; keys still missing: " + missing);
    }
  }
}

bool FileStore::check(const std::string& key) {
  std::error_code ec;
  return std::filesystem::exists(key_path(key), ec);
}

bool FileStore::remove(const std::string& key) {
  WriteLock lock(folder_, lock_timeout_);
  const auto path = key_path(key);
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  throw Error(system_error("cannot remove", path));
}

}  // namespace tessera::file
