#include "transport.hpp"

#include "communicator.hpp"
#include "tessera/base/error.hpp"

namespace tessera::local {

namespace {
constexpr const char* kConnectCounter = "tessera.local/connects";
constexpr const char* kGroupKey = "tessera.local/group/";
}  // namespace

LocalTransport::LocalTransport(const Options& options)
    : operation_timeout_(options.get_duration("timeout")) {
  TESSERA_CHECK(operation_timeout_.count() > 0, "[transport.local] timeout must be positive");
}

std::shared_ptr<LocalGroup> LocalTransport::create_group(int size, std::string& id) {
  std::lock_guard lock(mutex_);
  std::erase_if(groups_, [](const auto& entry) { return entry.second.expired(); });
  auto group = std::make_shared<LocalGroup>(size);
  id = std::to_string(next_group_++);
  groups_.emplace(id, group);
  return group;
}

std::shared_ptr<LocalGroup> LocalTransport::find_group(const std::string& id, int rank) {
  std::lock_guard lock(mutex_);
  const auto it = groups_.find(id);
  auto group = it == groups_.end() ? nullptr : it->second.lock();
  if (!group) {
    throw TransportError("local: rank " + std::to_string(rank) + " found group " + id +
                             " in the store but not in this Transport object: every rank of a "
                             "local world must connect through the same Transport object, and "
                             "rank 0 must still be connecting",
                         0, "connect");
  }
  return group;
}

// Ranks take tickets from a store counter: the k-th world connected through one store gets
// tickets [k*size + 1, (k+1)*size], so a store can be reused for successive worlds without a
// fast rank picking up the previous world's group id.
std::unique_ptr<Communicator> LocalTransport::do_connect(std::shared_ptr<Store> store, int rank,
                                                         int size, Duration timeout) {
  const OpContext context{"connect", rank, deadline_after(timeout), timeout};
  const std::int64_t ticket = store->add(kConnectCounter, 1);
  const std::string key = kGroupKey + std::to_string((ticket - 1) / size);

  std::shared_ptr<LocalGroup> group;
  if (rank == 0) {
    std::string id;
    group = create_group(size, id);
    store->set(key, id);
  } else {
    std::string id;
    try {
      id = store->get(key, timeout);
    } catch (const Timeout&) {
      throw Timeout("local: connect of rank " + std::to_string(rank) + " of " +
                    std::to_string(size) + " timed out after " + std::to_string(timeout.count()) +
                    " ms; rank(s) never arrived: 0");
    }
    group = find_group(id, rank);
  }
  TESSERA_CHECK(group->size() == size, "local: rank " + std::to_string(rank) +
                                           " connects with size " + std::to_string(size) +
                                           " but rank 0 used " + std::to_string(group->size()));
  group->join(context);
  return std::make_unique<LocalCommunicator>(std::move(group), rank, operation_timeout_);
}

}  // namespace tessera::local
