#pragma once
// GatewayClient: HTTP/1.1 calls to etcd's v3 JSON gateway (the grpc-gateway every etcd 3.4
// serves on its client URLs): unary calls such as /v3/kv/range that retry an unreachable or
// restarting server until the request timeout, and watch streams (/v3/watch) read one message
// at a time. Knows nothing of the Store contract; etcd_store.cpp maps it onto that.

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/base/time.hpp"

namespace tessera::etcd {

struct Endpoint {
  std::string host;
  std::string port;
  [[nodiscard]] std::string text() const;  // "host:port", as the user wrote it
};

// One JSON object of an answer from etcd, read field by field. etcd leaves out fields that are
// zero, false or empty and writes 64-bit integers as strings, so an absent field reads as {}, 0,
// false or ""; a field present in another type or form (a revision "abc", a flag 1, an object
// where a number belongs) is a malformed answer, whatever answered on etcd's port: a
// tessera::Error naming `source` (the server and the call) and the field, never a value
// made up from it.
class AnswerFields {
 public:
  // source: "etcd at HOST:PORT answering get of key 'a'"; path: the object's place in the
  // answer ("header"), empty for the answer itself.
  AnswerFields(const nlohmann::json& object, std::string source, std::string path = {});

  [[nodiscard]] AnswerFields object(const char* name) const;  // {} when absent
  [[nodiscard]] std::int64_t integer(const char* name) const;
  // A revision, lease id or granted ttl: present and in [1, 2^63 - 2], so that the next
  // revision after it is one too.
  [[nodiscard]] std::int64_t positive(const char* name) const;
  [[nodiscard]] bool flag(const char* name) const;
  [[nodiscard]] std::string text(const char* name) const;
  // A key or value: base64 text, decoded.
  [[nodiscard]] std::string bytes(const char* name) const;
  // An array of objects ({} when absent), each read as this object is.
  [[nodiscard]] std::vector<AnswerFields> objects(const char* name) const;
  // Throws the malformed-answer Error for `name` with `problem` ("is not under the prefix").
  [[noreturn]] void malformed(const char* name, const std::string& problem) const;

 private:
  [[nodiscard]] const nlohmann::json* field(const char* name) const;  // nullptr when absent
  [[nodiscard]] std::string field_name(const char* name) const;

  const nlohmann::json* object_;
  std::string source_;
  std::string path_;
};

// What etcd answered: its JSON body when the call succeeded, else the gRPC status code and
// message it reported (5, "etcdserver: requested lease not found").
struct GatewayReply {
  nlohmann::json body;  // a JSON object
  int error_code = 0;   // 0: success; kNoAnswer: none before the caller's deadline
  std::string error_message;
  std::string source;  // "etcd at HOST:PORT answering WHAT", for messages about the body

  [[nodiscard]] AnswerFields fields() const { return {body, source}; }
};

// GatewayClient::call's error_code when no etcd answered before the deadline its caller gave.
inline constexpr int kNoAnswer = -1;

// Whether a call may be sent again after a connection broke with the call's outcome unknown:
// true where applying it twice leaves the same state and the same answer (a put, a range).
enum class Resend { safe, unsafe };

class Connection;
class WatchStream;

// Thread-safety: every method may be called from any thread; unary calls share a pool of
// keep-alive connections (one call on a connection at a time), each watch has its own.
class GatewayClient {
 public:
  // endpoints: tried in turn when one does not answer. timeout: how long one call keeps
  // retrying before it fails. option_name: the option that configured endpoints, for errors.
  GatewayClient(std::vector<Endpoint> endpoints, Duration timeout, std::string option_name);
  ~GatewayClient();
  GatewayClient(const GatewayClient&) = delete;
  GatewayClient& operator=(const GatewayClient&) = delete;

  // POSTs `request` to `path` and returns etcd's answer, retrying (10 ms doubling to 500 ms,
  // trying every endpoint) while no etcd answers, until the request timeout. Blocking. Throws
  // tessera::Error naming the endpoints and the option when none answered in time, or when a
  // call that is not Resend::safe broke after it was sent ("outcome unknown"). `what` names
  // the call in those messages ("set of key 'a'"). A `deadline` before the request timeout
  // ends the call there instead, with error_code kNoAnswer rather than an Error.
  GatewayReply call(const std::string& path, const nlohmann::json& request, const std::string& what,
                    Resend resend, Deadline deadline = Deadline::max());

  // Opens /v3/watch with `create_request` and waits for etcd to confirm it. Returns nullptr
  // when `deadline` passed first. Throws as call() does when no etcd answers in time.
  std::unique_ptr<WatchStream> watch(const nlohmann::json& create_request, Deadline deadline,
                                     const std::string& what);

  [[nodiscard]] Duration timeout() const { return timeout_; }
  [[nodiscard]] std::string endpoints_text() const;

 private:
  std::unique_ptr<Connection> acquire();
  void release(std::unique_ptr<Connection> connection);
  [[noreturn]] void unreachable(const std::string& what, const std::string& problem) const;

  std::vector<Endpoint> endpoints_;
  Duration timeout_;
  std::string option_name_;
  std::mutex mutex_;
  std::size_t preferred_ = 0;  // the endpoint that answered last
  std::vector<std::unique_ptr<Connection>> idle_;
};

// One watch: a streamed HTTP response of etcd's watch messages. Used by one thread at a time;
// destroying it closes the connection, which ends the watch in etcd.
class WatchStream {
 public:
  enum class Status { message, deadline, broken };
  struct Next {
    Status status;
    nlohmann::json message;  // the message's "result", a JSON object (status message)
    std::string problem;     // why the stream broke (status broken)
    std::string source;      // "etcd at HOST:PORT watching WHAT"

    [[nodiscard]] AnswerFields fields() const { return {message, source}; }
  };

  // source: "etcd at HOST:PORT watching WHAT", for messages about what the stream sends.
  WatchStream(std::unique_ptr<Connection> connection, std::string source);
  ~WatchStream();
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  // Blocks until etcd sends the next message or `deadline` passes; the thread sleeps in the
  // kernel meanwhile. A broken stream (etcd gone, connection reset) is Status::broken.
  Next next(Deadline deadline);

 private:
  std::unique_ptr<Connection> connection_;
  std::string source_;
  std::string pending_;  // bytes received after the last complete message
};

}  // namespace tessera::etcd
