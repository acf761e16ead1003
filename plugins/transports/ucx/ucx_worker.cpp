#include "ucx_worker.hpp"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "tessera/base/error.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera::ucx {

void throw_ucx_error(const std::string& what, ucs_status_t status, int rank) {
  throw TransportError(
      "ucx: rank " + std::to_string(rank) + ": " + what + " failed: " + ucs_status_string(status),
      std::nullopt, what);
}

namespace {

// Sets UCX option `name` on `config` unless the environment has `variable`, UCX's name for
// it: the user's setting always wins.
void set_unless_in_environment(ucp_config_t* config, const char* name, const char* variable,
                               const std::string& value) {
  if (std::getenv(variable) != nullptr) return;
  const ucs_status_t status = ucp_config_modify(config, name, value.c_str());
  if (status != UCS_OK) {
    ucp_config_release(config);
    throw_ucx_error(std::string("ucp_config_modify(") + name + ")", status, -1);
  }
}

// UCX does not promise that ucp_config_read, ucp_init and ucp_cleanup may run on several
// threads at once: they read and extend its process-wide configuration tables (ThreadSanitizer
// sees two ranks' ucp_init race there). Ranks that are threads of one process (tests, a
// launcher's threads) create their contexts at the same moment, so they take turns here.
std::mutex& context_lifecycle_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

UcxContext::UcxContext(std::size_t tcp_segment_bytes) {
  std::lock_guard lock(context_lifecycle_mutex());
  ucp_config_t* config = nullptr;
  // nullptr prefix and file: UCX reads UCX_TLS, UCX_NET_DEVICES, ... from the environment.
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) throw_ucx_error("ucp_config_read", status, -1);
  // UCX's tcp transport sends active messages in segments of 8 KiB by default: a 64 MiB
  // all_reduce is then 8000 fragments per rank and direction, each a system call and a header.
  // Larger segments carry the same bytes in a fraction of the calls (1.2 -> 3.7 GB/s here).
  // Transport options reach UCX's transports by their names without the transport prefix;
  // only tcp has these two.
  if (tcp_segment_bytes != 0) {
    const std::string bytes = std::to_string(tcp_segment_bytes);
    set_unless_in_environment(config, "TX_SEG_SIZE", "UCX_TCP_TX_SEG_SIZE", bytes);
    set_unless_in_environment(config, "RX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE", bytes);
  }
  // UCX 1.13's tcp zero-copy active messages crash a survivor when a peer dies with one in
  // flight (assertion `comp->count > 0` in ucp_proto_am_zcopy_completion). Buffer copies are
  // safe; rendezvous (CMA for shared memory) is unaffected. The user's UCX_ZCOPY_THRESH wins.
  set_unless_in_environment(config, "ZCOPY_THRESH", "UCX_ZCOPY_THRESH", "inf");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  // RMA: memory domains that can share memory with peers, for the mapped collectives.
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
  params.mt_workers_shared = 1;  // split children's workers run on their own threads
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) throw_ucx_error("ucp_init (check UCX_TLS / UCX_NET_DEVICES)", status, -1);
}

UcxContext::~UcxContext() {
  std::lock_guard lock(context_lifecycle_mutex());
  ucp_cleanup(context_);
}

UcxWorker::UcxWorker(std::shared_ptr<UcxContext> context, int rank, int size)
    : context_(std::move(context)), rank_(rank), size_(size) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Built on one thread, then used only by the engine thread: one at a time.
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t status = ucp_worker_create(context_->handle(), &params, &worker_);
  if (status != UCS_OK) throw_ucx_error("ucp_worker_create", status, rank_);
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  status = ucp_worker_get_address(worker_, &address, &length);
  if (status != UCS_OK) {
    ucp_worker_destroy(worker_);
    throw_ucx_error("ucp_worker_get_address", status, rank_);
  }
  address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);
  endpoints_.assign(static_cast<std::size_t>(size_), nullptr);
}

UcxWorker::~UcxWorker() {
  close(Duration(1000));
  ucp_worker_destroy(worker_);
}

void UcxWorker::on_endpoint_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* slot = static_cast<EndpointSlot*>(arg);
  slot->owner->failed_.emplace_back(slot->peer, ucs_status_string(status));
}

