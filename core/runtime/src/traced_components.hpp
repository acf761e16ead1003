#pragma once
// Decorators the trainer wraps around a rank's world communicator and optimizer when tracing
// is on, so that every strategy's collectives and optimizer steps are recorded without a line
// of tracing in the strategies.

#include <memory>

#include "tessera/base/trace.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/optimizer.hpp"

namespace tessera::trace {

// A communicator that forwards every call to `inner` and records each operation as an async
// event ("b" at issue, "e" when the rank sees it complete: Work::wait returns or throws, or
// Work::test returns true), with its bytes, its group and its peer or root, plus a "wait"
// span on the thread that blocks in Work::wait. split() records a span and returns a traced
// group; groups are numbered 0 (the world), then in the order this rank split them. Both
// share `recorder`, which must be thread-safe (it is).
[[nodiscard]] std::shared_ptr<Communicator> traced_communicator(std::shared_ptr<Communicator> inner,
                                                                std::shared_ptr<Recorder> recorder);

// An optimizer that forwards to `inner` and records each step() call as an "optimizer_step"
// span with its element count, on whichever thread calls it.
[[nodiscard]] std::shared_ptr<const Optimizer> traced_optimizer(
    std::shared_ptr<const Optimizer> inner, std::shared_ptr<Recorder> recorder);

}  // namespace tessera::trace
