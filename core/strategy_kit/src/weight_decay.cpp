#include "tessera/strategy_kit/weight_decay.hpp"

#include <algorithm>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

DecayExemptions DecayExemptions::of(const FlatLayout& layout) {
  DecayExemptions exemptions;
  for (const auto& p : layout.params) {
    if (!p.weight_decay && p.count > 0) exemptions.add(p.offset, p.offset + p.count);
  }
  return exemptions;
}

namespace {

// Adds [begin, end) to sorted `ranges`, joining the last range when it continues it.
void append_range(std::vector<ElementRange>& ranges, std::size_t begin, std::size_t end) {
  if (!ranges.empty() && ranges.back().end == begin) {
    ranges.back().end = end;
  } else {
    ranges.push_back({begin, end});
  }
}

}  // namespace

void DecayExemptions::add(std::size_t begin, std::size_t end) {
  TESSERA_CHECK(begin < end && (ranges_.empty() || begin >= ranges_.back().end),
                "weight-decay exemption [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") is empty or out of order");
  append_range(ranges_, begin, end);
}

void DecayExemptions::append_within(std::size_t begin, std::size_t end, std::size_t at,
                                    std::vector<ElementRange>& out) const {
  // The first range that ends after `begin`; the ranges are sorted by both ends.
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                             [](std::size_t b, const ElementRange& r) { return b < r.end; });
  for (; it != ranges_.end() && it->begin < end; ++it) {
    const std::size_t lo = std::max(it->begin, begin);
    const std::size_t hi = std::min(it->end, end);
    append_range(out, at + (lo - begin), at + (hi - begin));
  }
}

std::vector<ElementRange> DecayExemptions::within(std::size_t begin, std::size_t end) const {
  std::vector<ElementRange> out;
  append_within(begin, end, 0, out);
  return out;
}

std::vector<bool> weight_decay_flags(const FlatLayout& layout) {
  std::vector<bool> flags;
  flags.reserve(layout.params.size());
  for (const auto& p : layout.params) flags.push_back(p.weight_decay);
  return flags;
}

}  // namespace tessera
