// The worker `tessera launch` starts in the multi-process tests. argv[1] picks the behaviour:
//   rendezvous        every rank joins the launcher's store (TESSERA_STORE_URL), says which,
//                     counts itself in, and waits for all
//   print             rank lines on stdout and stderr, the last stdout line without a newline
//   exit RANK CODE    rank RANK exits with CODE at once; the others wait to be stopped
//   sigkill RANK      rank RANK kills itself with SIGKILL; the others wait to be stopped
//   sleep             print "ready" and wait to be stopped
//   stop_self RANK    rank RANK prints "stopping PID" and stops itself (SIGSTOP); the others
//                     print "ready"; all then wait to be stopped
//   last_fails ID CODE FILE
//                     the worker whose TESSERA_WORKER_ID is ID prints "ready", waits for FILE
//                     to exist and exits with CODE; every other exits 0 at once
//   leased_stop ID MS each worker holds a liveness key in the store as an elastic member does
//                     (membership/workers/<its id>, bound to a 1 s lease renewed every 100 ms);
//                     the one whose TESSERA_WORKER_ID is ID then stops itself (SIGSTOP), the
//                     others revoke their lease after MS ms and exit 0
//   stubborn          ignore SIGTERM, print "ready" and wait to be stopped
//   crash_beside RANK CODE FILE
//                     print "ready PID", wait for FILE to exist; then rank RANK exits with
//                     CODE and every other rank crashes with SIGSEGV
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "tessera/base/error.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/runtime/store_url.hpp"
#include "tessera/transport_kit/launch_env.hpp"

