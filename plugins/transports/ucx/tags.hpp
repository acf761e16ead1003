#pragma once
// The 64-bit UCX tag of every message a communicator sends. UCX matches receives by tag only,
// not by endpoint, so the sender's rank is part of the tag; the kind bits keep user messages,
// collective steps and control notices from ever matching each other.
//
//   bits 62-63  kind: 0 point-to-point, 1 collective, 2 control, 3 heartbeat
//   bits 40-61  source rank
//   bits  0-39  p2p: the user's tag; collective: sequence (24 bits) << 16 | step (16 bits)

#include <cstdint>

namespace tessera::ucx {

enum class TagKind : std::uint64_t { p2p = 0, collective = 1, control = 2, heartbeat = 3 };

inline constexpr std::uint64_t kFullMask = ~std::uint64_t{0};
inline constexpr std::uint64_t kKindMask = std::uint64_t{3} << 62;
inline constexpr int kMaxRanks = 1 << 22;

[[nodiscard]] constexpr std::uint64_t make_tag(TagKind kind, int source,
                                               std::uint64_t payload) noexcept {
  return (static_cast<std::uint64_t>(kind) << 62) |
         ((static_cast<std::uint64_t>(source) & 0x3FFFFF) << 40) | (payload & 0xFFFFFFFFFF);
}

// A collective's messages from one source are told apart by step; messages with the same tag
// from the same source still match in send order (UCX keeps tag order per sender).
[[nodiscard]] constexpr std::uint64_t collective_tag(int source, std::uint64_t sequence,
                                                     std::uint32_t step) noexcept {
  return make_tag(TagKind::collective, source, ((sequence & 0xFFFFFF) << 16) | (step & 0xFFFF));
}

[[nodiscard]] constexpr int tag_source(std::uint64_t tag) noexcept {
  return static_cast<int>((tag >> 40) & 0x3FFFFF);
}

}  // namespace tessera::ucx
