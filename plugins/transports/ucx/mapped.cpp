#include "mapped.hpp"

#include <cstring>
#include <new>
#include <string>

#include "backoff.hpp"
#include "tessera/transport_kit/staged_collectives.hpp"

namespace tessera::ucx {

namespace {

// The control page at the start of each region; the staging buffers follow.
constexpr std::size_t kControlBytes = 4096;

// Steps of connect's messages, past those of the algorithms in collectives.cpp.
constexpr std::uint32_t kRegionStep = 3u << 14;
constexpr std::uint32_t kKeyStep = 4u << 14;
constexpr std::uint32_t kVerdictStep = 5u << 14;

// Polls between two services of the engine while waiting: a service costs a UCX progress
// round; a peer on another core answers within far fewer polls.
constexpr int kPollsPerService = 256;

struct RegionInfo {
  std::uint64_t address = 0;
  std::uint64_t key_bytes = 0;
};

}  // namespace

MappedGroup::MappedGroup(ucp_context_h context, int rank, int size, std::size_t staging_bytes)
    : context_(context),
      rank_(rank),
      size_(size),
      staging_bytes_(staging_bytes),
      rkeys_(static_cast<std::size_t>(size), nullptr),
      bases_(static_cast<std::size_t>(size), nullptr),
      step_(staging::kFirstStep) {}

MappedGroup::~MappedGroup() {
  for (ucp_rkey_h rkey : rkeys_)
    if (rkey != nullptr) ucp_rkey_destroy(rkey);
  if (memory_ != nullptr) ucp_mem_unmap(context_, memory_);
}

std::unique_ptr<MappedGroup> MappedGroup::connect(Exchange& x, std::size_t chunk_bytes) {
  Engine& engine = x.engine();
  const int rank = engine.rank();
  const int size = engine.size();
  const std::size_t staging_bytes = static_cast<std::size_t>(size) * chunk_bytes;
  std::unique_ptr<MappedGroup> group(
      new MappedGroup(engine.context()->handle(), rank, size, staging_bytes));

  // This rank's region, allocated by UCX so that a memory domain able to share it (posix,
  // sysv) holds it. Failures here only mean "not mappable": the verdict round tells everyone.
  void* packed = nullptr;
  std::size_t packed_bytes = 0;
  RegionInfo mine;
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = kControlBytes + 2 * staging_bytes;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  bool ok = ucp_mem_map(group->context_, &params, &group->memory_) == UCS_OK;
  if (ok) {
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    ok = ucp_mem_query(group->memory_, &attr) == UCS_OK &&
         ucp_rkey_pack(group->context_, group->memory_, &packed, &packed_bytes) == UCS_OK;
    if (ok) {
      group->own_ = static_cast<std::byte*>(attr.address);
      group->bases_[static_cast<std::size_t>(rank)] = group->own_;
      new (group->own_) std::atomic<std::uint64_t>(staging::kInitialProgress);
      mine = {reinterpret_cast<std::uintptr_t>(attr.address), packed_bytes};
    }
  }

  // Round 1: where each region is and how long its key is; round 2: the keys.
  std::vector<RegionInfo> theirs(static_cast<std::size_t>(size));
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    x.recv(p, &theirs[static_cast<std::size_t>(p)], sizeof(RegionInfo), kRegionStep);
    x.send(p, &mine, sizeof(RegionInfo), kRegionStep);
  }
  x.wait_all();
  std::vector<std::string> keys(static_cast<std::size_t>(size));
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    auto& key = keys[static_cast<std::size_t>(p)];
    key.resize(theirs[static_cast<std::size_t>(p)].key_bytes);
    if (!key.empty()) x.recv(p, key.data(), key.size(), kKeyStep);
    if (packed_bytes != 0) x.send(p, packed, packed_bytes, kKeyStep);
  }
  x.wait_all();
  if (packed != nullptr) ucp_rkey_buffer_release(packed);

  // Map every peer's region; ucp_rkey_ptr fails where no transport to that peer can.
  for (int p = 0; p < size && ok; ++p) {
    if (p == rank) continue;
    const auto i = static_cast<std::size_t>(p);
    if (keys[i].empty()) {
      ok = false;
      break;
    }
    ok = ucp_ep_rkey_unpack(engine.worker().endpoint(p), keys[i].data(), &group->rkeys_[i]) ==
         UCS_OK;
    void* local = nullptr;
    ok = ok && ucp_rkey_ptr(group->rkeys_[i], theirs[i].address, &local) == UCS_OK;
    group->bases_[i] = static_cast<std::byte*>(local);
  }

  // Round 3: every rank's verdict; the group maps only if all of them can.
  const std::uint8_t verdict = ok ? 1 : 0;
  std::vector<std::uint8_t> verdicts(static_cast<std::size_t>(size), verdict);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    x.recv(p, &verdicts[static_cast<std::size_t>(p)], 1, kVerdictStep);
    x.send(p, &verdict, 1, kVerdictStep);
  }
  x.wait_all();
  for (const std::uint8_t v : verdicts)
    if (v == 0) return nullptr;
  return group;
}

