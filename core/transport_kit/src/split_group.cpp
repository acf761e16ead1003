#include <algorithm>
#include <tuple>

#include "tessera/base/error.hpp"
#include "tessera/transport_kit/transport_support.hpp"

namespace tessera {

std::vector<int> split_group_members(const std::vector<std::pair<int, int>>& color_key, int rank) {
  TESSERA_CHECK(rank >= 0 && static_cast<std::size_t>(rank) < color_key.size(),
                "split: rank " + std::to_string(rank) + " outside the group");
  const int color = color_key[static_cast<std::size_t>(rank)].first;
  std::vector<int> members;
  if (color < 0) return members;
  for (std::size_t r = 0; r < color_key.size(); ++r) {
    if (color_key[r].first == color) members.push_back(static_cast<int>(r));
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return std::tuple(color_key[static_cast<std::size_t>(a)].second, a) <
           std::tuple(color_key[static_cast<std::size_t>(b)].second, b);
  });
  return members;
}

}  // namespace tessera
