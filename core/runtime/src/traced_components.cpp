#include "traced_components.hpp"

#include <atomic>
#include <utility>

namespace tessera::trace {

namespace {

constexpr const char* kCategory = "comm";

// The async event's name and the name of the span of a thread blocked waiting for it.
struct OperationNames {
  const char* operation;
  const char* wait;
};

constexpr OperationNames kAllReduce{"all_reduce", "wait all_reduce"};
constexpr OperationNames kReduceScatter{"reduce_scatter", "wait reduce_scatter"};
constexpr OperationNames kAllGather{"all_gather", "wait all_gather"};
constexpr OperationNames kBroadcast{"broadcast", "wait broadcast"};
constexpr OperationNames kSend{"send", "wait send"};
constexpr OperationNames kRecv{"recv", "wait recv"};
constexpr OperationNames kBarrier{"barrier", "wait barrier"};

std::int64_t bytes_of(const BufferView& view) {
  return static_cast<std::int64_t>(view.bytes());
}

// Ends the operation's async event exactly once, whichever of wait, test or the destructor
// sees it finish first.
class TracedWork final : public Work {
 public:
  TracedWork(std::shared_ptr<Work> inner, std::shared_ptr<Recorder> recorder, OperationNames names,
             std::uint64_t id, Duration timeout)
      : inner_(std::move(inner)),
        recorder_(std::move(recorder)),
        names_(names),
        id_(id),
        timeout_(timeout) {}
  ~TracedWork() override {
    // Dropped without anybody seeing it finish: the end marks when it was let go.
    end({"unobserved", 1});
  }
  TracedWork(const TracedWork&) = delete;
  TracedWork& operator=(const TracedWork&) = delete;

  bool test() override {
    const bool done = inner_->test();
    if (done) end({"failed", inner_->exception() != nullptr ? 1 : 0});
    return done;
  }

  void wait(Duration timeout) override {
    const Span waiting(recorder_.get(), names_.wait, kCategory,
                       {{"id", static_cast<std::int64_t>(id_)}});
    try {
      inner_->wait(timeout);
    } catch (...) {
      end({"failed", 1});
      throw;
    }
    end({"failed", 0});
  }

  [[nodiscard]] bool on_device() const noexcept override { return inner_->on_device(); }

  void wait_on_stream(const Stream& stream) override {
    inner_->wait_on_stream(stream);
    // Host work is complete now; device work only ordered, so its end stays unknown here.
    if (!inner_->on_device()) end({"failed", 0});
  }

  std::exception_ptr exception() override { return inner_->exception(); }

 protected:
  [[nodiscard]] Duration default_timeout() const override { return timeout_; }

 private:
  void end(Arg outcome) noexcept {
    if (id_ == 0 || ended_.exchange(true)) return;
    const Arg args[] = {outcome};
    recorder_->end_async(names_.operation, kCategory, id_, args);
  }

  std::shared_ptr<Work> inner_;
  std::shared_ptr<Recorder> recorder_;
  OperationNames names_;
  std::uint64_t id_;
  Duration timeout_;
  std::atomic<bool> ended_{false};
};

class TracedCommunicator final : public Communicator {
 public:
  TracedCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<Recorder> recorder,
                     std::shared_ptr<std::atomic<std::int64_t>> next_group, std::int64_t group)
      : inner_(std::move(inner)),
        recorder_(std::move(recorder)),
        next_group_(std::move(next_group)),
        group_(group) {}

  [[nodiscard]] int rank() const noexcept override { return inner_->rank(); }
  [[nodiscard]] int size() const noexcept override { return inner_->size(); }
  [[nodiscard]] Duration timeout() const noexcept override { return inner_->timeout(); }
  [[nodiscard]] bool moves(Device device) const noexcept override { return inner_->moves(device); }
  void abort(const std::string& reason) noexcept override {
    recorder_->instant("abort", kCategory, std::initializer_list<Arg>{{"group", group_}});
    inner_->abort(reason);
  }