std::atomic<std::uint64_t>& MappedGroup::progress(int rank) const {
  return *std::launder(
      reinterpret_cast<std::atomic<std::uint64_t>*>(bases_[static_cast<std::size_t>(rank)]));
}

std::byte* MappedGroup::staging(int rank, std::uint64_t step) const {
  return bases_[static_cast<std::size_t>(rank)] + kControlBytes + (step % 2) * staging_bytes_;
}

void MappedGroup::publish(std::uint64_t value) const {
  progress(rank_).store(value, std::memory_order_release);
}

void MappedGroup::await_all(Exchange& x, std::uint64_t target) {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) await_rank(x, peer, target);
  }
}

void MappedGroup::await_rank(Exchange& x, int peer, std::uint64_t target) {
  const auto& theirs = progress(peer);
  // Spin, then yield, then nap (Backoff): with more ranks than cores the peer may need this
  // very core.
  Backoff backoff;
  for (int polls = 1; theirs.load(std::memory_order_acquire) < target; ++polls) {
    if (polls % kPollsPerService == 0) {
      // Dead peers, aborts and the deadline are the engine's and the exchange's to notice.
      x.engine().service();
      x.check_waiting_for(peer);
    }
    backoff.idle();
  }
}

// The group as tessera/transport_kit/staged_collectives.hpp sees it, for one operation.
class MappedGroup::Stage {
 public:
  Stage(MappedGroup& group, Exchange& x) : group_(group), x_(x) {}
  [[nodiscard]] int rank() const noexcept { return group_.rank_; }
  [[nodiscard]] int size() const noexcept { return group_.size_; }
  std::uint64_t next_step() noexcept { return group_.step_++; }
  [[nodiscard]] std::byte* staging(int rank, std::uint64_t step) const {
    return group_.staging(rank, step);
  }
  [[nodiscard]] std::size_t staging_bytes() const noexcept { return group_.staging_bytes_; }
  void publish(std::uint64_t progress) const { group_.publish(progress); }
  void await_all(std::uint64_t target) { group_.await_all(x_, target); }
  void await_rank(int peer, std::uint64_t target) { group_.await_rank(x_, peer, target); }

 private:
  MappedGroup& group_;
  Exchange& x_;
};

void MappedGroup::all_reduce(Exchange& x, BufferView data, ReduceOp op) {
  Stage stage(*this, x);
  staging::all_reduce(stage, data, op);
}

void MappedGroup::reduce_scatter(Exchange& x, BufferView input, BufferView output, ReduceOp op) {
  Stage stage(*this, x);
  staging::reduce_scatter(stage, input, output, op);
}

void MappedGroup::all_gather(Exchange& x, BufferView input, BufferView output) {
  Stage stage(*this, x);
  staging::all_gather(stage, input, output);
}

void MappedGroup::broadcast(Exchange& x, BufferView data, int root) {
  Stage stage(*this, x);
  staging::broadcast(stage, data, root);
}

}  // namespace tessera::ucx
