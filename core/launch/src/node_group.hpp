#pragma once
// The launchers of a multi-node job, meeting through the job's store: each claims its node
// rank, they agree on the workers per node, post the first failure for the others to see, and
// report when their workers are done so that node 0 keeps the store up until everyone is.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/plugin/store.hpp"

namespace tessera::launch {

struct NodeFailure {
  int exit_code = 1;
  std::string what;  // "node 1: rank 3 exited with code 2"
};

class NodeGroup {
 public:
  // Claims `node_rank` and checks that every node starts `processes` workers. Blocking on
  // `join_store` (which retries until its own timeout while node 0 is not up yet); throws
  // ConfigError when the node rank is taken or -n disagrees. `poll_store` is used afterwards
  // from the launcher's loop, so it should give up quickly when the store is gone; `lost` says
  // what losing it likely means ("is node 0 gone?").
  NodeGroup(const std::shared_ptr<Store>& join_store, std::shared_ptr<Store> poll_store, int nodes,
            int node_rank, int processes, std::string lost);

  // A failure another node posted, checked at most every few hundred milliseconds (cheap to
  // call in a loop). A store that no longer answers counts as a failure: node 0 is gone.
  [[nodiscard]] std::optional<NodeFailure> remote_failure();

  // Posts this node's first failure unless another node's is already there. Never throws.
  void report_failure(int exit_code, const std::string& what) noexcept;

  // Marks this node's workers finished. Never throws.
  void report_finished() noexcept;

  // Node 0: waits up to `limit` for every node to report finished, polling, and stops early
  // when `give_up`, given the nodes still missing, says so (a signal; an elastic job's dead
  // node). Returns the nodes still missing ("1, 3"), empty if none.
  [[nodiscard]] std::string wait_for_others(
      std::chrono::milliseconds limit, const std::function<bool(const std::vector<int>&)>& give_up);

 private:
  std::shared_ptr<Store> store_;
  int nodes_;
  int node_rank_;
  std::string lost_;
  std::chrono::steady_clock::time_point next_poll_{};
  bool posted_ = false;
};

}  // namespace tessera::launch
