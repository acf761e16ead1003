#include "engine.hpp"

#include <algorithm>
#include <cstring>

#include "backoff.hpp"
#include "exchange.hpp"
#include "mapped.hpp"
#include "tags.hpp"
#include "tessera/base/error.hpp"

namespace tessera::ucx {

namespace {

constexpr std::size_t kNoticeBytes = 1024;
constexpr Duration kTeardownTimeout{1000};
// How long an aborting rank progresses its worker to get its abort notices out and to hear
// every peer's (see on_aborted).
constexpr Duration kAbortHandshakeTimeout{1000};
// How often that wait checks whether peer processes on this host still run.
constexpr Duration kHandshakeLivenessInterval{10};

std::string format_ms(std::chrono::steady_clock::duration d) {
  return std::to_string(std::chrono::duration_cast<Duration>(d).count()) + " ms";
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text;
  for (const int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

}  // namespace

Engine::Engine(std::shared_ptr<UcxContext> context, int rank, int size, Settings settings)
    : context_(std::move(context)),
      rank_(rank),
      size_(size),
      settings_(settings),
      worker_(context_, rank, size),
      departed_(static_cast<std::size_t>(size), false),
      aborted_peers_(static_cast<std::size_t>(size), false),
      lost_(static_cast<std::size_t>(size), false),
      heartbeat_sends_(static_cast<std::size_t>(size)),
      last_heard_(static_cast<std::size_t>(size)),
      heard_(static_cast<std::size_t>(size), false) {
  for (auto& send : heartbeat_sends_) send.status = UCS_OK;  // none in flight
}

Engine::~Engine() {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stop = true;
  }
  shared_->wake.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::start(std::vector<PeerInfo> peers, Deadline deadline,
                   const std::function<void(const std::vector<int>& silent)>& while_waiting) {
  peers_ = std::move(peers);
  std::vector<std::string> addresses;
  for (const auto& p : peers_) addresses.push_back(p.address);
  worker_.connect(addresses);

  // A greeting each way makes sure every endpoint is wired up before the first operation, and
  // that every rank of the group really is there.
  std::deque<Request> greetings;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    worker_.recv(greetings.emplace_back(), peer, nullptr, 0, collective_tag(peer, 0, 0), kFullMask);
    worker_.send(greetings.emplace_back(), peer, nullptr, 0, collective_tag(rank_, 0, 0));
  }
  // Before the connect fails: no greeting may stay posted on a worker about to be destroyed.
  const auto abandon_greetings = [&] {
    for (auto& g : greetings)
      if (g.is_recv) worker_.cancel(g);
    adopt(std::move(greetings));
    drain(orphans_, kTeardownTimeout);
  };
  Backoff backoff;
  for (;;) {
    std::vector<int> silent;
    for (auto& g : greetings) {
      if (worker_.poll(g) && g.status != UCS_OK) {
        const int peer = g.peer;
        const ucs_status_t status = g.status;
        abandon_greetings();
        throw TransportError("ucx: connect of rank " + std::to_string(rank_) + ": rank " +
                                 std::to_string(peer) + " failed: " + ucs_status_string(status),
                             peer, "connect");
      }
      if (!g.finished() && g.is_recv) silent.push_back(g.peer);
    }
    const bool all_done = std::all_of(greetings.begin(), greetings.end(),
                                      [](const Request& g) { return g.finished(); });
    if (all_done) break;
    if (while_waiting) {
      try {
        while_waiting(silent);
      } catch (...) {
        abandon_greetings();
        throw;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      abandon_greetings();
      throw Timeout("ucx: connect of rank " + std::to_string(rank_) + " of " +
                    std::to_string(size_) + " timed out; no answer from rank(s) " +
                    ranks_text(silent));
    }
    if (worker_.progress()) {
      backoff.reset();
    } else {
      backoff.idle();
    }
  }
  post_control_recv();
  if (watchdog_on()) {
    post_heartbeat_recv();
    const auto now = std::chrono::steady_clock::now();
    std::fill(last_heard_.begin(), last_heard_.end(), now);
    last_heartbeat_ = now;
    next_heartbeat_ = now;
    heartbeat();
  }
  thread_ = std::thread([this] { run(); });
}

std::shared_ptr<QueuedWork> Engine::make_work(std::string operation) const {
  return std::make_shared<QueuedWork>(
      std::move(operation), settings_.timeout,
      [weak = std::weak_ptr<Shared>(shared_), rank = rank_](const std::string& reason) {
        auto shared = weak.lock();
        if (!shared) return;
        std::lock_guard lock(shared->mutex);
        if (shared->aborted) return;
        shared->reason = "rank " + std::to_string(rank) + ": " + reason;
        shared->aborted = true;
        shared->wake.notify_all();
      });
}

std::shared_ptr<Work> Engine::submit(std::string operation, std::function<void(Exchange&)> body) {
  Command command{make_work(std::move(operation)), std::move(body)};
  auto work = command.work;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->commands.push_back(std::move(command));
  }
  shared_->wake.notify_all();
  return work;
}

std::shared_ptr<Work> Engine::submit_send(std::string operation, int peer, const void* data,
                                          std::size_t bytes, std::uint32_t tag) {
  Command command{make_work(std::move(operation)), {},    true, peer,
                  const_cast<void*>(data),         bytes, tag};
  auto work = command.work;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->commands.push_back(std::move(command));
  }
  shared_->wake.notify_all();
  return work;
}

std::shared_ptr<Work> Engine::submit_recv(std::string operation, int peer, void* data,
                                          std::size_t bytes, std::uint32_t tag) {
  Command command{make_work(std::move(operation)), {}, false, peer, data, bytes, tag};
  auto work = command.work;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->commands.push_back(std::move(command));
  }
  shared_->wake.notify_all();
  return work;
}

