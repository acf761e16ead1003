#include "nccl_comm.hpp"

#include <algorithm>
#include <thread>

#include "cuda/cuda_device.hpp"
#include "cuda/cuda_error.hpp"
#include "nccl_work.hpp"
#include "tessera/base/error.hpp"

namespace tessera::nccl {

namespace {

std::string ms(Duration d) {
  return std::to_string(d.count()) + " ms";
}

// Sleeps between two looks at an NCCL call still in progress: spins first, then grows to the
// poll interval.
class Backoff {
 public:
  explicit Backoff(Duration longest)
      : longest_(std::chrono::duration_cast<std::chrono::microseconds>(longest)) {}
  void pause() {
    if (++looks_ < 64) {
      std::this_thread::yield();
      return;
    }
    sleep_ = std::min(longest_, std::max(std::chrono::microseconds(10), sleep_ * 2));
    std::this_thread::sleep_for(sleep_);
  }

 private:
  std::chrono::microseconds longest_;
  std::chrono::microseconds sleep_{0};
  int looks_ = 0;
};

}  // namespace

ncclUniqueId make_unique_id() {
  ncclUniqueId id{};
  const ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) {
    throw TransportError(std::string("nccl: ncclGetUniqueId failed (") +
                             ncclGetErrorString(result) + ": " + ncclGetLastError(nullptr) +
                             "); NCCL needs a network interface it can bind (NCCL_SOCKET_IFNAME)",
                         std::nullopt, "connect");
  }
  return id;
}

NcclComm::NcclComm(int rank, int size, int ordinal, Duration poll_interval, Duration timeout)
    : rank_(rank),
      size_(size),
      ordinal_(ordinal),
      poll_interval_(poll_interval),
      timeout_(timeout) {
  const cuda::DeviceGuard on(ordinal_);
  cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
              "creating the nccl transport's stream on cuda:" + std::to_string(ordinal_));
  cuda::check(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming),
              "creating a CUDA event on cuda:" + std::to_string(ordinal_));
}

std::shared_ptr<NcclComm> NcclComm::create(const ncclUniqueId& id, int rank, int size, int ordinal,
                                           Duration poll_interval, Duration timeout,
                                           Deadline deadline) {
  std::shared_ptr<NcclComm> comm(new NcclComm(rank, size, ordinal, poll_interval, timeout));
  const cuda::DeviceGuard on(ordinal);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  bool timed_out = false;
  ncclResult_t result = ncclSuccess;
  {
    const std::shared_lock lock(comm->comm_mutex_);
    result = ncclCommInitRankConfig(&comm->comm_, size, id, rank, &config);
    result = comm->settle(result, deadline, timed_out);
  }
  if (result != ncclSuccess) {
    const std::string where = "nccl: connect of rank " + std::to_string(rank) + " of " +
                              std::to_string(size) + " on cuda:" + std::to_string(ordinal);
    if (timed_out) {
      comm->abort(where + " timed out");
      throw Timeout(where + " did not complete within " + ms(timeout) +
                    ": not every rank joined (is every rank started, one GPU each?)");
    }
    auto error = comm->error_of(result, "connect", false);
    comm->fail(error);
    std::rethrow_exception(error);
  }
  return comm;
}

