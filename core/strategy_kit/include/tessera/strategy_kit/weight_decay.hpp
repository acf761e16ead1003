#pragma once
// DecayExemptions: which elements of a strategy's parameter vector skip weight decay (their
// ParamSpec says weight_decay = false), cut into the ranges one optimizer step takes
// (StepInfo::no_weight_decay). A strategy builds it over the vector it lays its parameters out
// in (the canonical FlatLayout; hybrid's vector of its stage) and asks it for the ranges inside
// each buffer it steps: a ZeRO piece, zero3's owned part of each unit, a ddp run. Ranges are cut
// at the buffer's edges, so a shard that starts inside one parameter and ends inside another
// gets exactly its part of each, and the update has the bits of one whole-model step.

#include <cstddef>
#include <vector>

#include "tessera/plugin/optimizer.hpp"
#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera {

// A value; cheap to read from several threads.
class DecayExemptions {
 public:
  DecayExemptions() = default;

  // The parameters of `layout` whose ParamSpec said weight_decay = false.
  [[nodiscard]] static DecayExemptions of(const FlatLayout& layout);

  // Marks elements [begin, end) exempt. Call in increasing order; a range that continues the
  // last one joins it. Throws InvalidArgument for an empty range or one that starts before the
  // last one ends.
  void add(std::size_t begin, std::size_t end);

  // Appends the exempt part of [begin, end) to `out`, moved so that element `begin` lands at
  // `at` (a buffer that holds [begin, end) from its element `at` on); a range that continues
  // out's last one joins it. Call in increasing `at` to keep `out` sorted.
  void append_within(std::size_t begin, std::size_t end, std::size_t at,
                     std::vector<ElementRange>& out) const;
  // The exempt part of [begin, end), counted from begin: what a step over a buffer holding
  // exactly [begin, end) takes.
  [[nodiscard]] std::vector<ElementRange> within(std::size_t begin, std::size_t end) const;

  [[nodiscard]] const std::vector<ElementRange>& ranges() const noexcept { return ranges_; }
  [[nodiscard]] bool empty() const noexcept { return ranges_.empty(); }

 private:
  std::vector<ElementRange> ranges_;  // sorted, disjoint, none touching the next
};

// The weight_decay flag of each parameter of `layout`, in its order (the checkpoint's index
// records them).
[[nodiscard]] std::vector<bool> weight_decay_flags(const FlatLayout& layout);

}  // namespace tessera
