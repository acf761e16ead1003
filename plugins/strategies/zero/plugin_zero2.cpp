// The `zero2` strategy: optimizer state and gradients sharded, gradients reduce-scattered.
#include "tessera/sdk/plugin.hpp"
#include "zero_options.hpp"
#include "zero_strategy.hpp"

namespace {

class ZeroTwoStrategy final : public tessera::zero::ZeroStrategy {
 public:
  explicit ZeroTwoStrategy(const tessera::Options& options)
      : ZeroStrategy(options, tessera::zero::ZeroStage::two) {}
};

}  // namespace

TESSERA_PLUGIN(strategy, "zero2", "1.0.0",
               "ZeRO stage 2: optimizer state and gradients sharded, gradients reduce-scattered",
               TESSERA_NO_ALIASES, tessera::zero::kZeroTwoOptions, tessera::zero::kZeroCapabilities,
               ZeroTwoStrategy)
