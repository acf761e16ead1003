#include "etcd_store.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <utility>

#include "base64.hpp"
#include "tessera/base/error.hpp"

namespace tessera::etcd {

namespace {

using nlohmann::json;

constexpr const char* kEndpointsOption = "store.etcd.endpoints";

// gRPC status codes etcd reports through its gateway.
constexpr int kInvalidArgument = 3;
constexpr int kNotFound = 5;
constexpr int kOutOfRange = 11;  // a revision that compaction removed

Duration bounded(Duration timeout) {
  return std::clamp(timeout, Duration(0), kMaxStoreDuration);
}

// The least time a read inside get, wait or wait_for_change is given, whatever their timeout.
constexpr Duration kShortestRead{1000};

// The smallest key greater than every key that starts with `prefix`: etcd's range_end for a
// prefix. "\0" (every key) when there is none, as for "" or all-0xff prefixes.
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last != 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

std::string lease_text(LeaseId lease) {
  return std::to_string(static_cast<std::int64_t>(lease));
}

bool lease_not_found(const GatewayReply& reply) {
  return reply.error_code == kNotFound &&
         reply.error_message.find("lease not found") != std::string::npos;
}

LeaseExpired expired(const std::string& what, LeaseId lease) {
  return LeaseExpired("etcd store: " + what + " under lease " + lease_text(lease) +
                          ", which etcd has let expire or revoked (or never granted): its keys "
                          "are gone; take a new lease and join again",
                      lease);
}

std::string quoted(const std::string& key) {
  return "'" + key + "'";
}

Endpoint parse_endpoint(std::string text) {
  const auto bad = [&](const std::string& why) {
    return ConfigError(std::string(kEndpointsOption) + ": '" + text + "' " + why +
                       "; write host:port of etcd's client URL, e.g. 127.0.0.1:2379, several "
                       "separated by commas");
  };
  std::string rest = text;
  if (rest.rfind("https://", 0) == 0)
    throw bad(
        "uses TLS, which this store does not speak; serve etcd's client URL over http on "
        "a trusted network");
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  Endpoint endpoint;
  std::size_t colon = std::string::npos;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
      throw bad("is not [ipv6]:port");
    endpoint.host = rest.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) throw bad("has no host:port");
    endpoint.host = rest.substr(0, colon);
  }
  endpoint.port = rest.substr(colon + 1);
  int port = 0;
  const auto [end, ec] =
      std::from_chars(endpoint.port.data(), endpoint.port.data() + endpoint.port.size(), port);
  if (ec != std::errc() || end != endpoint.port.data() + endpoint.port.size() || port < 1 ||
      port > 65535)
    throw bad("has no TCP port (1-65535)");
  return endpoint;
}

}  // namespace

EtcdStoreSettings resolve_settings(const Options& options) {
  EtcdStoreSettings s;
  const auto& endpoints = options.get_string("endpoints");
  std::size_t begin = 0;
  while (begin <= endpoints.size()) {
    auto end = endpoints.find(',', begin);
    if (end == std::string::npos) end = endpoints.size();
    auto item = endpoints.substr(begin, end - begin);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) s.endpoints.push_back(parse_endpoint(item));
    begin = end + 1;
  }
  if (s.endpoints.empty())
    throw ConfigError(std::string(kEndpointsOption) +
                      ": empty; write host:port of etcd's client URL, e.g. 127.0.0.1:2379");
  s.prefix = options.get_string("prefix");
  s.timeout = options.get_duration("timeout");
  if (s.timeout < Duration(1)) throw ConfigError("store.etcd.timeout: must be at least 1 ms");
  return s;
}

EtcdStore::EtcdStore(const Options& options) : EtcdStore(resolve_settings(options)) {}

EtcdStore::EtcdStore(EtcdStoreSettings settings)
    : prefix_(std::move(settings.prefix)),
      client_(std::make_unique<GatewayClient>(std::move(settings.endpoints), settings.timeout,
                                              kEndpointsOption)) {}

std::string EtcdStore::address() const {
  return client_->endpoints_text();
}

void EtcdStore::fail(const GatewayReply& reply, const std::string& what) const {
  // etcd's "invalid argument": a key too long or empty, a value past its request size limit.
  if (reply.error_code == kInvalidArgument)
    throw InvalidArgument("etcd store: etcd refused " + what + ": " + reply.error_message);
  throw Error("etcd store: etcd at " + client_->endpoints_text() + " failed " + what + ": " +
              reply.error_message);
}

