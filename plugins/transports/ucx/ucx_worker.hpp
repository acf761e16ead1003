#pragma once
// Thin RAII owners of the UCP objects: a context (reads UCX_TLS, UCX_NET_DEVICES and every
// other UCX_* variable from the environment, never overriding them), and a worker with one
// endpoint per peer. Requests are polled, never called back, so that completion handling runs
// where the caller expects it: on the communicator's engine thread.
//
// Thread-safety: a UcxContext may be shared by the workers of several communicators (parent
// and split children) on different threads. A UcxWorker is used by one thread at a time.

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/plugin/store.hpp"

namespace tessera::ucx {

class UcxContext {
 public:
  // `tcp_segment_bytes`: UCX's tcp send and receive segment size (TCP_TX_SEG_SIZE,
  // TCP_RX_SEG_SIZE), unless the environment sets them; 0 leaves UCX's default.
  explicit UcxContext(std::size_t tcp_segment_bytes = 0);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  [[nodiscard]] ucp_context_h handle() const noexcept { return context_; }

  // Whether the transports UCX chose can report a peer's failure; learnt from the first
  // endpoint, so that UCX logs its refusal once per context rather than once per endpoint.
  std::atomic<int> peer_failure_reports{-1};  // -1 unknown, 0 no, 1 yes

 private:
  ucp_context_h context_ = nullptr;
};

// One tagged send or receive in flight. Lives at a stable address while UCX holds it.
struct Request {
  void* handle = nullptr;  // UCX's request; nullptr once finished (or if it finished at once)
  ucs_status_t status = UCS_INPROGRESS;
  int peer = -1;
  bool is_recv = false;
  std::size_t expected_bytes = 0;
  bool exact_length = true;    // receives: a shorter message is an error
  ucp_tag_recv_info_t info{};  // filled for receives

  [[nodiscard]] bool finished() const noexcept { return status != UCS_INPROGRESS; }
};

class UcxWorker {
 public:
  UcxWorker(std::shared_ptr<UcxContext> context, int rank, int size);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // This worker's address, to be handed to the peers (binary).
  [[nodiscard]] const std::string& address() const noexcept { return address_; }

  // Creates an endpoint to every other rank, with peer-failure error handling: a peer that
  // dies fails the requests on its endpoint and is reported by take_failed_peers().
  void connect(const std::vector<std::string>& addresses);

  // Post a tagged send to `peer` / a receive matching `tag` under `mask`. `request` must stay
  // at its address until poll() says it finished. Errors at post time land in request.status.
  void send(Request& request, int peer, const void* data, std::size_t bytes, std::uint64_t tag);
  void recv(Request& request, int peer, void* data, std::size_t bytes, std::uint64_t tag,
            std::uint64_t mask);

  // True once the request finished; frees UCX's handle then. A receive whose message was not
  // exactly expected_bytes long finishes with UCS_ERR_MESSAGE_TRUNCATED.
  bool poll(Request& request);
  // Asks UCX to drop an unfinished receive; poll() still has to see it finish.
  void cancel(Request& request);

  // The endpoint to `peer` (after connect).
  [[nodiscard]] ucp_ep_h endpoint(int peer) const {
    return endpoints_[static_cast<std::size_t>(peer)];
  }

  // One round of UCX progress; returns whether anything happened. Does nothing once quiesced.
  bool progress();

  // Never progress this worker again. After a failure, progress would let UCX go on writing
  // matched receives into buffers whose operations already failed (and which their owners may
  // have freed), and UCX 1.13 crashes handling fragments of a broken tcp connection
  // (ucp_rndv_data_handler, ucp_proto_am_zcopy_completion). Unfinished requests are then
  // released unfinished; close() closes the endpoints forcibly without waiting.
  void quiesce() noexcept { quiesced_ = true; }
  [[nodiscard]] bool quiesced() const noexcept { return quiesced_; }

  // Peers whose endpoint failed since the last call, with UCX's reason.
  [[nodiscard]] std::vector<std::pair<int, std::string>> take_failed_peers();

  // Flushes what was sent (bounded by `timeout`), then closes every endpoint, forcibly so that
  // a dead peer cannot hold it open.
  void close(Duration timeout);

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }

 private:
  struct EndpointSlot {
    UcxWorker* owner = nullptr;
    int peer = -1;
  };
  static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  void wait_request(void* handle, Duration timeout);

  std::shared_ptr<UcxContext> context_;
  const int rank_;
  const int size_;
  ucp_worker_h worker_ = nullptr;
  std::string address_;
  std::vector<ucp_ep_h> endpoints_;
  std::vector<std::unique_ptr<EndpointSlot>> slots_;
  std::vector<std::pair<int, std::string>> failed_;
  bool quiesced_ = false;
};

// "UCX <what> failed: <status string>" as a TransportError.
[[noreturn]] void throw_ucx_error(const std::string& what, ucs_status_t status, int rank);

}  // namespace tessera::ucx