void Engine::abort(const std::string& reason, std::optional<int> blame) noexcept {
  try {
    std::lock_guard lock(shared_->mutex);
    if (shared_->aborted) return;
    shared_->reason = "rank " + std::to_string(rank_) + ": " + reason;
    shared_->blame = blame;
    shared_->aborted = true;
  } catch (...) {
    shared_->aborted = true;  // out of memory for the reason: still abort
  }
  shared_->wake.notify_all();
}

std::exception_ptr Engine::abort_error(const std::string& operation) const {
  std::lock_guard lock(shared_->mutex);
  return std::make_exception_ptr(
      TransportError("ucx: " + operation + " on rank " + std::to_string(rank_) +
                         " failed: the group was aborted (" + shared_->reason + ")",
                     shared_->blame, operation));
}

void Engine::throw_if_aborted(const std::string& operation) {
  if (!shared_->aborted) return;
  on_aborted();  // before the caller learns of it: its buffers must be UCX's no longer
  std::rethrow_exception(abort_error(operation));
}

void Engine::adopt(std::deque<Request>&& requests) {
  for (auto& r : requests) orphans_.push_back(r);
  requests.clear();
}

MappedGroup* Engine::mapped(Exchange& x) {
  if (!mapping_tried_ && settings_.map_peers && size_ > 1) {
    mapping_tried_ = true;
    mapped_ = MappedGroup::connect(x, settings_.mapped_chunk_bytes);
  }
  return mapped_.get();
}

void Engine::post_control_recv() {
  control_ = Request{};
  control_.exact_length = false;
  control_buffer_.assign(kNoticeBytes, '\0');
  worker_.recv(control_, -1, control_buffer_.data(), control_buffer_.size(),
               make_tag(TagKind::control, 0, 0), kKindMask);
}

void Engine::handle_control() {
  // Every notice that arrived, not one per call: of two peers leaving together, the second's
  // goodbye must be read before its closed connection is taken for a failure.
  while (worker_.poll(control_)) {
    if (control_.status != UCS_OK) return;  // cancelled at teardown
    take_control();
  }
}

void Engine::take_control() {
  const int source = tag_source(control_.info.sender_tag);
  std::int32_t kind = 0;
  std::int32_t blame = -1;
  if (control_.info.length >= 2 * sizeof(std::int32_t) && source >= 0 && source < size_) {
    std::memcpy(&kind, control_buffer_.data(), sizeof kind);
    std::memcpy(&blame, control_buffer_.data() + sizeof kind, sizeof blame);
    const std::string text(control_buffer_.data() + 2 * sizeof(std::int32_t),
                           control_.info.length - 2 * sizeof(std::int32_t));
    if (kind == static_cast<std::int32_t>(Notice::goodbye)) {
      departed_[static_cast<std::size_t>(source)] = true;
    } else {
      aborted_peers_[static_cast<std::size_t>(source)] = true;
      std::lock_guard lock(shared_->mutex);
      if (!shared_->aborted) {
        shared_->reason = text;  // already "rank S: why"
        shared_->blame = blame >= 0 ? std::optional<int>(blame) : std::optional<int>(source);
        shared_->aborted = true;  // learnt from a peer; on_aborted still answers it
      }
    }
  }
  post_control_recv();
}