GatewayReply EtcdStore::checked(const std::string& path, const json& request,
                                const std::string& what, Resend resend) {
  auto reply = client_->call(path, request, what, resend);
  if (reply.error_code != 0) fail(reply, what);
  return reply;
}

EtcdStore::Entry EtcdStore::read(const std::string& full_key, const std::string& what,
                                 Deadline deadline) {
  const auto reply = client_->call("/v3/kv/range", {{"key", base64_encode(full_key)}}, what,
                                   Resend::safe, deadline);
  Entry entry;
  if (reply.error_code == kNoAnswer) {
    entry.answered = false;
    return entry;
  }
  if (reply.error_code != 0) fail(reply, what);
  const auto answer = reply.fields();
  entry.revision = answer.object("header").positive("revision");
  if (const auto kvs = answer.objects("kvs"); !kvs.empty()) {
    const auto& kv = kvs.front();
    entry.value = kv.bytes("value");
    entry.mod_revision = kv.integer("mod_revision");
    entry.lease = kv.integer("lease");
  }
  return entry;
}

bool EtcdStore::put_if_unchanged(const std::string& full_key, const std::string& value,
                                 const Entry& seen, const std::string& what, Resend resend) {
  const auto key = base64_encode(full_key);
  const json request = {
      {"compare",
       {{{"target", "MOD"},
         {"key", key},
         {"mod_revision", std::to_string(seen.mod_revision)},
         {"result", "EQUAL"}}}},
      {"success",
       {{{"request_put",
          {{"key", key},
           {"value", base64_encode(value)},
           {"lease", std::to_string(seen.lease)}}}}}},
  };
  const auto reply = client_->call("/v3/kv/txn", request, what, resend);
  // The key's lease ended between the read and the write: read again (the key is gone).
  if (lease_not_found(reply)) return false;
  if (reply.error_code != 0) fail(reply, what);
  return reply.fields().flag("succeeded");
}

void EtcdStore::set(const std::string& key, const std::string& value) {
  (void)checked("/v3/kv/put",
                {{"key", base64_encode(prefix_ + key)}, {"value", base64_encode(value)}},
                "set of key " + quoted(key), Resend::safe);
}

void EtcdStore::set(const std::string& key, const std::string& value, LeaseId lease) {
  const auto what = "set of key " + quoted(key);
  if (lease == LeaseId{}) throw expired(what, lease);
  const auto reply = client_->call("/v3/kv/put",
                                   {{"key", base64_encode(prefix_ + key)},
                                    {"value", base64_encode(value)},
                                    {"lease", lease_text(lease)}},
                                   what, Resend::safe);
  if (lease_not_found(reply)) throw expired(what, lease);
  if (reply.error_code != 0) fail(reply, what);
}

std::optional<std::optional<std::string>> EtcdStore::watch_until_differs(
    const std::string& full_key, const std::optional<std::string>& known, Deadline deadline,
    const std::string& what) {
  for (;;) {
    // A wait ends at its own deadline even while etcd does not answer (stopped, overloaded),
    // but gives every read a second: a wait of 0 ms still reads the key once.
    const auto entry = read(full_key, what, std::max(deadline, deadline_after(kShortestRead)));
    if (!entry.answered) return std::nullopt;
    if (entry.value != known) return entry.value;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // From the revision after the read: no change between the read and the watch is missed.
    const json create = {{"key", base64_encode(full_key)},
                         {"start_revision", std::to_string(entry.revision + 1)}};
    const auto stream = client_->watch(create, deadline, what);
    if (!stream) return std::nullopt;
    for (bool watching = true; watching;) {
      auto next = stream->next(deadline);
      if (next.status == WatchStream::Status::deadline) return std::nullopt;
      // A broken stream (etcd restarted) or a watch etcd cancelled (its start revision was
      // compacted away): read the key again and watch anew.
      if (next.status == WatchStream::Status::broken) break;
      const auto message = next.fields();
      if (message.flag("canceled") || message.integer("compact_revision") != 0) break;
      for (const auto& event : message.objects("events")) {
        std::optional<std::string> value;
        if (event.text("type") != "DELETE") value = event.object("kv").bytes("value");
        if (value != known) return value;
      }
    }
  }
}

