#include "nccl_work.hpp"

#include <algorithm>
#include <thread>

#include "cuda/cuda_device.hpp"
#include "cuda/cuda_error.hpp"
#include "nccl_comm.hpp"
#include "tessera/base/error.hpp"

namespace tessera::nccl {

SharedEvent make_event(int ordinal) {
  const cuda::DeviceGuard on(ordinal);
  cudaEvent_t event = nullptr;
  cuda::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
              "creating a CUDA event on cuda:" + std::to_string(ordinal));
  return {event, [](cudaEvent_t e) { (void)cudaEventDestroy(e); }};
}

NcclWork::NcclWork(std::shared_ptr<NcclComm> comm, std::string operation, int peer)
    : comm_(std::move(comm)), operation_(std::move(operation)), peer_(peer) {}

void NcclWork::launched(SharedEvent done) {
  const std::lock_guard lock(mutex_);
  done_ = std::move(done);
  launched_at_ = std::chrono::steady_clock::now();
}

void NcclWork::failed(std::exception_ptr error) {
  const std::lock_guard lock(mutex_);
  if (!error_) error_ = std::move(error);
  finished_ = true;
}

void NcclWork::make_launched() {
  {
    const std::lock_guard lock(mutex_);
    if (done_ || finished_) return;
  }
  comm_->flush_group();
}

bool NcclWork::test() {
  make_launched();
  SharedEvent done;
  {
    const std::lock_guard lock(mutex_);
    if (finished_) return true;
    done = done_;
  }
  // The communicator failed (abort, a peer's error, another operation's timeout): so did this.
  if (auto failure = comm_->failure()) {
    failed(failure);
    return true;
  }
  if (!done) return false;
  const cudaError_t state = cudaEventQuery(done.get());
  if (state == cudaSuccess) {
    const std::lock_guard lock(mutex_);
    finished_ = true;
    return true;
  }
  if (state != cudaErrorNotReady) {
    (void)cudaGetLastError();
    auto error = std::make_exception_ptr(
        TransportError("nccl: " + operation_ + " on rank " + std::to_string(comm_->rank()) +
                           " failed on cuda:" + std::to_string(comm_->ordinal()) + " (" +
                           cudaGetErrorName(state) + ": " + cudaGetErrorString(state) + ")",
                       std::nullopt, operation_));
    comm_->fail(error);
    failed(error);
    return true;
  }
  if (comm_->check_async_error(operation_)) {
    failed(comm_->failure());
    return true;
  }
  // The operation's own deadline, as every transport has one: a peer that never takes part
  // fails the group after `timeout`, even for a caller that waits longer.
  std::chrono::steady_clock::time_point since;
  {
    const std::lock_guard lock(mutex_);
    since = launched_at_;
  }
  if (std::chrono::steady_clock::now() - since > comm_->timeout()) {
    const std::string who = peer_ >= 0 ? "; rank " + std::to_string(peer_) +
                                             " never took its part (stopped, dead or elsewhere)"
                                       : "; a rank never took its part (stopped, dead or "
                                         "issuing other operations)";
    auto error = std::make_exception_ptr(
        TransportError("nccl: " + operation_ + " on rank " + std::to_string(comm_->rank()) +
                           " of " + std::to_string(comm_->size()) + " did not finish within " +
                           std::to_string(comm_->timeout().count()) + " ms" + who +
                           "; the communicator is aborted",
                       peer_ >= 0 ? std::optional<int>(peer_) : std::nullopt, operation_));
    comm_->fail(error);
    failed(comm_->failure());
    return true;
  }
  return false;
}

void NcclWork::wait(Duration timeout) {
  const Deadline deadline = deadline_after(timeout);
  // Spin briefly (a small operation finishes in microseconds), then sleep, growing to the
  // communicator's poll interval.
  auto pause = std::chrono::microseconds(0);
  const auto longest =
      std::chrono::duration_cast<std::chrono::microseconds>(comm_->poll_interval());
  for (int looks = 0;; ++looks) {
    if (test()) {
      if (auto error = exception()) std::rethrow_exception(error);
      return;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    if (looks < 64) {
      std::this_thread::yield();
    } else {
      pause = std::min(longest, std::max(std::chrono::microseconds(10), pause * 2));
      std::this_thread::sleep_for(pause);
    }
  }
  const std::string what = "nccl: " + operation_ + " on rank " + std::to_string(comm_->rank()) +
                           " of " + std::to_string(comm_->size()) + " did not finish within " +
                           std::to_string(timeout.count()) +
                           " ms; a peer is slow, stopped or dead, so the communicator is aborted";
  comm_->abort(what);
  throw Timeout(what);
}

void NcclWork::wait_on_stream(const Stream& stream) {
  const Device mine = Device::cuda(comm_->ordinal());
  if (stream.device != mine) {
    throw InvalidArgument("nccl: wait_on_stream of " + operation_ + " on a stream of " +
                          to_string(stream.device) + "; the operation runs on " + to_string(mine));
  }
  make_launched();
  SharedEvent done;
  {
    const std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    done = done_;
  }
  if (!done) return;  // failed while launching: the next wait() or exception() says so
  const cuda::DeviceGuard on(comm_->ordinal());
  cuda::check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle), done.get(), 0),
              "cudaStreamWaitEvent for " + operation_);
}

std::exception_ptr NcclWork::exception() {
  (void)test();
  const std::lock_guard lock(mutex_);
  return error_;
}

Duration NcclWork::default_timeout() const {
  return comm_->timeout();
}

}  // namespace tessera::nccl