NcclComm::~NcclComm() {
  const cuda::DeviceGuard on(ordinal_);
  {
    std::unique_lock lock(comm_mutex_);
    if (comm_ != nullptr && !aborted_) {
      // Finalize flushes what is still queued; a peer that never comes must not hold the
      // destructor for long, so past a short deadline the communicator is aborted instead.
      const Deadline deadline =
          deadline_after(std::min(timeout_, Duration(std::chrono::seconds(10))));
      bool timed_out = false;
      ncclResult_t result = ncclCommFinalize(comm_);
      result = settle(result, deadline, timed_out);
      if (result == ncclSuccess) {
        (void)ncclCommDestroy(comm_);
      } else {
        (void)ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
  }
  if (inputs_ready_ != nullptr) (void)cudaEventDestroy(inputs_ready_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

ncclResult_t NcclComm::settle(ncclResult_t result, Deadline deadline, bool& timed_out) {
  Backoff backoff(poll_interval_);
  while (result == ncclInProgress) {
    if (aborting_.load()) return result;
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      return result;
    }
    backoff.pause();
    const ncclResult_t asked = ncclCommGetAsyncError(comm_, &result);
    if (asked != ncclSuccess) return asked;
  }
  return result;
}

std::exception_ptr NcclComm::error_of(ncclResult_t result, const std::string& operation,
                                      bool timed_out) const {
  const std::string where = "nccl: " + operation + " on rank " + std::to_string(rank_) + " of " +
                            std::to_string(size_) + " (cuda:" + std::to_string(ordinal_) + ")";
  if (timed_out) {
    return std::make_exception_ptr(TransportError(
        where + " could not be enqueued within " + ms(timeout_) + "; the communicator is aborted",
        std::nullopt, operation));
  }
  if (result == ncclInProgress) {
    return std::make_exception_ptr(TransportError(
        where + " was cut short: the communicator is being aborted", std::nullopt, operation));
  }
  const char* detail = comm_ != nullptr ? ncclGetLastError(comm_) : ncclGetLastError(nullptr);
  std::string hint;
  if (result == ncclRemoteError || result == ncclSystemError) {
    hint = "; a peer process died or the network between the ranks failed";
  } else if (result == ncclInvalidUsage || result == ncclInvalidArgument) {
    hint =
        "; ranks disagree about the operation (order, sizes, dtype or peers), or two ranks "
        "share one GPU";
  }
  return std::make_exception_ptr(TransportError(
      where + " failed: " + ncclGetErrorString(result) +
          (detail != nullptr && *detail != '\0' ? std::string(" (") + detail + ")" : "") + hint,
      std::nullopt, operation));
}

std::exception_ptr NcclComm::failure() const {
  const std::lock_guard lock(failure_mutex_);
  return failure_;
}

void NcclComm::fail(std::exception_ptr error) noexcept {
  {
    const std::lock_guard lock(failure_mutex_);
    if (!failure_) failure_ = std::move(error);
  }
  if (aborting_.exchange(true)) return;
  const std::unique_lock lock(comm_mutex_);
  if (comm_ != nullptr && !aborted_) {
    int previous = -1;
    (void)cudaGetDevice(&previous);
    if (previous != ordinal_) (void)cudaSetDevice(ordinal_);
    (void)ncclCommAbort(comm_);
    if (previous != ordinal_ && previous >= 0) (void)cudaSetDevice(previous);
    comm_ = nullptr;
  }
  aborted_ = true;
}

void NcclComm::abort(const std::string& reason) noexcept {
  try {
    fail(std::make_exception_ptr(TransportError(reason, std::nullopt, "abort")));
  } catch (...) {
    fail(nullptr);
  }
}

bool NcclComm::check_async_error(const std::string& operation) {
  ncclResult_t state = ncclSuccess;
  {
    const std::shared_lock lock(comm_mutex_);
    if (aborted_ || comm_ == nullptr) return failure() != nullptr;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
  }
  if (state == ncclSuccess || state == ncclInProgress) return false;
  fail(error_of(state, operation, false));
  return true;
}

std::shared_ptr<NcclWork> NcclComm::failed_work(const std::string& operation) {
  auto work = std::make_shared<NcclWork>(shared_from_this(), operation);
  work->failed(failure());
  return work;
}

std::shared_ptr<Work> NcclComm::launch(const std::string& operation, const Enqueue& enqueue) {
  flush_group();
  if (failure()) return failed_work(operation);
  auto work = std::make_shared<NcclWork>(shared_from_this(), operation);
  std::exception_ptr error;
  {
    const std::lock_guard issue(group_mutex_);
    const std::shared_lock lock(comm_mutex_);
    if (aborted_ || comm_ == nullptr) return failed_work(operation);
    try {
      const cuda::DeviceGuard on(ordinal_);
      auto done = make_event(ordinal_);
      // After whatever the default stream holds: the kernels that wrote the inputs.
      cuda::check(cudaEventRecord(inputs_ready_, nullptr), "cudaEventRecord");
      cuda::check(cudaStreamWaitEvent(stream_, inputs_ready_, 0), "cudaStreamWaitEvent");
      bool timed_out = false;
      const ncclResult_t result =
          settle(enqueue(comm_, stream_), deadline_after(timeout_), timed_out);
      if (result != ncclSuccess) {
        error = error_of(result, operation, timed_out);
      } else {
        cuda::check(cudaEventRecord(done.get(), stream_), "cudaEventRecord");
        work->launched(std::move(done));
      }
    } catch (const Error& e) {
      error = std::make_exception_ptr(TransportError(
          "nccl: " + operation + " on rank " + std::to_string(rank_) + ": " + e.what(),
          std::nullopt, operation));
    }
  }
  if (error) {
    fail(error);
    work->failed(failure());
  }
  return work;
}

std::shared_ptr<Work> NcclComm::add_to_group(const std::string& operation, int peer,
                                             const Enqueue& enqueue) {
  if (failure()) return failed_work(operation);
  auto work = std::make_shared<NcclWork>(shared_from_this(), operation, peer);
  const std::lock_guard issue(group_mutex_);
  group_.push_back({work, enqueue});
  return work;
}

void NcclComm::flush_group() {
  std::vector<Pending> pending;
  std::exception_ptr error;
  {
    const std::lock_guard issue(group_mutex_);
    if (group_.empty()) return;
    pending.swap(group_);
    const std::shared_lock lock(comm_mutex_);
    if (aborted_ || comm_ == nullptr) {
      error = failure();
    } else {
      std::string names;
      for (const auto& p : pending) names += (names.empty() ? "" : ", ") + p.work->operation();
      try {
        const cuda::DeviceGuard on(ordinal_);
        auto done = make_event(ordinal_);
        cuda::check(cudaEventRecord(inputs_ready_, nullptr), "cudaEventRecord");
        cuda::check(cudaStreamWaitEvent(stream_, inputs_ready_, 0), "cudaStreamWaitEvent");
        ncclResult_t result = ncclGroupStart();
        for (const auto& p : pending) {
          if (result != ncclSuccess) break;
          result = p.enqueue(comm_, stream_);
        }
        const ncclResult_t ended = ncclGroupEnd();
        if (result == ncclSuccess || result == ncclInProgress) result = ended;
        bool timed_out = false;
        result = settle(result, deadline_after(timeout_), timed_out);
        if (result != ncclSuccess) {
          error = error_of(result, "group of " + names, timed_out);
        } else {
          cuda::check(cudaEventRecord(done.get(), stream_), "cudaEventRecord");
          for (auto& p : pending) p.work->launched(done);
        }
      } catch (const Error& e) {
        error = std::make_exception_ptr(TransportError(
            "nccl: group of " + names + " on rank " + std::to_string(rank_) + ": " + e.what(),
            std::nullopt, "group"));
      } catch (...) {
        error = std::current_exception();
      }
    }
  }
  if (error) {
    fail(error);
    for (auto& p : pending) p.work->failed(failure());
  }
}

void NcclComm::order_before(cudaStream_t stream) noexcept {
  int previous = -1;
  (void)cudaGetDevice(&previous);
  if (previous != ordinal_) (void)cudaSetDevice(ordinal_);
  cudaEvent_t done = nullptr;
  if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess) {
    if (cudaEventRecord(done, stream_) == cudaSuccess) (void)cudaStreamWaitEvent(stream, done, 0);
    (void)cudaEventDestroy(done);  // released once it has fired
  }
  (void)cudaGetLastError();
  if (previous != ordinal_ && previous >= 0) (void)cudaSetDevice(previous);
}

std::shared_ptr<NcclComm> NcclComm::split(int color, int key) {
  flush_group();
  if (auto error = failure()) std::rethrow_exception(error);
  // A non-blocking split writes the child's handle when the split has completed, which may be
  // after ncclCommSplit returned: into memory that outlives this call, read atomically.
  auto slot = std::make_shared<ncclComm_t>(nullptr);
  const auto child_of = [&slot] { return std::atomic_ref<ncclComm_t>(*slot).load(); };
  std::exception_ptr error;
  const Deadline deadline = deadline_after(timeout_);
  bool timed_out = false;
  {
    const std::lock_guard issue(group_mutex_);
    const std::shared_lock lock(comm_mutex_);
    if (aborted_ || comm_ == nullptr) std::rethrow_exception(failure());
    const cuda::DeviceGuard on(ordinal_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t result =
        ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, slot.get(), &config);
    result = settle(result, deadline, timed_out);
    Backoff backoff(poll_interval_);
    while (result == ncclSuccess && color >= 0 && child_of() == nullptr) {
      if (aborting_.load()) {
        result = ncclInProgress;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        timed_out = true;
        result = ncclInProgress;
        break;
      }
      backoff.pause();
      if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) result = ncclInternalError;
      if (result == ncclInProgress) result = ncclSuccess;  // still splitting: keep looking
    }
    if (result != ncclSuccess) error = error_of(result, "split", timed_out);
  }
  if (error) {
    if (child_of() != nullptr) {
      (void)ncclCommAbort(child_of());
    } else {
      // NCCL may still write the handle: the slot must outlive that.
      const std::lock_guard lock(failure_mutex_);
      abandoned_slots_.push_back(slot);
    }
    fail(error);
    std::rethrow_exception(error);
  }
  if (color < 0) return nullptr;
  ncclComm_t child = child_of();

  // The child's own initialisation may still be in progress.
  std::shared_ptr<NcclComm> out(new NcclComm(0, 1, ordinal_, poll_interval_, timeout_));
  {
    const std::unique_lock lock(out->comm_mutex_);
    out->comm_ = child;
  }
  ncclResult_t result = ncclInProgress;
  {
    const std::shared_lock lock(out->comm_mutex_);
    const cuda::DeviceGuard on(ordinal_);
    result = out->settle(result, deadline, timed_out);
  }
  int child_rank = 0;
  int child_size = 0;
  if (result == ncclSuccess) result = ncclCommUserRank(child, &child_rank);
  if (result == ncclSuccess) result = ncclCommCount(child, &child_size);
  if (result != ncclSuccess) {
    auto child_error = out->error_of(result, "split", timed_out);
    out->fail(child_error);
    std::rethrow_exception(child_error);
  }
  // rank_ and size_ are const: build the final object around the connected child.
  std::shared_ptr<NcclComm> connected(
      new NcclComm(child_rank, child_size, ordinal_, poll_interval_, timeout_));
  {
    const std::unique_lock lock(out->comm_mutex_);
    const std::unique_lock other(connected->comm_mutex_);
    connected->comm_ = out->comm_;
    out->comm_ = nullptr;
    out->aborted_ = true;  // nothing left to finalize
  }
  return connected;
}

}  // namespace tessera::nccl