std::string EtcdStore::get(const std::string& key, Duration timeout) {
  timeout = bounded(timeout);
  const auto found = watch_until_differs(prefix_ + key, std::nullopt, deadline_after(timeout),
                                         "get of key " + quoted(key));
  if (!found)
    throw Timeout("etcd store: key " + quoted(key) + " did not appear within " +
                  std::to_string(timeout.count()) + " ms");
  return **found;
}

std::int64_t EtcdStore::add(const std::string& key, std::int64_t delta) {
  const auto what = "add to key " + quoted(key);
  for (;;) {
    const auto entry = read(prefix_ + key, what);
    std::int64_t current = 0;
    if (entry.value) {
      const auto& text = *entry.value;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
      if (ec != std::errc() || end != text.data() + text.size())
        throw InvalidArgument("etcd store: " + what + ": its value '" + text.substr(0, 64) +
                              "' is not a decimal integer; add only to counters");
    }
    std::int64_t next = 0;
    if (__builtin_add_overflow(current, delta, &next))
      throw InvalidArgument("etcd store: " + what + ": " + std::to_string(current) + " + " +
                            std::to_string(delta) + " leaves the 64-bit range");
    // Not resent after a broken connection: a retry of an applied add would count twice.
    if (put_if_unchanged(prefix_ + key, std::to_string(next), entry, what, Resend::unsafe))
      return next;
  }
}

std::string EtcdStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  const auto what = "compare_set of key " + quoted(key);
  for (;;) {
    const auto entry = read(prefix_ + key, what);
    auto current = entry.value.value_or(std::string());
    if (current != expected) return current;
    // Resending is safe: a write that already applied changed the key's revision, so the
    // resent one fails its comparison and the next read finds `desired`.
    if (put_if_unchanged(prefix_ + key, desired, entry, what, Resend::safe)) return desired;
  }
}

void EtcdStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  timeout = bounded(timeout);
  const auto deadline = deadline_after(timeout);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (watch_until_differs(prefix_ + keys[i], std::nullopt, deadline,
                            "wait for key " + quoted(keys[i])))
      continue;
    // Which keys are still missing, read within a second: an etcd that does not answer
    // leaves the rest counted as missing rather than holding the caller past its timeout.
    const auto reads_deadline = deadline_after(kShortestRead);
    bool answered = true;
    std::string missing;
    for (std::size_t j = i; j < keys.size(); ++j) {
      if (answered) {
        const auto entry = read(prefix_ + keys[j], "wait", reads_deadline);
        answered = entry.answered;
        if (answered && entry.value) continue;
      }
      missing += (missing.empty() ? "" : ", ") + quoted(keys[j]);
    }
    throw Timeout("etcd store: waited " + std::to_string(timeout.count()) +
                  " ms; keys still missing: " + missing);
  }
}

std::optional<std::string> EtcdStore::wait_for_change(const std::string& key,
                                                      const std::optional<std::string>& known,
                                                      Duration timeout) {
  timeout = bounded(timeout);
  auto changed = watch_until_differs(prefix_ + key, known, deadline_after(timeout),
                                     "wait_for_change of key " + quoted(key));
  if (!changed)
    throw Timeout("etcd store: key " + quoted(key) + " did not change within " +
                  std::to_string(timeout.count()) + " ms");
  return std::move(*changed);
}