Duration Engine::heartbeat_period() const noexcept {
  return std::clamp<Duration>(settings_.stall_timeout / 10, Duration(1), Duration(1000));
}

void Engine::post_heartbeat_recv() {
  heartbeat_recv_ = Request{};
  heartbeat_recv_.exact_length = false;
  worker_.recv(heartbeat_recv_, -1, nullptr, 0, make_tag(TagKind::heartbeat, 0, 0), kKindMask);
}

void Engine::heartbeat() {
  if (!watchdog_on()) return;
  auto now = std::chrono::steady_clock::now();
  while (worker_.poll(heartbeat_recv_)) {
    if (heartbeat_recv_.status != UCS_OK) return;  // cancelled at teardown
    const int source = tag_source(heartbeat_recv_.info.sender_tag);
    if (source >= 0 && source < size_) {
      last_heard_[static_cast<std::size_t>(source)] = now;
      heard_[static_cast<std::size_t>(source)] = true;
    }
    post_heartbeat_recv();
  }
  if (now < next_heartbeat_) return;
  const Duration period = heartbeat_period();
  // This engine itself did not run for a while (its process was stopped, or starved of a
  // core): the heartbeats that arrived meanwhile are not all read yet, so restart every peer's
  // clock rather than blame the peers for this rank's own silence.
  if (now - last_heartbeat_ > 3 * period) std::fill(last_heard_.begin(), last_heard_.end(), now);
  last_heartbeat_ = now;
  next_heartbeat_ = now + period;
  for (int peer = 0; peer < size_; ++peer) {
    auto& send = heartbeat_sends_[static_cast<std::size_t>(peer)];
    if (peer == rank_ || departed_[static_cast<std::size_t>(peer)] || !worker_.poll(send))
      continue;  // the previous one is still on its way: a peer not reading needs no more
    send = Request{};
    worker_.send(send, peer, nullptr, 0, make_tag(TagKind::heartbeat, rank_, 0));
  }
}

bool Engine::check_stalled(int peer, const std::string& operation, std::uint64_t number) {
  if (!watchdog_on() || peer < 0 || peer >= size_ || peer == rank_ ||
      !heard_[static_cast<std::size_t>(peer)])
    return false;
  const auto silent =
      std::chrono::steady_clock::now() - last_heard_[static_cast<std::size_t>(peer)];
  if (silent < settings_.stall_timeout) return false;
  lost_[static_cast<std::size_t>(peer)] = true;
  abort("rank " + std::to_string(peer) + " (pid " +
            std::to_string(peers_[static_cast<std::size_t>(peer)].pid) + ") made no progress for " +
            format_ms(silent) + " (stall_timeout " + format_ms(settings_.stall_timeout) +
            ", no heartbeat arrived): its process is stopped or frozen, or the network to it is "
            "down; rank " +
            std::to_string(rank_) + " was waiting for it in " + operation + " #" +
            std::to_string(number),
        peer);
  return true;
}

void Engine::send_notice(int peer, Notice kind, const std::string& text, std::optional<int> blame) {
  auto& payload = notice_payloads_.emplace_back(2 * sizeof(std::int32_t), '\0');
  const auto k = static_cast<std::int32_t>(kind);
  const std::int32_t b = blame.value_or(-1);
  std::memcpy(payload.data(), &k, sizeof k);
  std::memcpy(payload.data() + sizeof k, &b, sizeof b);
  payload += text.substr(0, kNoticeBytes - payload.size());
  worker_.send(notices_.emplace_back(), peer, payload.data(), payload.size(),
               make_tag(TagKind::control, rank_, 0));
}

bool Engine::service() {
  bool progressed = worker_.progress();
  handle_control();
  heartbeat();
  for (const auto& [peer, why] : worker_.take_failed_peers()) {
    progressed = true;
    if (departed_[static_cast<std::size_t>(peer)]) continue;  // it left on purpose
    lost_[static_cast<std::size_t>(peer)] = true;
    abort("lost the connection to rank " + std::to_string(peer) + " (" + why +
              "): the process died or its network failed",
          peer);
  }
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_liveness_check_) {
    next_liveness_check_ = now + settings_.liveness_interval;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_ || departed_[static_cast<std::size_t>(peer)]) continue;
      if (!process_alive(peers_[static_cast<std::size_t>(peer)],
                         peers_[static_cast<std::size_t>(rank_)])) {
        lost_[static_cast<std::size_t>(peer)] = true;
        abort("rank " + std::to_string(peer) + " (pid " +
                  std::to_string(peers_[static_cast<std::size_t>(peer)].pid) +
                  ") is no longer running",
              peer);
      }
    }
  }
  for (auto& n : notices_) worker_.poll(n);
  return progressed;
}

