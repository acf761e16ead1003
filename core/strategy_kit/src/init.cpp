#include "tessera/strategy_kit/init.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"
#include "tessera/strategy_kit/tensor_parallel.hpp"

namespace tessera {
namespace {

// Element i of a parameter (of a slice: its i-th element) is element whole_index(i) of the
// whole parameter, so a slice initialises to the bits the whole parameter has there.
class WholeIndex {
 public:
  explicit WholeIndex(const ParamSpec& spec) : runs_(slice_runs(spec)) {}
  std::size_t operator()(std::size_t i) const noexcept {
    return runs_.run == 0 ? i : runs_.whole_start(i / runs_.run) + i % runs_.run;
  }

 private:
  SliceRuns runs_;
};

void fill_uniform(std::uint64_t seed, std::size_t param_index, float bound, std::span<float> out,
                  std::size_t offset, const WholeIndex& whole_index) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float u = counter_uniform(seed, param_index, whole_index(offset + i));
    out[i] = (2.0F * u - 1.0F) * bound;
  }
}

// N(0, std^2) by Box-Muller from two counter uniforms of the element's whole index: a slice
// gets the bits of the whole, and no element depends on another.
void fill_normal(std::uint64_t seed, std::size_t param_index, float std_dev, std::span<float> out,
                 std::size_t offset, const WholeIndex& whole_index) {
  constexpr double kTwoPi = 6.283185307179586;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint64_t k = whole_index(offset + i);
    // 1 - u is in (0, 1]: the logarithm is finite.
    const double u1 = 1.0 - static_cast<double>(counter_uniform(seed, param_index, 2 * k));
    const double u2 = counter_uniform(seed, param_index, 2 * k + 1);
    out[i] = static_cast<float>(std_dev * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
}

}  // namespace

void initialize_parameter(const ParamSpec& spec, std::uint64_t seed, std::size_t param_index,
                          std::span<float> out, std::size_t offset) {
  TESSERA_CHECK(spec.dtype == DType::f32, "parameter " + spec.name + " is not f32");
  const std::size_t total = element_count(spec.shape);
  TESSERA_CHECK(offset <= total && out.size() <= total - offset,
                "range [" + std::to_string(offset) + ", " + std::to_string(offset + out.size()) +
                    ") exceeds parameter " + spec.name + " of " + std::to_string(total) +
                    " elements");
  switch (spec.init) {
    case ParamInit::zeros: std::fill(out.begin(), out.end(), 0.0F); return;
    case ParamInit::ones: std::fill(out.begin(), out.end(), 1.0F); return;
    case ParamInit::kaiming_uniform: {
      TESSERA_CHECK(spec.fan_in > 0, "kaiming_uniform needs fan_in for " + spec.name);
      const auto bound = static_cast<float>(std::sqrt(6.0 / static_cast<double>(spec.fan_in)));
      fill_uniform(seed, param_index, bound, out, offset, WholeIndex(spec));
      return;
    }
    case ParamInit::xavier_uniform: {
      TESSERA_CHECK(spec.fan_in + spec.fan_out > 0, "xavier_uniform needs fans for " + spec.name);
      const auto bound =
          static_cast<float>(std::sqrt(6.0 / static_cast<double>(spec.fan_in + spec.fan_out)));
      fill_uniform(seed, param_index, bound, out, offset, WholeIndex(spec));
      return;
    }
    case ParamInit::normal: {
      TESSERA_CHECK(spec.init_std > 0.0F && std::isfinite(spec.init_std),
                    "normal needs a positive init_std for " + spec.name);
      fill_normal(seed, param_index, spec.init_std, out, offset, WholeIndex(spec));
      return;
    }
  }
  throw InvalidArgument("unknown ParamInit for " + spec.name);
}

}  // namespace tessera