std::vector<std::pair<std::string, std::string>> EtcdStore::list(const std::string& prefix) {
  const auto what = "list of prefix " + quoted(prefix);
  const auto start = prefix_ + prefix;
  const auto end = base64_encode(prefix_end(start));
  // Pages of a bounded size, all read at the first page's revision: one consistent snapshot
  // however many keys there are.
  constexpr int kPage = 1000;
  for (;;) {
    std::vector<std::pair<std::string, std::string>> found;
    std::int64_t revision = 0;
    std::string from = start;
    bool compacted = false;
    for (;;) {
      // etcd wants a key: "\0" is the smallest, for a listing of every key.
      json request = {{"key", base64_encode(from.empty() ? std::string(1, '\0') : from)},
                      {"range_end", end},
                      {"limit", std::to_string(kPage)}};
      if (revision != 0) request["revision"] = std::to_string(revision);
      const auto reply = client_->call("/v3/kv/range", request, what, Resend::safe);
      if (reply.error_code == kOutOfRange) {
        compacted = true;
        break;
      }
      if (reply.error_code != 0) fail(reply, what);
      const auto answer = reply.fields();
      if (revision == 0) revision = answer.object("header").positive("revision");
      const auto kvs = answer.objects("kvs");
      if (kvs.empty()) break;
      for (const auto& kv : kvs) {
        auto full = kv.bytes("key");
        // Asked for keys under the prefix: one outside it is not an answer to the question.
        if (!full.starts_with(prefix_)) kv.malformed("key", "is outside the range asked for");
        found.emplace_back(full.substr(prefix_.size()), kv.bytes("value"));
      }
      if (!answer.flag("more")) break;
      from = prefix_ + found.back().first + std::string(1, '\0');
    }
    if (!compacted) return found;
  }
}

bool EtcdStore::check(const std::string& key) {
  const auto reply =
      checked("/v3/kv/range", {{"key", base64_encode(prefix_ + key)}, {"count_only", true}},
              "check of key " + quoted(key), Resend::safe);
  return reply.fields().integer("count") > 0;
}

bool EtcdStore::remove(const std::string& key) {
  // Not resent after a broken connection: the resent one would report the key absent.
  const auto reply = checked("/v3/kv/deleterange", {{"key", base64_encode(prefix_ + key)}},
                             "remove of key " + quoted(key), Resend::unsafe);
  return reply.fields().integer("deleted") > 0;
}

LeaseId EtcdStore::grant_lease(Duration ttl) {
  if (ttl < Duration(1) || ttl > kMaxStoreDuration)
    throw InvalidArgument("etcd store: a lease of " + std::to_string(ttl.count()) +
                          " ms; a lease lasts between 1 ms and 30 days");
  if (ttl % kLeaseGranularity != Duration(0))
    throw InvalidArgument("etcd store: a lease of " + std::to_string(ttl.count()) +
                          " ms; etcd counts a lease's ttl in whole seconds: ask for " +
                          std::to_string(ttl / kLeaseGranularity + 1) +
                          " s (or another whole number of seconds)");
  const auto seconds = ttl / kLeaseGranularity;
  // Resending is safe: a grant whose reply was lost leaves a lease without keys, which ends
  // by itself after ttl.
  const auto reply =
      checked("/v3/lease/grant", {{"TTL", std::to_string(seconds)}}, "grant_lease", Resend::safe);
  const auto answer = reply.fields();
  if (const auto refusal = answer.text("error"); !refusal.empty())
    throw Error("etcd store: etcd at " + client_->endpoints_text() +
                " did not grant a lease: " + refusal);
  const LeaseId lease{answer.positive("ID")};
  const auto granted = answer.positive("TTL");
  if (granted != seconds) {
    // etcd raises a ttl below its minimum (1.5 election timeouts) without a word: a key
    // would then outlive its holder by more than the ttl asked for.
    revoke_lease(lease);
    throw InvalidArgument("etcd store: a lease of " + std::to_string(seconds) + " s; etcd at " +
                          client_->endpoints_text() + " grants no lease shorter than " +
                          std::to_string(granted) +
                          " s (1.5 times its --election-timeout): ask for a longer ttl");
  }
  return lease;
}

void EtcdStore::keep_alive(LeaseId lease) {
  if (lease == LeaseId{}) throw expired("keep_alive", lease);
  // A stream in gRPC; over the gateway one request gets one answer and the stream ends.
  const auto reply =
      checked("/v3/lease/keepalive", {{"ID", lease_text(lease)}}, "keep_alive", Resend::safe);
  if (reply.fields().object("result").integer("TTL") <= 0) throw expired("keep_alive", lease);
}

void EtcdStore::revoke_lease(LeaseId lease) {
  if (lease == LeaseId{}) return;
  // Resending is safe: revoking a lease that has ended does nothing.
  const auto reply =
      client_->call("/v3/lease/revoke", {{"ID", lease_text(lease)}}, "revoke_lease", Resend::safe);
  if (reply.error_code != 0 && !lease_not_found(reply)) fail(reply, "revoke_lease");
}

}  // namespace tessera::etcd
