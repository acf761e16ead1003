// The `zero1` strategy: optimizer state sharded, gradients all-reduced.
#include "tessera/sdk/plugin.hpp"
#include "zero_options.hpp"
#include "zero_strategy.hpp"

namespace {

class ZeroOneStrategy final : public tessera::zero::ZeroStrategy {
 public:
  explicit ZeroOneStrategy(const tessera::Options& options)
      : ZeroStrategy(options, tessera::zero::ZeroStage::one) {}
};

}  // namespace

TESSERA_PLUGIN(strategy, "zero1", "1.0.0",
               "ZeRO stage 1: optimizer state sharded over ranks, gradients all-reduced",
               TESSERA_NO_ALIASES, tessera::zero::kZeroOneOptions, tessera::zero::kZeroCapabilities,
               ZeroOneStrategy)
