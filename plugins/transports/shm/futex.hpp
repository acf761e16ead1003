#pragma once
// Futex wait/wake on a word of a shared mapping (process-shared: not FUTEX_PRIVATE), and the
// asymmetric fence that lets publishers skip a locked instruction.

#include <atomic>
#include <cstdint>

#include "tessera/plugin/store.hpp"

namespace tessera::shm {

// Sleeps while *word == expected, at most `timeout`; returns early on a wake, a signal or a
// changed word. Callers re-check their condition either way.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                Duration timeout) noexcept;
// Wakes every sleeper on word, in any process.
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept;

// A publisher stores its progress, then reads the sleeper count; a sleeper increments the
// count, then re-reads the progress. Each side needs store-load ordering, or both can miss the
// other. A seq_cst store gives it to the publisher at a price on every operation: the locked
// instruction waits until the peer that polls that cache line hands it back. Instead the
// sleeper, already on its slow path, pays: membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) runs a
// full barrier on every running thread of every registered process, so a publisher's earlier
// store is visible once it returns, or its later read sees the sleeper.
//
// True when the kernel offers that barrier and this process has registered for it (once, on
// the first call); publishers may then use release stores. False: they must use seq_cst.
[[nodiscard]] bool asymmetric_fence_ready() noexcept;
// The sleeper's half: call after incrementing the sleeper count, before re-checking. Only
// valid where asymmetric_fence_ready() is true.
void sleeper_fence() noexcept;

}  // namespace tessera::shm
