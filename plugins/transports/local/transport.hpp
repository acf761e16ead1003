#pragma once
// LocalTransport: N ranks as threads of one process. Every rank thread connects through the
// same LocalTransport object; the store only carries the id under which rank 0 registered the
// group's shared state in that object.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "group.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera::local {

class LocalTransport final : public Transport {
 public:
  explicit LocalTransport(const Options& options);

 protected:
  std::unique_ptr<Communicator> do_connect(std::shared_ptr<Store> store, int rank, int size,
                                           Duration timeout) override;

 private:
  [[nodiscard]] std::shared_ptr<LocalGroup> create_group(int size, std::string& id);
  [[nodiscard]] std::shared_ptr<LocalGroup> find_group(const std::string& id, int rank);

  const Duration operation_timeout_;
  std::mutex mutex_;
  // Weak: a group lives as long as its communicators; a group whose rank 0 gave up vanishes.
  std::map<std::string, std::weak_ptr<LocalGroup>> groups_;
  std::uint64_t next_group_ = 0;
};

}  // namespace tessera::local
