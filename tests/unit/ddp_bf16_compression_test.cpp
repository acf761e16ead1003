// bf16 gradient compression, held exactly: each rank's gradient rounded to bf16, summed in rank
// order with bf16 rounding at every step, divided by the world size in bf16, widened back. The
// data is chosen so that this differs from the fp32 average on most elements: a synchronizer
// that sent fp32 (compression doing nothing) or rounded only at the end fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ddp_test_support.hpp"
#include "tessera/base/dtype.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"

namespace tessera {
namespace {

constexpr int kRanks = 3;
constexpr std::size_t kCount = 1000;

float gradient_of(int rank, std::size_t j) {
  return std::sin(static_cast<float>(j) * 0.37F + static_cast<float>(rank)) *
         (1.0F + 0.001F * static_cast<float>(rank * 7 + 1));
}

float compressed_average(std::size_t j) {
  std::uint16_t acc = float_to_bf16(gradient_of(0, j));
  for (int r = 1; r < kRanks; ++r)
    acc = float_to_bf16(bf16_to_float(acc) + bf16_to_float(float_to_bf16(gradient_of(r, j))));
  return bf16_to_float(float_to_bf16(bf16_to_float(acc) / static_cast<float>(kRanks)));
}

float fp32_average(std::size_t j) {
  float acc = gradient_of(0, j);
  for (int r = 1; r < kRanks; ++r) acc += gradient_of(r, j);
  return acc / static_cast<float>(kRanks);
}

TEST(GradientSynchronizerBf16, AveragesInBf16ExactlyAsTheWireFormatDefines) {
  std::size_t differ_from_fp32 = 0;
  std::size_t differ_from_rounded_fp32 = 0;
  for (std::size_t j = 0; j < kCount; ++j) {
    differ_from_fp32 += compressed_average(j) != fp32_average(j);
    differ_from_rounded_fp32 +=
        compressed_average(j) != bf16_to_float(float_to_bf16(fp32_average(j)));
  }
  ASSERT_GT(differ_from_fp32, kCount / 2) << "the data does not tell bf16 from fp32";
  ASSERT_GT(differ_from_rounded_fp32, kCount / 20)
      << "the data does not tell per-step rounding from rounding once";

  // Both bucket layouts: gradients adjacent in one flat buffer (reduced in place, as the ddp
  // strategy holds them) and gradients in separate buffers (staged).
  for (const bool flat : {true, false}) {
    SCOPED_TRACE(flat ? "one flat buffer" : "separate buffers");
    testing::run_ranks(kRanks, [&](std::shared_ptr<Communicator> world) {
      std::vector<float> storage(kCount + 1);
      std::vector<float> separate(kCount - kCount / 2);
      const std::span<float> a(storage.data(), kCount / 2);
      const std::span<float> b =
          flat ? std::span<float>(storage.data() + kCount / 2, kCount - kCount / 2)
               : std::span<float>(separate);
      GradientSyncOptions options;
      options.compression = GradientCompression::bf16;
      GradientSynchronizer sync(world, options);
      sync.add_parameter("a", {}, a);
      sync.add_parameter("b", {}, b);
      for (std::size_t j = 0; j < kCount; ++j) {
        const float g = gradient_of(world->rank(), j);
        if (j < a.size()) {
          a[j] = g;
        } else {
          b[j - a.size()] = g;
        }
      }
      sync.grad_ready(1);
      sync.grad_ready(0);
      sync.wait(testing::kTestTimeout);
      for (std::size_t j = 0; j < kCount; ++j) {
        const float got = j < a.size() ? a[j] : b[j - a.size()];
        ASSERT_EQ(got, compressed_average(j)) << "rank " << world->rank() << " element " << j;
      }
    });
  }
}

}  // namespace
}  // namespace tessera
