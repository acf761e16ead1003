#include "node_group.hpp"

#include <unistd.h>

#include <thread>

#include "tessera/base/error.hpp"

namespace tessera::launch {

namespace {

constexpr const char* kPrefix = "tessera.launch/";
// How often the launcher's loop asks the store whether another node failed.
constexpr auto kPollInterval = std::chrono::milliseconds(300);

std::string node_key(int node) {
  return kPrefix + std::string("node/") + std::to_string(node);
}
std::string finished_key(int node) {
  return kPrefix + std::string("finished/") + std::to_string(node);
}
const std::string kFailureKey = std::string(kPrefix) + "failure";

std::string this_launcher() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + " pid " + std::to_string(::getpid());
}

// Sets `key` to `value` unless it holds something else; returns what it holds.
std::string agree(Store& store, const std::string& key, const std::string& value) {
  return store.compare_set(key, "", value);
}

}  // namespace

NodeGroup::NodeGroup(const std::shared_ptr<Store>& join_store, std::shared_ptr<Store> poll_store,
                     int nodes, int node_rank, int processes, std::string lost)
    : store_(std::move(poll_store)), nodes_(nodes), node_rank_(node_rank), lost_(std::move(lost)) {
  const auto me = this_launcher();
  const auto owner = agree(*join_store, node_key(node_rank), me);
  if (owner != me)
    throw ConfigError("launch: node rank " + std::to_string(node_rank) +
                      " is already taken by the launcher on " + owner +
                      " (give each host its own --node-rank; if that launcher is gone, a job "
                      "with the same token or --job-id left its keys in the store: give this "
                      "job another one)");
  const auto nnodes = agree(*join_store, kPrefix + std::string("nnodes"), std::to_string(nodes));
  if (nnodes != std::to_string(nodes))
    throw ConfigError("launch: this node says --nnodes " + std::to_string(nodes) +
                      ", another node said " + nnodes + " (every node must pass the same)");
  const auto nproc = agree(*join_store, kPrefix + std::string("nproc"), std::to_string(processes));
  if (nproc != std::to_string(processes))
    throw ConfigError("launch: this node starts " + std::to_string(processes) +
                      " workers, another node started " + nproc +
                      " (every node must pass the same -n)");
}

std::optional<NodeFailure> NodeGroup::remote_failure() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_poll_) return std::nullopt;
  next_poll_ = now + kPollInterval;
  try {
    if (!store_->check(kFailureKey)) return std::nullopt;
    const auto text = store_->get(kFailureKey, Duration(1000));
    const auto first = text.find('\n');
    const auto second = text.find('\n', first + 1);
    if (first == std::string::npos || second == std::string::npos)
      return NodeFailure{1, "another node posted a malformed failure"};
    if (std::stoi(text.substr(0, first)) == node_rank_) return std::nullopt;
    return NodeFailure{std::stoi(text.substr(first + 1, second - first - 1)),
                       "node " + text.substr(0, first) + ": " + text.substr(second + 1)};
  } catch (const std::exception& e) {
    // A tcp store is node 0's: losing it means that node is gone.
    return NodeFailure{1, "lost the job's store (" + lost_ + "): " + e.what()};
  }
}

void NodeGroup::report_failure(int exit_code, const std::string& what) noexcept {
  if (posted_) return;
  posted_ = true;
  try {
    agree(*store_, kFailureKey,
          std::to_string(node_rank_) + "\n" + std::to_string(exit_code) + "\n" + what);
  } catch (const std::exception&) {
    // The store is gone; the other nodes notice that instead.
  }
}

void NodeGroup::report_finished() noexcept {
  try {
    store_->set(finished_key(node_rank_), "1");
  } catch (const std::exception&) {
  }
}

std::string NodeGroup::wait_for_others(
    std::chrono::milliseconds limit, const std::function<bool(const std::vector<int>&)>& give_up) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (true) {
    std::vector<int> missing;
    try {
      for (int node = 0; node < nodes_; ++node) {
        if (!store_->check(finished_key(node))) missing.push_back(node);
      }
    } catch (const std::exception& e) {
      return std::string("unknown (") + e.what() + ")";
    }
    if (missing.empty() || std::chrono::steady_clock::now() >= until || give_up(missing)) {
      std::string text;
      for (const int node : missing) text += (text.empty() ? "" : ", ") + std::to_string(node);
      return text;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace tessera::launch
