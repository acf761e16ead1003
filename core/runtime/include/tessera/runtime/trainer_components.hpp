#pragma once
// What one rank trains with: the plugin objects a Trainer drives. A host may build these itself
// (its own model, dataset or communicator) or let build_trainer_components() make them from a
// Config.
#include <memory>
#include <string>
#include <vector>

#include "tessera/base/device_allocator.hpp"
#include "tessera/config/config.hpp"
#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {

struct TrainerComponents {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Optimizer> optimizer;
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<Strategy> strategy;
  std::string strategy_name;  // recorded in checkpoints
  // Strategy names a checkpoint may have been written by (build_trainer_components: every
  // loaded strategy plugin); --resume refuses a checkpoint naming another. Empty: not checked.
  std::vector<std::string> known_strategies = {};
  // Where the strategy keeps its state and the model computes (StrategySetup::allocator):
  // null for the host; for [runtime] device = cuda, the allocator of the GPU `world` moves.
  std::shared_ptr<DeviceAllocator> allocator = nullptr;
  // The strategy's capabilities as its plugin declares them (PluginCapabilities; a host that
  // builds its own strategy sets what applies). replicated_state (TESSERA_REPLICATED_STATE):
  // every rank holds the whole state, the last completed step's, so an elastic run keeps no
  // copies of it; false, the safe default, keeps copies.
  PluginCapabilities strategy_capabilities = {};
};

// Creates the [train] section's model, optimizer, dataset and strategy through `registry`.
[[nodiscard]] TrainerComponents build_trainer_components(const Config& config,
                                                         const PluginRegistry& registry,
                                                         std::shared_ptr<Communicator> world);

}  // namespace tessera