namespace {

using namespace std::chrono_literals;

// Never forever: a worker the launcher fails to stop still ends, and the test sees the delay.
void wait_to_be_stopped() {
  std::this_thread::sleep_for(30s);
  std::exit(0);
}

// The launcher's store as TESSERA_STORE_URL names it (tcp, etcd or file); the tcp store takes
// its token from TESSERA_STORE_TOKEN.
std::shared_ptr<tessera::Store> job_store(const tessera::LaunchInfo& info,
                                          tessera::PluginRegistry& registry) {
  registry.scan(tessera::PluginRegistry::default_search_path());
  const auto url = tessera::parse_store_url(registry, info.store_url, "TESSERA_STORE_URL");
  const auto defaults = registry.default_options(tessera::PluginKind::store, url.store);
  auto values = defaults.values();
  for (const auto& [key, value] : url.plugin_options()) values[key] = value;
  return registry.create<tessera::Store>(
      url.store, tessera::Options(defaults.section(), defaults.specs(), values));
}

int rendezvous(const tessera::LaunchInfo& info) {
  tessera::PluginRegistry registry;
  const auto store = job_store(info, registry);
  // The URL as the store plugin reads it back (its canonical text).
  std::cout << "store "
            << tessera::parse_store_url(registry, info.store_url, "TESSERA_STORE_URL").text()
            << "\n";
  const auto arrived = store->add("arrived", 1);
  store->set("rank/" + std::to_string(info.rank), std::to_string(::getpid()));
  if (arrived == info.world_size) store->set("everyone", "here");
  (void)store->get("everyone", 20s);
  for (int r = 0; r < info.world_size; ++r) (void)store->get("rank/" + std::to_string(r), 20s);
  std::cout << "rank " << info.rank << " of " << info.world_size << " (local " << info.local_rank
            << " of " << info.local_world_size << ") agreed on " << store->get("arrived", 20s)
            << " arrivals\n";
  return 0;
}

// Holds a liveness key as an elastic member does, renewing its lease from this thread; the
// worker named `stopped_id` stops itself once the key is there, the others leave after `run`.
int leased_stop(const tessera::LaunchInfo& info, const std::string& stopped_id,
                std::chrono::milliseconds run) {
  tessera::PluginRegistry registry;
  const auto store = job_store(info, registry);
  const std::string id = std::getenv("TESSERA_WORKER_ID");
  const auto lease = store->grant_lease(tessera::Duration(1000));
  store->set("membership/workers/" + id, "alive", lease);
  if (id == stopped_id) {
    std::cout << "stopping " << ::getpid() << std::endl;
    ::raise(SIGSTOP);
    wait_to_be_stopped();
  }
  std::cout << "worker " << id << " holds its lease" << std::endl;
  const auto until = std::chrono::steady_clock::now() + run;
  while (std::chrono::steady_clock::now() < until) {
    store->keep_alive(lease);
    std::this_thread::sleep_for(100ms);  // the renewal pace, as an elastic heartbeat
  }
  store->revoke_lease(lease);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto info = tessera::launch_info_from_environment();
    const std::string mode = argc > 1 ? argv[1] : "";
    const auto target = [&] { return argc > 2 && std::atoi(argv[2]) == info.rank; };
    if (mode == "rendezvous") return rendezvous(info);
    if (mode == "print") {
      std::cout << "first line of rank " << info.rank << "\nsecond line\nno newline at the end"
                << std::flush;
      std::cerr << "on stderr from rank " << info.rank << "\n";
      return 0;
    }
    if (mode == "exit" && argc > 3) {
      if (target()) return std::atoi(argv[3]);
      wait_to_be_stopped();
    }
    if (mode == "sigkill") {
      if (target()) {
        std::this_thread::sleep_for(200ms);  // let the others start their wait
        ::raise(SIGKILL);
      }
      wait_to_be_stopped();
    }
    if (mode == "crash_beside" && argc > 4) {
      const rlimit no_core{0, 0};
      ::setrlimit(RLIMIT_CORE, &no_core);
      std::cout << "ready " << ::getpid() << std::endl;
      for (int i = 0; i < 3000 && ::access(argv[4], F_OK) != 0; ++i)
        std::this_thread::sleep_for(10ms);
      if (target()) return std::atoi(argv[3]);
      ::raise(SIGSEGV);
    }
    // An elastic job's worker: the one whose TESSERA_WORKER_ID is argv[2] exits with code 3
    // at once; every other (its replacements too) says who it is and exits 0 after argv[3] ms.
    if (mode == "elastic" && argc > 3) {
      const char* id = std::getenv("TESSERA_WORKER_ID");
      if (id != nullptr && std::string(id) == argv[2]) return 3;
      std::cout << "worker " << (id != nullptr ? id : "?") << " ran" << std::endl;
      // A worker that runs this long, as the test asks.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(argv[3])));
      return 0;
    }
    if (mode == "stop_self" && argc > 2) {
      if (target()) {
        std::cout << "stopping " << ::getpid() << std::endl;
        ::raise(SIGSTOP);
      } else {
        std::cout << "ready" << std::endl;
      }
      wait_to_be_stopped();
    }
    if (mode == "last_fails" && argc > 4) {
      const char* id = std::getenv("TESSERA_WORKER_ID");
      if (id == nullptr || std::string(id) != argv[2]) return 0;
      std::cout << "ready" << std::endl;
      for (int i = 0; i < 3000 && ::access(argv[4], F_OK) != 0; ++i)
        std::this_thread::sleep_for(10ms);  // a deadline poll on the file the test creates
      return std::atoi(argv[3]);
    }
    if (mode == "leased_stop" && argc > 3)
      return leased_stop(info, argv[2], std::chrono::milliseconds(std::atoi(argv[3])));
    if (mode == "sleep" || mode == "stubborn") {
      if (mode == "stubborn") ::signal(SIGTERM, SIG_IGN);
      std::cout << "ready" << std::endl;
      wait_to_be_stopped();
    }
    std::cerr << "launch_test_worker: unknown mode '" << mode << "'\n";
    return 64;
  } catch (const tessera::Error& e) {
    std::cerr << "launch_test_worker: " << e.what() << "\n";
    return 70;
  }
}
