#include "tessera/runtime/trace_files.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

std::filesystem::path trace_file_for_rank(const std::filesystem::path& file, int rank) {
  auto name = file.stem();
  name += ".rank" + std::to_string(rank);
  name += file.extension();
  return file.parent_path() / name;
}

void check_trace_destination(const std::filesystem::path& file, int rank) {
  auto probe = trace_file_for_rank(file, rank);
  probe += ".tmp";
  std::ofstream out(probe, std::ios::binary | std::ios::trunc);
  if (!out) {
    const int error = errno;
    throw ConfigError("[train] trace_file (--trace) " + file.string() + ": cannot create " +
                      probe.string() + " (" + std::strerror(error) +
                      "): give a file in an existing folder this process may write");
  }
  out.close();
  std::error_code ignored;
  std::filesystem::remove(probe, ignored);
}

void merge_trace_files(const std::vector<std::filesystem::path>& inputs,
                       const std::filesystem::path& output) {
  if (inputs.empty()) throw Error("trace merge: no input files");
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json ranks = nlohmann::json::array();
  std::set<std::int64_t> seen;
  for (const auto& input : inputs) {
    std::ifstream in(input, std::ios::binary);
    if (!in) {
      throw Error("trace merge: cannot open " + input.string() + ": " + std::strerror(errno));
    }
    nlohmann::json trace;
    try {
      trace = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error("trace merge: " + input.string() + " is not JSON (" + e.what() + ")");
    }
    if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array() ||
        !trace.contains("otherData") || !trace["otherData"].is_object() ||
        !trace["otherData"].contains("rank") || !trace["otherData"]["rank"].is_number_integer()) {
      throw Error("trace merge: " + input.string() +
                  " is not a trace tessera wrote (no traceEvents, or no otherData.rank)");
    }
    const auto rank = trace["otherData"]["rank"].get<std::int64_t>();
    if (!seen.insert(rank).second) {
      throw Error("trace merge: " + input.string() + " is a second trace of rank " +
                  std::to_string(rank) + ": pass each rank's file once, from one run");
    }
    for (auto& event : trace["traceEvents"]) events.push_back(std::move(event));
    ranks.push_back(std::move(trace["otherData"]));
  }
  const nlohmann::json merged = {{"traceEvents", std::move(events)},
                                 {"displayTimeUnit", "ms"},
                                 {"otherData", {{"ranks", std::move(ranks)}}}};
  auto temporary = output;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (out) out << merged.dump() << '\n';
    if (!out || !out.flush()) {
      const int error = errno;
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw Error("trace merge: cannot write " + temporary.string() + ": " + std::strerror(error));
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, output, ec);
  if (ec) {
    throw Error("trace merge: cannot rename " + temporary.string() + " to " + output.string() +
                ": " + ec.message());
  }
}

}  // namespace tessera
