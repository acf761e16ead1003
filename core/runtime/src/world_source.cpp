#include "tessera/runtime/world_source.hpp"

#include <utility>

#include "tessera/strategy_kit/memory_state.hpp"

namespace tessera {

RunControl::~RunControl() = default;
WorldSource::~WorldSource() = default;

std::shared_ptr<Communicator> WorldSource::setup_world(std::shared_ptr<Communicator> given) {
  return given;
}

bool WorldSource::joins_running_run() const {
  return false;
}

std::optional<WorldChange> WorldSource::start(RunControl& /*run*/, const TrainingPosition& /*at*/) {
  return std::nullopt;
}

void WorldSource::step_completed(RunControl& /*run*/, const TrainingPosition& /*next*/) {}

std::optional<WorldChange> WorldSource::at_boundary(RunControl& /*run*/,
                                                    const TrainingPosition& /*next*/,
                                                    bool /*inside_epoch*/) {
  return std::nullopt;
}

WorldChange WorldSource::failed(RunControl& /*run*/, const Error& /*failure*/,
                                const TrainingPosition& /*at*/) {
  throw;  // NOLINT(misc-throw-by-value-catch-by-reference): rethrows the failure being handled
}

void WorldSource::adopted(RunControl& /*run*/, const TrainingPosition& /*at*/,
                          WorldEvent* /*event*/) {}

void WorldSource::finished(RunControl& /*run*/) {}

namespace {

class PlannedWorldChanges final : public WorldSource {
 public:
  explicit PlannedWorldChanges(ChangePlan plan) : plan_(std::move(plan)) {}

  std::optional<WorldChange> at_boundary(RunControl& run, const TrainingPosition& next,
                                         bool /*inside_epoch*/) override {
    auto planned = plan_(next.step);
    if (!planned) return std::nullopt;
    // Collective over the old world, which must still be whole (a planned change).
    std::shared_ptr<const CheckpointReader> state =
        gather_state_in_memory(run.strategy(), *run.world());
    return WorldChange{std::move(planned->world), std::move(state), std::nullopt, std::nullopt};
  }

 private:
  ChangePlan plan_;
};

}  // namespace

std::shared_ptr<WorldSource> planned_world_changes(ChangePlan plan) {
  return std::make_shared<PlannedWorldChanges>(std::move(plan));
}

}  // namespace tessera