void Engine::execute(Command& command) {
  const std::string& operation = command.work->operation();
  if (shared_->aborted) {
    command.work->complete(abort_error(operation));
    return;
  }
  if (command.collective) {
    std::exception_ptr error;
    try {
      Exchange exchange(*this, operation, ++sequence_);
      command.collective(exchange);
    } catch (...) {
      error = std::current_exception();
      if (!shared_->aborted) abort(operation + " failed", std::nullopt);
    }
    command.work->complete(error);
    return;
  }
  auto& pending = pending_.emplace_back(
      Pending{command.work, {}, deadline_after(settings_.timeout), ++p2p_count_});
  if (command.is_send) {
    worker_.send(pending.request, command.peer, command.data, command.bytes,
                 make_tag(TagKind::p2p, rank_, command.tag));
  } else {
    worker_.recv(pending.request, command.peer, command.data, command.bytes,
                 make_tag(TagKind::p2p, command.peer, command.tag), kFullMask);
  }
  poll_pending(false);
}

void Engine::poll_pending(bool failing) {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto& p = *it;
    const std::string& operation = p.work->operation();
    const std::string peer = std::to_string(p.request.peer);
    if (worker_.poll(p.request)) {
      if (p.request.status == UCS_OK) {
        p.work->complete(nullptr);
      } else {
        abort(operation + " failed: " +
                  (p.request.status == UCS_ERR_MESSAGE_TRUNCATED
                       ? "rank " + peer + " sent " + std::to_string(p.request.info.length) +
                             " bytes where " + std::to_string(p.request.expected_bytes) +
                             " were expected"
                       : std::string(ucs_status_string(p.request.status))),
              p.request.peer);
        p.work->complete(abort_error(operation));
      }
      it = pending_.erase(it);
      continue;
    }
    if (!failing && check_stalled(p.request.peer, operation, p.number)) failing = true;
    if (!failing && now >= p.deadline) {
      abort(operation + " timed out after " + std::to_string(settings_.timeout.count()) +
                " ms waiting for rank " + peer,
            p.request.peer);
      failing = true;
    }
    if (!failing && departed_[static_cast<std::size_t>(p.request.peer)]) {
      abort(operation + ": rank " + peer + " destroyed its communicator", p.request.peer);
      failing = true;
    }
    if (failing) {
      if (p.request.is_recv) worker_.cancel(p.request);
      orphans_.push_back(p.request);
      p.work->complete(abort_error(operation));
      it = pending_.erase(it);
      continue;
    }
    ++it;
  }
}

// Announces the abort and hears the peers' before quiescing the worker, then fails what is
// pending: from then on nothing lands in a buffer of a failed operation, whatever UCX still had
// in flight.
//
// Every aborting rank tells every peer, whether the abort began here or was learnt, and waits
// (at most kAbortHandshakeTimeout) until each peer has told it too, or has gone (its endpoint
// failed, its process on this host ended, it said goodbye). Without that handshake a rank that
// saw a death first fails its operations and may exit at once; its connections then close
// before slower peers read its notice, and they blame it, not the rank that died.
void Engine::on_aborted() {
  if (aborted_handled_) return;
  aborted_handled_ = true;
  std::string reason;
  std::optional<int> blame;
  {
    std::lock_guard lock(shared_->mutex);
    reason = shared_->reason;
    blame = shared_->blame;
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ && !departed_[static_cast<std::size_t>(peer)])
      send_notice(peer, Notice::abort, reason, blame);
  }
  await_abort_handshake();
  worker_.quiesce();
  poll_pending(true);
}

