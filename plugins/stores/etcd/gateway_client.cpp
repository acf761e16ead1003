#include "gateway_client.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <charconv>
#include <limits>
#include <thread>
#include <utility>

#include "base64.hpp"
#include "tessera/base/error.hpp"

namespace tessera::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string Endpoint::text() const {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + port : host + ":" + port;
}

// One HTTP/1.1 connection to one endpoint, driven by its own io_context so that every
// operation can wait in the kernel with a deadline and no other thread is involved.
class Connection {
 public:
  explicit Connection(std::size_t endpoint) : endpoint_(endpoint) {}

  [[nodiscard]] std::size_t endpoint() const { return endpoint_; }
  [[nodiscard]] bool is_open() const { return stream_.socket().is_open(); }

  beast::error_code connect(const Endpoint& to, Deadline deadline) {
    beast::error_code ec;
    tcp::resolver resolver(context_);
    const auto addresses = resolver.resolve(to.host, to.port, ec);
    if (ec) return ec;
    stream_.expires_at(deadline);
    stream_.async_connect(addresses, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    run();
    if (!ec) stream_.socket().set_option(tcp::no_delay(true), ec);
    return ec;
  }

  // Whether the server closed this idle connection (it was restarted, or timed the connection
  // out): reusing it would send a request into a socket already half closed.
  [[nodiscard]] bool closed_by_peer() {
    char byte = 0;
    const auto n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  beast::error_code write(const http::request<http::string_body>& request, Deadline deadline) {
    beast::error_code ec;
    stream_.expires_at(deadline);
    http::async_write(stream_, request, [&](beast::error_code e, std::size_t) { ec = e; });
    run();
    return ec;
  }

  beast::error_code read(http::response<http::string_body>& response, Deadline deadline) {
    beast::error_code ec;
    stream_.expires_at(deadline);
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    http::async_read(stream_, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
    run();
    if (!ec) response = parser.release();
    return ec;
  }

  // A streamed response: its header, then its body as it arrives.
  beast::error_code read_stream_header(Deadline deadline, unsigned& status) {
    beast::error_code ec;
    stream_parser_.emplace();
    stream_parser_->body_limit(boost::none);
    stream_.expires_at(deadline);
    http::async_read_header(stream_, buffer_, *stream_parser_,
                            [&](beast::error_code e, std::size_t) { ec = e; });
    run();
    if (!ec) status = stream_parser_->get().result_int();
    return ec;
  }

  beast::error_code read_stream_some(std::string& out, Deadline deadline) {
    std::array<char, 16384> chunk{};
    auto& body = stream_parser_->get().body();
    body.data = chunk.data();
    body.size = chunk.size();
    beast::error_code ec;
    stream_.expires_at(deadline);
    http::async_read_some(stream_, buffer_, *stream_parser_,
                          [&](beast::error_code e, std::size_t) { ec = e; });
    run();
    out.append(chunk.data(), chunk.size() - body.size);
    if (ec == http::error::need_buffer) ec = {};
    if (!ec && stream_parser_->is_done()) ec = http::error::end_of_stream;
    return ec;
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

 private:
  void run() {
    context_.restart();
    context_.run();
  }

  std::size_t endpoint_;
  asio::io_context context_;
  beast::tcp_stream stream_{context_};
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> stream_parser_;
};

AnswerFields::AnswerFields(const nlohmann::json& object, std::string source, std::string path)
    : object_(&object), source_(std::move(source)), path_(std::move(path)) {
  if (!object.is_object() && !object.is_null()) {
    throw Error("etcd store: " + source_ + " sent " + (path_.empty() ? "an answer" : path_) +
                " that is " + object.type_name() + ", not a JSON object: not etcd's answer");
  }
}

std::string AnswerFields::field_name(const char* name) const {
  return path_.empty() ? name : path_ + "." + name;
}

void AnswerFields::malformed(const char* name, const std::string& problem) const {
  throw Error("etcd store: " + source_ + " sent a malformed answer: field \"" + field_name(name) +
              "\" " + problem + "; is this etcd's v3 gateway?");
}

const nlohmann::json* AnswerFields::field(const char* name) const {
  if (!object_->is_object()) return nullptr;
  const auto it = object_->find(name);
  return it == object_->end() || it->is_null() ? nullptr : &*it;
}

AnswerFields AnswerFields::object(const char* name) const {
  static const nlohmann::json absent;
  const auto* value = field(name);
  if (value != nullptr && !value->is_object())
    malformed(name, "is " + std::string(value->type_name()) + ", not an object");
  return {value != nullptr ? *value : absent, source_, field_name(name)};
}

std::int64_t AnswerFields::integer(const char* name) const {
  const auto* value = field(name);
  if (value == nullptr) return 0;
  if (value->is_number_integer()) return value->get<std::int64_t>();
  if (value->is_string()) {
    // etcd writes int64 as a decimal string: all of it must be one.
    const auto& text = value->get_ref<const std::string&>();
    std::int64_t number = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (!text.empty() && ec == std::errc() && end == text.data() + text.size()) return number;
  }
  malformed(name, "is " + value->dump().substr(0, 64) + ", not a 64-bit integer");
}

std::int64_t AnswerFields::positive(const char* name) const {
  const auto number = integer(name);
  if (number < 1 || number == std::numeric_limits<std::int64_t>::max())
    malformed(name, field(name) == nullptr
                        ? "is missing"
                        : "is " + std::to_string(number) + ", not a positive count");
  return number;
}

bool AnswerFields::flag(const char* name) const {
  const auto* value = field(name);
  if (value == nullptr) return false;
  if (!value->is_boolean())
    malformed(name, "is " + value->dump().substr(0, 64) + ", not true or false");
  return value->get<bool>();
}

std::string AnswerFields::text(const char* name) const {
  const auto* value = field(name);
  if (value == nullptr) return {};
  if (!value->is_string()) malformed(name, "is " + value->dump().substr(0, 64) + ", not a string");
  return value->get<std::string>();
}

std::string AnswerFields::bytes(const char* name) const {
  auto decoded = base64_decode(text(name));
  if (!decoded) malformed(name, "is not base64");
  return std::move(*decoded);
}

std::vector<AnswerFields> AnswerFields::objects(const char* name) const {
  std::vector<AnswerFields> out;
  const auto* value = field(name);
  if (value == nullptr) return out;
  if (!value->is_array())
    malformed(name, "is " + std::string(value->type_name()) + ", not an array");
  for (std::size_t i = 0; i < value->size(); ++i) {
    const std::string place = field_name(name) + "[" + std::to_string(i) + "]";
    if (!(*value)[i].is_object())
      throw Error("etcd store: " + source_ + " sent a malformed answer: " + place + " is " +
                  (*value)[i].type_name() + ", not an object; is this etcd's v3 gateway?");
    out.emplace_back((*value)[i], source_, place);
  }
  return out;
}

namespace {

http::request<http::string_body> post(const Endpoint& to, const std::string& path,
                                      std::string body) {
  http::request<http::string_body> request{http::verb::post, path, 11};
  request.set(http::field::host, to.text());
  request.set(http::field::content_type, "application/json");
  request.keep_alive(true);
  request.body() = std::move(body);
  request.prepare_payload();
  return request;
}

// etcd's gateway answers a failed call with {"error": ..., "code": <gRPC code>, "message": ...}.
GatewayReply error_reply(unsigned status, const std::string& body) {
  GatewayReply reply;
  const auto parsed = nlohmann::json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("code") && parsed["code"].is_number_integer()) {
    reply.error_code = parsed["code"].get<int>();
    const auto message = parsed.find("message");
    if (message != parsed.end() && message->is_string()) reply.error_message = *message;
    if (reply.error_message.empty()) reply.error_message = "(no message)";
  } else {
    reply.error_code = 2;  // gRPC "unknown"
    reply.error_message = "HTTP status " + std::to_string(status) + ": " + body.substr(0, 200);
  }
  if (reply.error_code == 0) reply.error_code = 2;
  return reply;
}

// gRPC codes etcd uses while it cannot serve for a moment (no leader yet, leader changed,
// request timed out inside etcd): retried like an unreachable server.
bool transient(int grpc_code) {
  return grpc_code == 14 /* unavailable */ || grpc_code == 4 /* deadline exceeded */;
}

std::string describe(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "no answer (timed out)";
  return ec.message();
}

std::string milliseconds(Duration d) {
  return std::to_string(d.count()) + " ms";
}

}  // namespace

GatewayClient::GatewayClient(std::vector<Endpoint> endpoints, Duration timeout,
                             std::string option_name)
    : endpoints_(std::move(endpoints)), timeout_(timeout), option_name_(std::move(option_name)) {}

GatewayClient::~GatewayClient() = default;

std::string GatewayClient::endpoints_text() const {
  std::string text;
  for (const auto& e : endpoints_) text += (text.empty() ? "" : ",") + e.text();
  return text;
}

void GatewayClient::unreachable(const std::string& what, const std::string& problem) const {
  throw Error("etcd store: no answer from etcd at " + endpoints_text() + " (option " +
              option_name_ + ") to " + what + " within " + milliseconds(timeout_) + " (last: " +
              problem + "); start etcd there, or point the option at a running etcd's client URL");
}

std::unique_ptr<Connection> GatewayClient::acquire() {
  std::lock_guard lock(mutex_);
  while (!idle_.empty()) {
    auto connection = std::move(idle_.back());
    idle_.pop_back();
    if (connection->endpoint() == preferred_ && !connection->closed_by_peer()) return connection;
  }
  return std::make_unique<Connection>(preferred_);
}

void GatewayClient::release(std::unique_ptr<Connection> connection) {
  constexpr std::size_t kMaxIdle = 16;
  std::lock_guard lock(mutex_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(connection));
}

GatewayReply GatewayClient::call(const std::string& path, const nlohmann::json& request,
                                 const std::string& what, Resend resend, Deadline caller_deadline) {
  const auto own_deadline = deadline_after(timeout_);
  const bool caller_first = caller_deadline < own_deadline;
  const auto deadline = caller_first ? caller_deadline : own_deadline;
  const auto body = request.dump();
  auto backoff = Duration(10);
  std::string problem;
  for (;;) {
    auto connection = acquire();
    const auto& endpoint = endpoints_[connection->endpoint()];
    bool sent = false;
    beast::error_code ec;
    if (!connection->is_open()) ec = connection->connect(endpoint, deadline);
    if (!ec) {
      ec = connection->write(post(endpoint, path, body), deadline);
      sent = true;
    }
    http::response<http::string_body> response;
    if (!ec) ec = connection->read(response, deadline);
    if (!ec) {
      const auto status = response.result_int();
      const bool keep = response.keep_alive();
      GatewayReply reply;
      reply.source = "etcd at " + endpoint.text() + " answering " + what;
      if (status == 200) {
        reply.body = nlohmann::json::parse(response.body(), nullptr, false);
        if (!reply.body.is_object())
          throw Error("etcd store: etcd at " + endpoint.text() + " answered " + what +
                      " with a body that is not a JSON object; is option " + option_name_ +
                      " pointing at an etcd v3 client URL?");
      } else {
        reply = error_reply(status, response.body());
        reply.source = "etcd at " + endpoint.text() + " answering " + what;
      }
      if (keep) release(std::move(connection));
      if (reply.error_code == 0 || !transient(reply.error_code) || resend == Resend::unsafe)
        return reply;
      problem = endpoint.text() + ": " + reply.error_message;
    } else {
      if (sent && resend == Resend::unsafe)
        throw Error("etcd store: etcd at " + endpoint.text() + " did not answer " + what +
                    " once it was sent (" + describe(ec) +
                    "); whether etcd applied it is unknown, so it was not sent again: read the "
                    "key to see, or treat the job's state as lost");
      problem = endpoint.text() + ": " + describe(ec);
      std::lock_guard lock(mutex_);
      if (preferred_ == connection->endpoint()) preferred_ = (preferred_ + 1) % endpoints_.size();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      if (caller_first) return {{}, kNoAnswer, problem, {}};
      unreachable(what, problem);
    }
    std::this_thread::sleep_for(std::min<Duration>(
        backoff, std::chrono::duration_cast<Duration>(deadline - now) + Duration(1)));
    backoff = std::min(backoff * 2, Duration(500));
  }
}

std::unique_ptr<WatchStream> GatewayClient::watch(const nlohmann::json& create_request,
                                                  Deadline deadline, const std::string& what) {
  const auto give_up = std::min(deadline, deadline_after(timeout_));
  const auto body = nlohmann::json{{"create_request", create_request}}.dump();
  auto backoff = Duration(10);
  std::string problem;
  for (;;) {
    std::size_t index = 0;
    {
      std::lock_guard lock(mutex_);
      index = preferred_;
    }
    auto connection = std::make_unique<Connection>(index);
    const auto& endpoint = endpoints_[index];
    unsigned status = 0;
    auto ec = connection->connect(endpoint, give_up);
    if (!ec) ec = connection->write(post(endpoint, "/v3/watch", body), give_up);
    if (!ec) ec = connection->read_stream_header(give_up, status);
    if (!ec && status != 200)
      throw Error("etcd store: etcd at " + endpoint.text() + " refused to watch for " + what +
                  " (HTTP status " + std::to_string(status) + "); is option " + option_name_ +
                  " pointing at an etcd v3 client URL?");
    if (!ec) {
      auto stream = std::make_unique<WatchStream>(
          std::move(connection), "etcd at " + endpoint.text() + " watching " + what);
      const auto first = stream->next(give_up);
      if (first.status == WatchStream::Status::message && first.fields().flag("created"))
        return stream;
      if (first.status == WatchStream::Status::message)
        throw Error("etcd store: etcd at " + endpoint.text() + " did not create the watch for " +
                    what + ": " + first.message.dump().substr(0, 300));
      problem =
          endpoint.text() + ": " +
          (first.status == WatchStream::Status::deadline ? std::string("no answer (timed out)")
                                                         : first.problem);
    } else {
      problem = endpoint.text() + ": " + describe(ec);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return nullptr;
    if (now >= give_up) unreachable(what, problem);
    {
      std::lock_guard lock(mutex_);
      if (preferred_ == index) preferred_ = (preferred_ + 1) % endpoints_.size();
    }
    std::this_thread::sleep_for(std::min<Duration>(
        backoff, std::chrono::duration_cast<Duration>(give_up - now) + Duration(1)));
    backoff = std::min(backoff * 2, Duration(500));
  }
}

WatchStream::WatchStream(std::unique_ptr<Connection> connection, std::string source)
    : connection_(std::move(connection)), source_(std::move(source)) {}

WatchStream::~WatchStream() {
  connection_->close();
}

WatchStream::Next WatchStream::next(Deadline deadline) {
  for (;;) {
    // The gateway ends every message with a newline; JSON text has none inside.
    const auto end = pending_.find('\n');
    if (end != std::string::npos) {
      auto parsed = nlohmann::json::parse(pending_.substr(0, end), nullptr, false);
      pending_.erase(0, end + 1);
      if (parsed.is_discarded() || !parsed.is_object())
        return {Status::broken, {}, "a watch message that is not JSON", source_};
      if (parsed.contains("error")) {
        const auto& error = parsed["error"];
        const auto message = error.is_object() ? error.find("message") : error.end();
        return {Status::broken,
                {},
                message != error.end() && message->is_string() ? message->get<std::string>()
                                                               : error.dump().substr(0, 300),
                source_};
      }
      if (!parsed.contains("result")) continue;
      if (!parsed["result"].is_object())
        return {Status::broken, {}, "a watch message whose result is not a JSON object", source_};
      return {Status::message, std::move(parsed["result"]), {}, source_};
    }
    const auto ec = connection_->read_stream_some(pending_, deadline);
    if (ec == beast::error::timeout) return {Status::deadline, {}, {}, source_};
    if (ec) return {Status::broken, {}, describe(ec), source_};
  }
}

}  // namespace tessera::etcd
