// Two "hosts" for real: two network namespaces joined by a veth pair, each with its own
// `tessera launch` (node 0 serving the store on its side of the link), training ddp over
// ucx with UCX_TLS=tcp across the link. The result must equal a one-host run of the same job.
//
// Needs root (CAP_NET_ADMIN) and iproute2; skipped, saying why, where either is missing.
// Addresses are link-local (169.254.0.0/16) and exist only inside the two namespaces.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <regex>

#include "shell_job.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using tessera::test::contains;
using tessera::test::read_text;
using tessera::test::ShellJob;

constexpr const char* kAddress0 = "169.254.77.1";
constexpr const char* kAddress1 = "169.254.77.2";
constexpr int kStorePort = 29577;  // inside a fresh namespace: nothing else listens there
constexpr const char* kToken = "5e1f0a7c3b2d4e6f8091a2b3c4d5e6f7";

int shell(const std::string& command) {
  const int status = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Two namespaces and the veth pair between them; deleted on destruction whatever happened
// (deleting a namespace deletes its end of the pair, and with it the other end).
class LinkedNamespaces {
 public:
  // Returns nullopt with `why` filled when the namespaces cannot be made here.
  static std::optional<LinkedNamespaces> create(std::string& why) {
    if (::geteuid() != 0) {
      why = "needs root (CAP_NET_ADMIN) to create network namespaces";
      return std::nullopt;
    }
    if (shell("ip -V") != 0) {
      why = "iproute2's `ip` is not installed";
      return std::nullopt;
    }
    LinkedNamespaces ns(std::to_string(::getpid()));
    const std::string a = ns.names_[0];
    const std::string b = ns.names_[1];
    if (shell("ip netns add " + a) != 0 || shell("ip netns add " + b) != 0) {
      why = "`ip netns add` failed (no CAP_NET_ADMIN, or no network namespaces in this kernel)";
      return std::nullopt;
    }
    const std::string va = "tsv" + ns.suffix_ + "a";
    const std::string vb = "tsv" + ns.suffix_ + "b";
    const bool ok = shell("ip link add " + va + " netns " + a + " type veth peer name " + vb +
                          " netns " + b) == 0 &&
                    shell("ip -n " + a + " addr add " + kAddress0 + "/30 dev " + va) == 0 &&
                    shell("ip -n " + b + " addr add " + kAddress1 + "/30 dev " + vb) == 0 &&
                    shell("ip -n " + a + " link set " + va + " up") == 0 &&
                    shell("ip -n " + b + " link set " + vb + " up") == 0 &&
                    shell("ip -n " + a + " link set lo up") == 0 &&
                    shell("ip -n " + b + " link set lo up") == 0;
    if (!ok) {
      why = "could not wire a veth pair between the namespaces";
      return std::nullopt;
    }
    // UCX's tcp transport calls a peer unreachable over a link without carrier yet, and a
    // fresh veth pair takes a moment to get one.
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (shell("ip -n " + a + " link show " + va + " up | grep -q LOWER_UP") != 0 ||
           shell("ip -n " + a + " link show " + va + " | grep -q NO-CARRIER") == 0 ||
           shell("ip -n " + b + " link show " + vb + " | grep -q NO-CARRIER") == 0) {
      if (std::chrono::steady_clock::now() >= until) {
        why = "the veth pair between the namespaces never got a carrier";
        return std::nullopt;
      }
      std::this_thread::sleep_for(20ms);
    }
    return ns;
  }

  LinkedNamespaces(LinkedNamespaces&& other) noexcept
      : suffix_(other.suffix_), names_(other.names_), armed_(other.armed_) {
    other.armed_ = false;
  }
  LinkedNamespaces& operator=(LinkedNamespaces&&) = delete;
  ~LinkedNamespaces() {
    // Also after a failed create: whatever part was made goes.
    if (!armed_) return;
    for (const auto& name : names_) shell("ip netns del " + name);
  }

  [[nodiscard]] std::string exec(int node) const {
    return "ip netns exec " + names_[static_cast<std::size_t>(node)] + " ";
  }

 private:
  explicit LinkedNamespaces(std::string suffix)
      : suffix_(std::move(suffix)),
        names_{"tessera-" + suffix_ + "-a", "tessera-" + suffix_ + "-b"} {}

  std::string suffix_;
  std::array<std::string, 2> names_;
  bool armed_ = true;
};

// A small job whose result is fixed by its seed: the ddp reductions are in rank order.
std::string train_flags(const fs::path& summary) {
  return " train --runtime.transport=ucx --runtime.timeout=30s --train.dataset=synthetic"
         " --dataset.synthetic.samples=800 --dataset.synthetic.test_samples=200"
         " --dataset.synthetic.features=32 --dataset.synthetic.classes=4"
         " --model.mlp.layers=32,64,4 --train.optimizer=sgd --optimizer.sgd.momentum=0.9"
         " --train.batch_size=16 --train.epochs=2 --train.lr=0.05 --train.progress=off"
         " --train.seed=7 --summary=" +
         summary.string();
}

std::string field(const std::string& json, const std::string& name) {
  const std::regex pattern("\"" + name + "\": ([^,\\n]+)");
  std::smatch match;
  return std::regex_search(json, match, pattern) ? match[1].str() : std::string("(missing)");
}

class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-two-hosts-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TwoHosts, DdpOverUcxTcpAcrossAVethLinkMatchesOneHost) {
  std::string why;
  auto namespaces = LinkedNamespaces::create(why);
  if (!namespaces) GTEST_SKIP() << "two-host test skipped: " << why;

