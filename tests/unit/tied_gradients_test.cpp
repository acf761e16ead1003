// TiedGradients on a hand-made layout: layer 0 owns "wte" (4 floats), layer 1 borrows it.
#include "tessera/strategy_kit/tied_gradients.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tessera/base/error.hpp"

namespace tessera {
namespace {

FlatLayout owner_and_borrower() {
  FlatLayout layout;
  layout.params.push_back({"0.embedding.wte", "wte", {2, 2}, 0, 4, 0, true});
  layout.total = 4;
  layout.layer_params = {{0}, {0}};
  return layout;
}

// A step's backward of the two layers: the borrower (layer 1) adds 2 to every element of the
// view it is given, then the owner's (layer 0) gradient `owner` is prepared. Returns where the
// borrower added.
const void* backward_adding_two(TiedGradients& ties, std::vector<float>& owner) {
  std::vector<BufferView> borrower_views(1);
  ties.prepare(1, borrower_views);
  for (float& g : borrower_views[0].host_span<float>("borrower gradient")) g += 2.0F;
  std::vector<BufferView> owner_views{view_of(std::span<float>(owner))};
  ties.prepare(0, owner_views);
  return borrower_views[0].data;
}

TEST(TiedGradients, ABorrowerAddsIntoTheBufferAndTheOwnersBackwardCollectsIt) {
  const FlatLayout layout = owner_and_borrower();
  TiedGradients ties(layout, Device::cpu());
  std::vector<float> owner(4, 1.0F);
  EXPECT_NE(backward_adding_two(ties, owner), owner.data());
  EXPECT_EQ(owner, std::vector<float>(4, 3.0F));
  EXPECT_EQ(ties.buffer_bytes(), 4 * sizeof(float));
}

TEST(TiedGradients, AddingIntoOwnersLendsTheOwnersGradientToTheBorrowerAndKeepsNoBuffer) {
  const FlatLayout layout = owner_and_borrower();
  TiedGradients ties(layout, Device::cpu());
  std::vector<float> flat(4, 0.0F);
  ties.add_into_owners([&](std::size_t param) {
    EXPECT_EQ(param, 0U);
    return view_of(std::span<float>(flat));
  });
  EXPECT_EQ(ties.buffer_bytes(), 0U);

  EXPECT_EQ(backward_adding_two(ties, flat), flat.data());
  // The owner's backward finds the borrower's sum in place and nothing is added twice.
  EXPECT_EQ(flat, std::vector<float>(4, 2.0F));
}

// A tensor rank holding 2 of wte's rows (a vocabulary slice, alike in owner and borrower)
// collects that slice's gradient, not the whole parameter's.
TEST(TiedGradients, ASliceOfTheTiedParameterCollectsWhatTheRankHolds) {
  const FlatLayout layout = owner_and_borrower();
  TiedGradients ties(layout, Device::cpu(), 0, SIZE_MAX, [](std::size_t param) {
    EXPECT_EQ(param, 0U);
    return std::size_t{2};
  });
  EXPECT_EQ(ties.buffer_bytes(), 2 * sizeof(float));
  std::vector<float> owner(2, 1.0F);
  (void)backward_adding_two(ties, owner);
  EXPECT_EQ(owner, std::vector<float>(2, 3.0F));
}

TEST(TiedGradients, AnOwnersGradientOfAnotherSizeIsRefused) {
  const FlatLayout layout = owner_and_borrower();
  TiedGradients ties(layout, Device::cpu());
  std::vector<float> too_short(3, 0.0F);
  EXPECT_THROW(
      ties.add_into_owners([&](std::size_t) { return view_of(std::span<float>(too_short)); }),
      InvalidArgument);
}

}  // namespace
}  // namespace tessera
