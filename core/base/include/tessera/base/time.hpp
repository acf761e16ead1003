#pragma once
// Durations and deadlines: the one vocabulary of time every blocking call in tessera uses.

#include <chrono>

namespace tessera {

// Timeouts, leases and stall limits: whole milliseconds everywhere, so options, messages and
// the wire agree without rounding.
using Duration = std::chrono::milliseconds;
using Deadline = std::chrono::steady_clock::time_point;

// now + timeout, saturating, so that Duration::max() means "practically never" rather than
// an overflowed time point in the past.
[[nodiscard]] Deadline deadline_after(Duration timeout) noexcept;

}  // namespace tessera
