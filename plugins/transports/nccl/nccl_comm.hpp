#pragma once
// NcclComm: one NCCL communicator, the CUDA stream its operations run on, and the failure state
// every Work of it shares. The communicator is non-blocking (ncclConfig_t::blocking = 0): no
// NCCL call waits for peers on the host, so every wait here has a deadline and abort() can
// always end it.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "tessera/base/time.hpp"
#include "tessera/plugin/work.hpp"

namespace tessera::nccl {

class NcclWork;

// ncclGetUniqueId, as a TransportError when it fails.
[[nodiscard]] ncclUniqueId make_unique_id();

// One enqueue of an NCCL operation on `stream` (a collective, or one part of a send/recv group).
using Enqueue = std::function<ncclResult_t(ncclComm_t comm, cudaStream_t stream)>;

// Thread-safety: launch, split and flush come from the communicator's one issuing thread; the
// Work methods, failure() and abort() from any thread.
class NcclComm : public std::enable_shared_from_this<NcclComm> {
 public:
  // Collective: every rank of `size` with the same id. Polls the non-blocking init until it is
  // done; past `deadline` aborts it and throws Timeout; an NCCL error is a TransportError.
  [[nodiscard]] static std::shared_ptr<NcclComm> create(const ncclUniqueId& id, int rank, int size,
                                                        int ordinal, Duration poll_interval,
                                                        Duration timeout, Deadline deadline);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int ordinal() const noexcept { return ordinal_; }
  [[nodiscard]] Duration timeout() const noexcept { return timeout_; }
  [[nodiscard]] Duration poll_interval() const noexcept { return poll_interval_; }

  // Runs one collective: orders it after the work queued on the default stream, enqueues it on
  // this communicator's stream and returns its Work. After a failure, a Work that already holds
  // the failure. `operation` names it in errors.
  [[nodiscard]] std::shared_ptr<Work> launch(const std::string& operation, const Enqueue& enqueue);

  // Point to point: added to the open group, which runs (ncclGroupStart ... ncclGroupEnd) when
  // the next collective is launched or any Work of the group is looked at. So a send and a
  // receive issued one after the other run together, whichever rank issues which first.
  [[nodiscard]] std::shared_ptr<Work> add_to_group(const std::string& operation, int peer,
                                                   const Enqueue& enqueue);
  // Runs the open group, if any. Safe from any thread.
  void flush_group();

  // Makes `stream` (the default stream: null) wait for everything enqueued on this
  // communicator's stream so far, without blocking the host: memory freed on `stream` after
  // this call is freed only once those operations are done (or aborted).
  void order_before(cudaStream_t stream) noexcept;

  // Collective: ncclCommSplit. nullptr for color < 0.
  [[nodiscard]] std::shared_ptr<NcclComm> split(int color, int key);

  // Fails every pending and later operation with TransportError(reason) and aborts the NCCL
  // communicator (ncclCommAbort), which ends its kernels. Idempotent; waits at most for an
  // enqueue in progress.
  void abort(const std::string& reason) noexcept;
  // Records `error` as this communicator's failure (the first one wins) and aborts.
  void fail(std::exception_ptr error) noexcept;
  [[nodiscard]] std::exception_ptr failure() const;

  // For NcclWork: whether the communicator reports an asynchronous error; if so, fails it
  // naming `operation` and returns true.
  bool check_async_error(const std::string& operation);

 private:
  NcclComm(int rank, int size, int ordinal, Duration poll_interval, Duration timeout);
  // Polls ncclCommGetAsyncError while it says ncclInProgress. Called with comm_mutex_ held.
  // Returns the final result; ncclInProgress past `deadline` or on abort.
  ncclResult_t settle(ncclResult_t result, Deadline deadline, bool& timed_out);
  // An NCCL result that is not ncclSuccess as a TransportError naming `operation`.
  [[nodiscard]] std::exception_ptr error_of(ncclResult_t result, const std::string& operation,
                                            bool timed_out) const;
  std::shared_ptr<NcclWork> failed_work(const std::string& operation);

  const int rank_;
  const int size_;
  const int ordinal_;
  const Duration poll_interval_;
  const Duration timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;  // recorded on the default stream before each launch

  // Held shared while a call uses comm_, exclusively by abort() before ncclCommAbort.
  mutable std::shared_mutex comm_mutex_;
  std::atomic<bool> aborting_{false};
  bool aborted_ = false;  // under comm_mutex_ (exclusive)

  mutable std::mutex failure_mutex_;
  std::exception_ptr failure_;
  // Where splits that failed or timed out may still have NCCL write a child's handle.
  std::vector<std::shared_ptr<ncclComm_t>> abandoned_slots_;

  // The open point-to-point group.
  std::mutex group_mutex_;
  struct Pending {
    std::shared_ptr<NcclWork> work;
    Enqueue enqueue;
  };
  std::vector<Pending> group_;
};

}  // namespace tessera::nccl