  const std::string cli = TESSERA_CLI_PATH;
  const std::string env =
      std::string("env UCX_TLS=tcp UCX_WARN_UNUSED_ENV_VARS=n TESSERA_STORE_TOKEN=") + kToken + " ";
  const std::string store = std::string(kAddress0) + ":" + std::to_string(kStorePort);
  const auto node = [&](int rank) {
    const auto log = (dir_ / ("node" + std::to_string(rank) + ".log")).string();
    return namespaces->exec(rank) + env + cli + " launch --nnodes 2 --node-rank " +
           std::to_string(rank) + " --store " + store + " --timeout 50s -n 1 -- " + cli +
           train_flags(dir_ / ("two_hosts" + std::to_string(rank) + ".json")) +
           " --runtime.store=tcp > " + log + " 2>&1";
  };
  ShellJob first(node(0));
  ShellJob second(node(1));
  const int second_code = second.wait(55s);
  const int first_code = first.wait(10s);
  ASSERT_EQ(first_code, 0) << read_text(dir_ / "node0.log");
  ASSERT_EQ(second_code, 0) << read_text(dir_ / "node1.log");

  // The same job on one host: two ranks over ucx/tcp on loopback.
  ShellJob one_host(env + "timeout 50 " + cli + " " +
                    train_flags(dir_ / "one_host.json").substr(1) + " -n 2 > " +
                    (dir_ / "one_host.log").string() + " 2>&1");
  ASSERT_EQ(one_host.wait(55s), 0) << read_text(dir_ / "one_host.log");

  const auto two = read_text(dir_ / "two_hosts0.json");
  const auto one = read_text(dir_ / "one_host.json");
  std::cout << "two hosts: test_accuracy " << field(two, "test_accuracy") << ", final_loss "
            << field(two, "final_loss") << "; one host: test_accuracy "
            << field(one, "test_accuracy") << ", final_loss " << field(one, "final_loss") << "\n";
  EXPECT_NE(field(two, "test_accuracy"), "(missing)") << two;
  EXPECT_EQ(field(two, "test_accuracy"), field(one, "test_accuracy")) << two << one;
  EXPECT_EQ(field(two, "final_loss"), field(one, "final_loss")) << two << one;
  EXPECT_EQ(field(two, "steps"), "50") << two;  // 2 epochs x 800 / (2 ranks x 16)
  EXPECT_GT(std::stod(field(two, "test_accuracy")), 0.5) << two;
}

}  // namespace
