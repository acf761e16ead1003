#pragma once
// NcclWork: the Work of one NCCL operation, finished when the CUDA event recorded after it on
// the communicator's stream has fired. wait() polls that event and the communicator's
// asynchronous error with a deadline; wait_on_stream() makes a stream wait for the event.

#include <cuda_runtime_api.h>

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "tessera/plugin/work.hpp"

namespace tessera::nccl {

class NcclComm;

// A CUDA event shared by the Works of one send/recv group; destroyed with the last of them.
using SharedEvent = std::shared_ptr<std::remove_pointer_t<cudaEvent_t>>;
[[nodiscard]] SharedEvent make_event(int ordinal);

class NcclWork final : public Work {
 public:
  // peer: the other rank of a send or receive, named by its errors; -1 for a collective.
  NcclWork(std::shared_ptr<NcclComm> comm, std::string operation, int peer = -1);

  // Exactly one of these, once: the operation was enqueued and `done` fires after it, or it
  // never ran.
  void launched(SharedEvent done);
  void failed(std::exception_ptr error);

  [[nodiscard]] bool test() override;
  void wait(Duration timeout) override;
  using Work::wait;
  [[nodiscard]] bool on_device() const noexcept override { return true; }
  void wait_on_stream(const Stream& stream) override;
  [[nodiscard]] std::exception_ptr exception() override;

  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }

 protected:
  [[nodiscard]] Duration default_timeout() const override;

 private:
  // Runs the send/recv group this Work waits in, if it has not run yet.
  void make_launched();

  const std::shared_ptr<NcclComm> comm_;
  const std::string operation_;
  const int peer_;
  std::mutex mutex_;
  // When it was enqueued: past the communicator's timeout it fails, whoever waits.
  std::chrono::steady_clock::time_point launched_at_{};
  SharedEvent done_;  // null until launched
  bool finished_ = false;
  std::exception_ptr error_;
};

}  // namespace tessera::nccl
