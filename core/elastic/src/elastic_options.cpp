#include "tessera/elastic/elastic_options.hpp"

#include <algorithm>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

const SectionSchemas& elastic_sections() {
  // docs/training.md, "Elastic training", describes each option.
  static const SectionSchemas sections = {
      {"elastic",
       {
           {"enabled",
            OptionType::boolean,
            "false",
            "train elastically: workers may die or join mid-run and the survivors go on from "
            "memory between min_workers and max_workers, with the strategy [train] strategy "
            "names (ddp, zero1, zero2 or zero3)",
            {}},
           {"min_workers",
            OptionType::integer,
            "1",
            "fewer workers left: wait join_timeout for newcomers, then stop with an error",
            {},
            "1",
            "65536"},
           {"max_workers",
            OptionType::integer,
            "0",
            "newcomers beyond it wait for room (0: the number of workers the run starts with)",
            {},
            "0",
            "65536"},
           {"max_restarts",
            OptionType::integer,
            "0",
            "tessera train -n: failed workers the launcher replaces, in all (each replacement "
            "joins the running job as a newcomer)",
            {},
            "0",
            "100000"},
           {"copies",
            OptionType::integer,
            "1",
            "copies of each rank's state kept in the memory of the next ranks of a ring that "
            "visits the nodes in turn, another node's first (0: none; a failure then falls back "
            "to the newest checkpoint)",
            {},
            "0",
            "16"},
           {"copy_every",
            OptionType::integer,
            "1",
            "steps between refreshes of those copies: a failure redoes at most this many steps",
            {},
            "1",
            std::nullopt},
           {"share_copies_on_host",
            OptionType::boolean,
            "true",
            "a copy for a rank on the same host is kept in shared memory that rank opens (it "
            "outlives the process that wrote it) instead of being sent; false sends every copy",
            {}},
           {"heartbeat",
            OptionType::duration,
            "500ms",
            "how often each worker renews its lease in the store",
            {},
            "10ms",
            std::nullopt},
           {"failure_timeout",
            OptionType::duration,
            "5s",
            "a worker that renewed no lease for this long is counted gone (a dead process is "
            "seen at once when its launcher reports it)",
            {},
            "100ms",
            // The longest lease any store grants (kMaxStoreDuration, 30 days); a store may
            // bound it further (etcd: whole seconds), which it says when the run starts.
            "720h"},
           {"join_timeout",
            OptionType::duration,
            "60s",
            "below min_workers, how long to wait for newcomers before stopping",
            {},
            "0ms",
            std::nullopt},
       }}};
  return sections;
}

bool is_elastic(const Config& config) {
  return config.has_section("elastic") && config.section("elastic").get_bool("enabled");
}

ElasticOptions ElasticOptions::from(const Options& section) {
  ElasticOptions o;
  o.min_workers = static_cast<int>(section.get_int("min_workers"));
  o.max_workers = static_cast<int>(section.get_int("max_workers"));
  o.copies = static_cast<int>(section.get_int("copies"));
  o.copy_every = section.get_int("copy_every");
  o.share_copies_on_host = section.get_bool("share_copies_on_host");
  o.heartbeat = section.get_duration("heartbeat");
  o.failure_timeout = section.get_duration("failure_timeout");
  o.join_timeout = section.get_duration("join_timeout");
  if (o.max_workers != 0 && o.max_workers < o.min_workers) {
    throw ConfigError("[elastic] max_workers = " + std::to_string(o.max_workers) +
                      " is below min_workers = " + std::to_string(o.min_workers) +
                      "; raise max_workers (--max-workers) or lower min_workers (--min-workers)");
  }
  if (o.heartbeat >= o.failure_timeout) {
    throw ConfigError("[elastic] heartbeat (" + std::to_string(o.heartbeat.count()) +
                      " ms) must be shorter than failure_timeout (" +
                      std::to_string(o.failure_timeout.count()) +
                      " ms): a worker renews its lease every heartbeat and is counted gone "
                      "after failure_timeout without a renewal");
  }
  return o;
}

namespace {

// "cfg.ini:12: [elastic] max_workers = 2", or without the place for a default.
std::string where(const Config& config, const char* section, const char* key) {
  const auto& origin = config.origin(section, key).text;
  return (origin == "default" ? std::string() : origin + ": ") + "[" + section + "] " + key +
         " = " + config.section(section).get_string(key);
}

}  // namespace

void check_elastic_world_size(const Config& config, int workers) {
  const auto options = ElasticOptions::from(config.section("elastic"));
  if (options.max_workers != 0 && options.max_workers < workers) {
    throw ConfigError(where(config, "elastic", "max_workers") + " is below the " +
                      std::to_string(workers) +
                      " workers started together ([runtime] world_size, -n): raise it "
                      "(--max-workers) or start fewer workers");
  }
}

void check_elastic_run(const Config& config, const RunFigures& figures) {
  if (!is_elastic(config)) return;
  const int workers = figures.world_size;
  check_elastic_world_size(config, workers);
  const auto options = ElasticOptions::from(config.section("elastic"));
  if (options.min_workers > workers) {
    throw ConfigError(where(config, "elastic", "min_workers") + " is above the " +
                      std::to_string(workers) +
                      " workers the run starts with ([runtime] world_size, -n): lower it "
                      "(--min-workers) or start more workers");
  }
  if (figures.data_parallel_size != workers) {
    throw ConfigError(where(config, "train", "strategy") + " deals the batch over " +
                      std::to_string(figures.data_parallel_size) + " data-parallel replicas of " +
                      std::to_string(workers) +
                      " ranks (tensor or pipeline groups): an elastic run regroups any number of "
                      "survivors, so every rank must be a replica of its own; train elastically "
                      "with ddp, zero1, zero2 or zero3");
  }
  if (config.section("runtime").get_string("device") == "cuda") {
    throw ConfigError(where(config, "runtime", "device") +
                      ", but an elastic run ([elastic] enabled = true) keeps the copies of the "
                      "state in host memory; train elastic runs with device = cpu");
  }
}

}  // namespace tessera