 protected:
  std::shared_ptr<Work> do_all_reduce(BufferView data, ReduceOp op) override {
    return traced(kAllReduce, {{"bytes", bytes_of(data)}, {"group", group_}, {"size", size()}},
                  [&] { return inner_->all_reduce(data, op); });
  }
  std::shared_ptr<Work> do_reduce_scatter(BufferView input, BufferView output,
                                          ReduceOp op) override {
    return traced(kReduceScatter, {{"bytes", bytes_of(input)}, {"group", group_}, {"size", size()}},
                  [&] { return inner_->reduce_scatter(input, output, op); });
  }
  std::shared_ptr<Work> do_all_gather(BufferView input, BufferView output) override {
    return traced(kAllGather, {{"bytes", bytes_of(output)}, {"group", group_}, {"size", size()}},
                  [&] { return inner_->all_gather(input, output); });
  }
  std::shared_ptr<Work> do_broadcast(BufferView data, int root) override {
    return traced(kBroadcast, {{"bytes", bytes_of(data)}, {"group", group_}, {"root", root}},
                  [&] { return inner_->broadcast(data, root); });
  }
  std::shared_ptr<Work> do_send(BufferView data, int peer, std::uint32_t tag) override {
    return traced(kSend,
                  {{"bytes", bytes_of(data)}, {"group", group_}, {"peer", peer}, {"tag", tag}},
                  [&] { return inner_->send(data, peer, tag); });
  }
  std::shared_ptr<Work> do_recv(BufferView data, int peer, std::uint32_t tag) override {
    return traced(kRecv,
                  {{"bytes", bytes_of(data)}, {"group", group_}, {"peer", peer}, {"tag", tag}},
                  [&] { return inner_->recv(data, peer, tag); });
  }
  std::shared_ptr<Work> do_barrier() override {
    return traced(kBarrier, {{"group", group_}, {"size", size()}},
                  [&] { return inner_->barrier(); });
  }
  std::unique_ptr<Communicator> do_split(int color, int key) override {
    // Numbered on every rank, opted out or not, so that numbers agree across a group's ranks.
    const std::int64_t child = next_group_->fetch_add(1);
    const Span span(recorder_.get(), "split", kCategory,
                    {{"group", group_}, {"color", color}, {"key", key}, {"new_group", child}});
    auto inner = inner_->split(color, key);
    if (!inner) return nullptr;
    return std::make_unique<TracedCommunicator>(std::move(inner), recorder_, next_group_, child);
  }

 private:
  template <class Issue>
  std::shared_ptr<Work> traced(OperationNames names, std::initializer_list<Arg> args,
                               Issue&& issue) {
    const std::uint64_t id =
        recorder_->begin_async(names.operation, kCategory, {args.begin(), args.size()});
    std::shared_ptr<Work> work;
    try {
      work = issue();
    } catch (...) {
      const Arg failed[] = {{"failed", 1}};
      recorder_->end_async(names.operation, kCategory, id, failed);
      throw;
    }
    if (id == 0) return work;  // not recorded: nothing to complete, no wrapper to pay for
    return std::make_shared<TracedWork>(std::move(work), recorder_, names, id, inner_->timeout());
  }

  std::shared_ptr<Communicator> inner_;
  std::shared_ptr<Recorder> recorder_;
  std::shared_ptr<std::atomic<std::int64_t>> next_group_;
  std::int64_t group_;
};

class TracedOptimizer final : public Optimizer {
 public:
  TracedOptimizer(std::shared_ptr<const Optimizer> inner, std::shared_ptr<Recorder> recorder)
      : inner_(std::move(inner)), recorder_(std::move(recorder)) {}

  [[nodiscard]] std::size_t state_per_param() const noexcept override {
    return inner_->state_per_param();
  }
  [[nodiscard]] bool runs_on(Device device) const noexcept override {
    return inner_->runs_on(device);
  }
  using Optimizer::step;
  void step(BufferView params, BufferView grads, BufferView state,
            const StepInfo& info) const override {
    const Span span(recorder_.get(), "optimizer_step", "compute",
                    {{"elements", static_cast<std::int64_t>(params.count)}, {"step", info.step}});
    inner_->step(params, grads, state, info);
  }

 private:
  std::shared_ptr<const Optimizer> inner_;
  std::shared_ptr<Recorder> recorder_;
};

}  // namespace

std::shared_ptr<Communicator> traced_communicator(std::shared_ptr<Communicator> inner,
                                                  std::shared_ptr<Recorder> recorder) {
  return std::make_shared<TracedCommunicator>(std::move(inner), std::move(recorder),
                                              std::make_shared<std::atomic<std::int64_t>>(1), 0);
}

std::shared_ptr<const Optimizer> traced_optimizer(std::shared_ptr<const Optimizer> inner,
                                                  std::shared_ptr<Recorder> recorder) {
  return std::make_shared<TracedOptimizer>(std::move(inner), std::move(recorder));
}

}  // namespace tessera::trace
