#pragma once
// Futex wait/wake on a word of a shared mapping (process-shared: not FUTEX_PRIVATE).

#include <atomic>
#include <cstdint>

#include "tessera/store.hpp"

namespace tessera::shm {

// Sleeps while *word == expected, at most `timeout`; returns early on a wake, a signal or a
// changed word. Callers re-check their condition either way.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                Duration timeout) noexcept;
// Wakes every sleeper on word, in any process.
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept;

}  // namespace tessera::shm