void Engine::await_abort_handshake() {
  const auto start = std::chrono::steady_clock::now();
  const Deadline deadline = start + kAbortHandshakeTimeout;
  auto next_liveness_check = start;
  Backoff backoff;
  for (;;) {
    bool sent = true;
    for (auto& n : notices_) sent = worker_.poll(n) && sent;
    handle_control();
    for (const auto& failed : worker_.take_failed_peers())
      lost_[static_cast<std::size_t>(failed.first)] = true;
    const auto now = std::chrono::steady_clock::now();
    // Unless same-host pid checks are turned off (a liveness_interval no shorter than the
    // handshake itself), as for a run whose peers are all on other hosts.
    if (now >= next_liveness_check && settings_.liveness_interval < kAbortHandshakeTimeout) {
      next_liveness_check = now + kHandshakeLivenessInterval;
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != rank_ && !process_alive(peers_[static_cast<std::size_t>(peer)],
                                            peers_[static_cast<std::size_t>(rank_)]))
          lost_[static_cast<std::size_t>(peer)] = true;
      }
    }
    bool heard_all = true;
    for (int peer = 0; peer < size_ && heard_all; ++peer) {
      const auto p = static_cast<std::size_t>(peer);
      // A peer already seen lost (often the one whose death began the abort, its failure taken
      // before the handshake) sends no notice: not waited for.
      heard_all = peer == rank_ || aborted_peers_[p] || departed_[p] || lost_[p];
    }
    if ((sent && heard_all) || now >= deadline) return;
    if (worker_.progress()) {
      backoff.reset();
    } else {
      backoff.idle();
    }
  }
}

void Engine::run() {
  Backoff backoff;
  for (;;) {
    std::optional<Command> command;
    bool stopping = false;
    {
      std::unique_lock lock(shared_->mutex);
      const auto ready = [&] {
        return shared_->stop || !shared_->commands.empty() ||
               (shared_->aborted && !aborted_handled_);
      };
      if (pending_.empty() && watchdog_on()) {
        shared_->wake.wait_until(lock, next_heartbeat_, ready);  // to beat between operations
      } else if (pending_.empty()) {
        shared_->wake.wait(lock, ready);
      } else if (backoff.sleeping()) {
        shared_->wake.wait_for(lock, std::chrono::microseconds(200), ready);
      }
      if (!shared_->commands.empty() && !shared_->stop) {
        command = std::move(shared_->commands.front());
        shared_->commands.pop_front();
      }
      stopping = shared_->stop;
    }
    if (stopping) break;
    if (shared_->aborted) on_aborted();
    if (command) {
      execute(*command);
      backoff.reset();
    } else if (!pending_.empty()) {
      if (service()) {
        backoff.reset();
      } else {
        backoff.idle();
      }
      poll_pending(false);
    } else if (watchdog_on()) {
      // Between operations: beat, and read what peers sent (heartbeats, notices).
      worker_.progress();
      handle_control();
      heartbeat();
    }
  }
  teardown();
}

void Engine::teardown() {
  std::deque<Command> abandoned;
  {
    std::lock_guard lock(shared_->mutex);
    abandoned.swap(shared_->commands);
  }
  if (!abandoned.empty() || !pending_.empty()) {
    abort("destroyed its communicator with operations pending", rank_);
  }
  for (auto& command : abandoned) command.work->complete(abort_error(command.work->operation()));
  if (shared_->aborted) {
    on_aborted();
  } else {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_ && !departed_[static_cast<std::size_t>(peer)])
        send_notice(peer, Notice::goodbye, {}, std::nullopt);
    }
  }
  drain(notices_, kTeardownTimeout);
  mapped_.reset();
  for (auto& o : orphans_)
    if (o.is_recv) worker_.cancel(o);
  worker_.cancel(control_);
  orphans_.push_back(control_);
  if (heartbeat_recv_.handle != nullptr) {
    worker_.cancel(heartbeat_recv_);
    orphans_.push_back(heartbeat_recv_);
  }
  for (auto& send : heartbeat_sends_)
    if (send.handle != nullptr) orphans_.push_back(send);
  drain(orphans_, kTeardownTimeout);
  worker_.close(kTeardownTimeout);
}

void Engine::drain(std::deque<Request>& requests, Duration timeout) {
  const Deadline deadline = deadline_after(timeout);
  Backoff backoff;
  for (;;) {
    bool all = true;
    for (auto& r : requests) all = worker_.poll(r) && all;
    if (all || worker_.quiesced() || std::chrono::steady_clock::now() >= deadline) break;
    if (worker_.progress()) {
      backoff.reset();
    } else {
      backoff.idle();
    }
  }
  // Whatever is left is released to UCX, which finishes it when its endpoint closes.
  for (auto& r : requests) {
    if (r.handle != nullptr) ucp_request_free(r.handle);
    r.handle = nullptr;
  }
  requests.clear();
}

}  // namespace tessera::ucx
