#include <string>

#include "tessera/base/error.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera {

OperationQueue::OperationQueue(Duration default_timeout, AbortHandler abort)
    : default_timeout_(default_timeout), abort_(std::move(abort)), worker_([this] { run(); }) {}

OperationQueue::~OperationQueue() {
  shutdown(std::make_exception_ptr(
      TransportError("communicator destroyed with this operation pending", std::nullopt, "")));
}

std::shared_ptr<QueuedWork> OperationQueue::submit(std::string operation,
                                                   std::function<void()> body) {
  auto work = std::make_shared<QueuedWork>(std::move(operation), default_timeout_, abort_);
  {
    std::lock_guard lock(mutex_);
    if (stopped_) {
      work->complete(stopped_);
      return work;
    }
    items_.push_back({work, std::move(body)});
  }
  wake_.notify_one();
  return work;
}

void OperationQueue::shutdown(std::exception_ptr error) noexcept {
  std::deque<Item> abandoned;
  bool was_running = false;
  {
    std::lock_guard lock(mutex_);
    if (!stopped_) stopped_ = std::move(error);
    abandoned.swap(items_);
    was_running = running_body_;
  }
  wake_.notify_one();
  for (auto& item : abandoned) item.work->complete(stopped_);
  // A running body waits on peers that will never come now; only the transport's abort can
  // release it, and join() below must not wait out its whole timeout.
  if ((was_running || !abandoned.empty()) && abort_) {
    abort_("a communicator was shut down with operations pending");
  }
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

void OperationQueue::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopped_ || !items_.empty(); });
      if (items_.empty()) return;  // stopped and drained
      item = std::move(items_.front());
      items_.pop_front();
      running_body_ = true;
    }
    std::exception_ptr error;
    try {
      item.body();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      running_body_ = false;
    }
    item.work->complete(std::move(error));
  }
}

}  // namespace tessera