void UcxWorker::connect(const std::vector<std::string>& addresses) {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    auto slot = std::make_unique<EndpointSlot>(EndpointSlot{this, peer});
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address =
        reinterpret_cast<const ucp_address_t*>(addresses[static_cast<std::size_t>(peer)].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxWorker::on_endpoint_error;
    params.err_handler.arg = slot.get();
    auto& ep = endpoints_[static_cast<std::size_t>(peer)];
    ucs_status_t status = UCS_ERR_UNREACHABLE;
    if (context_->peer_failure_reports != 0) {
      status = ucp_ep_create(worker_, &params, &ep);
      context_->peer_failure_reports = status == UCS_ERR_UNREACHABLE ? 0 : 1;
    }
    if (status == UCS_ERR_UNREACHABLE) {
      // UCX 1.13's shared-memory transports cannot report a peer's failure, and refuse peer
      // error handling; then the engine's process liveness check and deadlines must do.
      params.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
      status = ucp_ep_create(worker_, &params, &ep);
    }
    if (status != UCS_OK)
      throw_ucx_error("ucp_ep_create to rank " + std::to_string(peer), status, rank_);
    slots_.push_back(std::move(slot));
  }
}

void UcxWorker::send(Request& request, int peer, const void* data, std::size_t bytes,
                     std::uint64_t tag) {
  request.peer = peer;
  request.is_recv = false;
  request.expected_bytes = bytes;
  ucp_ep_h ep = endpoints_[static_cast<std::size_t>(peer)];
  if (ep == nullptr) {
    request.status = UCS_ERR_NOT_CONNECTED;
    return;
  }
  ucp_request_param_t params{};
  const ucs_status_ptr_t result = ucp_tag_send_nbx(ep, data, bytes, tag, &params);
  if (result == nullptr) {
    request.status = UCS_OK;
  } else if (UCS_PTR_IS_ERR(result)) {
    request.status = UCS_PTR_STATUS(result);
  } else {
    request.handle = result;
  }
}

void UcxWorker::recv(Request& request, int peer, void* data, std::size_t bytes, std::uint64_t tag,
                     std::uint64_t mask) {
  request.peer = peer;
  request.is_recv = true;
  request.expected_bytes = bytes;
  // Always a request, so that poll() reads the message's length from it: UCX 1.13 did not
  // report it reliably on the immediate-completion path.
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  const ucs_status_ptr_t result = ucp_tag_recv_nbx(worker_, data, bytes, tag, mask, &params);
  if (result == nullptr) {
    request.status = UCS_ERR_NO_MESSAGE;
  } else if (UCS_PTR_IS_ERR(result)) {
    request.status = UCS_PTR_STATUS(result);
  } else {
    request.handle = result;
  }
}

bool UcxWorker::poll(Request& request) {
  if (request.handle == nullptr) return request.finished();
  ucs_status_t status = UCS_OK;
  if (request.is_recv) {
    status = ucp_tag_recv_request_test(request.handle, &request.info);
    if (status == UCS_OK && request.exact_length && request.info.length != request.expected_bytes)
      status = UCS_ERR_MESSAGE_TRUNCATED;
  } else {
    status = ucp_request_check_status(request.handle);
  }
  if (status == UCS_INPROGRESS) return false;
  ucp_request_free(request.handle);
  request.handle = nullptr;
  request.status = status;
  return true;
}

void UcxWorker::cancel(Request& request) {
  if (request.handle != nullptr) ucp_request_cancel(worker_, request.handle);
}

bool UcxWorker::progress() {
  return !quiesced_ && ucp_worker_progress(worker_) != 0;
}

std::vector<std::pair<int, std::string>> UcxWorker::take_failed_peers() {
  std::vector<std::pair<int, std::string>> out;
  out.swap(failed_);
  return out;
}

void UcxWorker::wait_request(void* handle, Duration timeout) {
  if (handle == nullptr || UCS_PTR_IS_ERR(handle)) return;
  const Deadline deadline = deadline_after(timeout);
  while (!quiesced_ && ucp_request_check_status(handle) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline) {
    if (!progress()) std::this_thread::yield();
  }
  // A request still running here belongs to an endpoint that is being force-closed, which
  // completes it; freeing it now only hands it back to UCX early.
  ucp_request_free(handle);
}

void UcxWorker::close(Duration timeout) {
  bool any = false;
  for (const auto ep : endpoints_) any = any || ep != nullptr;
  if (!any) return;
  if (!quiesced_) {
    ucp_request_param_t flush{};
    wait_request(ucp_worker_flush_nbx(worker_, &flush), timeout);
  }
  for (auto& ep : endpoints_) {
    if (ep == nullptr) continue;
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = UCP_EP_CLOSE_FLAG_FORCE;
    wait_request(ucp_ep_close_nbx(ep, &params), timeout);
    ep = nullptr;
  }
}

}  // namespace tessera::ucx
