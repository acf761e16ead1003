#include "trace_timeline.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "tessera/base/error.hpp"

namespace tessera::cli {

namespace {

// What a rank's thread was doing over [begin, end): kind 'F' or 'B' (a layer pass of
// micro-batch `micro_batch`, -1 when unknown), 'U' (optimizer step) or '.' (waiting).
struct Interval {
  double begin = 0;
  double end = 0;
  char kind = ' ';
  int micro_batch = -1;
};

struct Cell {
  char kind = ' ';  // ' ' idle
  int micro_batch = -1;
  bool operator==(const Cell&) const = default;
};

struct RankEvents {
  std::vector<Interval> layer_passes;  // with their stage in `stages`, same index
  std::vector<int> stages;
  std::vector<Interval> micro_batches;  // `micro_batch` spans (ddp, zero): label their layers
  std::vector<Interval> others;         // optimizer steps and waits
  std::vector<std::pair<long long, Interval>> steps;  // train_step spans by step
};

using RowKey = std::pair<long long, int>;  // rank, stage (-1: the span had none)

const nlohmann::json* arg(const nlohmann::json& event, const char* key) {
  const auto args = event.find("args");
  if (args == event.end() || !args->is_object()) return nullptr;
  const auto value = args->find(key);
  return value != args->end() && value->is_number_integer() ? &*value : nullptr;
}

nlohmann::json read_trace(const std::filesystem::path& input) {
  std::ifstream in(input, std::ios::binary);
  if (!in) {
    throw Error("trace timeline: cannot open " + input.string() + ": " + std::strerror(errno) +
                " (give the per-rank files `tessera train --trace FILE` wrote: FILE with .rankR "
                "inserted)");
  }
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("trace timeline: " + input.string() + " is not JSON (" + e.what() +
                "): give a trace `tessera train --trace` wrote, whole (a run killed by a signal "
                "writes none)");
  }
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    throw Error("trace timeline: " + input.string() +
                " is not a trace tessera wrote (no traceEvents array): give a file of "
                "`tessera train --trace` or `tessera trace merge`");
  }
  return trace;
}

// The events of every file, by rank (pid), from the rank's own thread (tid 0).
std::map<long long, RankEvents> load(const std::vector<std::filesystem::path>& inputs) {
  std::map<long long, RankEvents> ranks;
  for (const auto& input : inputs) {
    const auto trace = read_trace(input);
    std::set<long long> pids;
    for (const auto& e : trace["traceEvents"]) {
      if (!e.is_object() || !e.contains("pid") || !e["pid"].is_number_integer()) continue;
      const auto pid = e["pid"].get<long long>();
      if (pids.insert(pid).second && ranks.contains(pid)) {
        throw Error("trace timeline: " + input.string() + " holds rank " + std::to_string(pid) +
                    " again: pass each rank's file once, from one run");
      }
      if (e.value("ph", "") != "X" || e.value("tid", -1) != 0 || !e.contains("ts") ||
          !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number()) {
        continue;
      }
      const double begin = e["ts"].get<double>();
      const Interval span{begin, begin + e["dur"].get<double>()};
      const auto name = e.value("name", "");
      auto& rank = ranks[pid];
      const auto* micro_batch = arg(e, "micro_batch");
      const int k = micro_batch != nullptr ? micro_batch->get<int>() : -1;
      if (name == "forward" || name == "backward") {
        rank.layer_passes.push_back({span.begin, span.end, name == "forward" ? 'F' : 'B', k});
        const auto* stage = arg(e, "stage");
        rank.stages.push_back(stage != nullptr ? stage->get<int>() : -1);
      } else if (name == "micro_batch") {
        rank.micro_batches.push_back({span.begin, span.end, 'M', k});
      } else if (name == "optimizer_step") {
        rank.others.push_back({span.begin, span.end, 'U'});
      } else if (name.starts_with("wait ")) {
        rank.others.push_back({span.begin, span.end, '.'});
      } else if (name == "train_step") {
        const auto* step = arg(e, "step");
        if (step != nullptr) rank.steps.emplace_back(step->get<long long>(), span);
      }
    }
  }
  return ranks;
}

// An interval of `sorted` (by begin) that covers `t`, or null. Spans of one thread nest, so the
// one covering `t` may have begun before a few shorter ones that ended before `t`: look back
// past up to 16 of those (a wait inside an optimizer step), enough for the nesting tessera
// records.
const Interval* covering(const std::vector<Interval>& sorted, double t) {
  auto at = std::upper_bound(sorted.begin(), sorted.end(), t,
                             [](double time, const Interval& i) { return time < i.begin; });
  for (int looked = 0; at != sorted.begin() && looked < 16; ++looked) {
    --at;
    if (t < at->end) return &*at;
  }
  return nullptr;
}

void sort_by_begin(std::vector<Interval>& intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
}

// Milliseconds with as many decimals as the window's length needs to tell ticks apart.
std::string format_ms(double ms, double total_ms) {
  char text[32];
  const char* format = total_ms < 1     ? "%.3f"
                       : total_ms < 10  ? "%.2f"
                       : total_ms < 100 ? "%.1f"
                                        : "%.0f";
  std::snprintf(text, sizeof text, format, ms);
  return text;
}

// Consecutive layer spans of one pass (same kind and micro-batch) as one interval, so that the
// moments between two layers do not cut the pass in two on the drawing.
std::vector<Interval> whole_passes(std::vector<Interval> layers) {
  sort_by_begin(layers);
  std::vector<Interval> passes;
  for (const auto& layer : layers) {
    if (!passes.empty() && passes.back().kind == layer.kind &&
        passes.back().micro_batch == layer.micro_batch) {
      passes.back().end = std::max(passes.back().end, layer.end);
    } else {
      passes.push_back(layer);
    }
  }
  return passes;
}

}  // namespace

std::string render_timeline(const std::vector<std::filesystem::path>& inputs,
                            const TimelineOptions& options) {
  if (inputs.empty()) throw Error("trace timeline: no input files");
  if (options.width < 10) throw Error("trace timeline: --width must be at least 10");
  auto ranks = load(inputs);

  // The window: the recorded train_step spans (of the chosen step) over every rank.
  double begin = std::numeric_limits<double>::infinity();
  double end = -begin;
  std::set<long long> recorded;
  for (const auto& [pid, rank] : ranks) {
    for (const auto& [step, span] : rank.steps) {
      recorded.insert(step);
      if (options.step && *options.step != step) continue;
      begin = std::min(begin, span.begin);
      end = std::max(end, span.end);
    }
  }
  if (recorded.empty()) {
    throw Error(
        "trace timeline: the traces hold no train_step: trace the steps to draw with "
        "`tessera train --trace FILE --trace-steps FIRST:LAST`");
  }
  if (!(begin < end) && !options.step) {
    throw Error("trace timeline: the traced train steps last no time: nothing to draw");
  }
  if (!(begin < end)) {
    std::string steps;
    for (const auto s : recorded) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
    throw Error("trace timeline: --step " + std::to_string(*options.step) +
                " is not in the traces; they hold step(s) " + steps);
  }

  // One row per (rank, stage) that ran a layer pass in the chosen steps. Each rank's events are
  // taken from its own train_step spans, not from the window: the ranks' clocks differ by the
  // skew of the starting barrier, and on a loaded host a rank's previous step can reach into
  // another's window.
  std::map<RowKey, std::vector<Interval>> rows;
  for (auto& [pid, rank] : ranks) {
    std::vector<Interval> own_steps;
    for (const auto& [step, span] : rank.steps) {
      if (!options.step || *options.step == step) own_steps.push_back(span);
    }
    const auto in_own_step = [&](const Interval& event) {
      return std::any_of(own_steps.begin(), own_steps.end(), [&](const Interval& step) {
        return event.begin >= step.begin && event.begin < step.end;
      });
    };
    std::erase_if(rank.others, [&](const Interval& other) { return !in_own_step(other); });
    sort_by_begin(rank.micro_batches);
    sort_by_begin(rank.others);
    for (std::size_t i = 0; i < rank.layer_passes.size(); ++i) {
      Interval pass = rank.layer_passes[i];
      if (!in_own_step(pass)) continue;
      if (pass.micro_batch < 0) {
        if (const auto* outer = covering(rank.micro_batches, pass.begin)) {
          pass.micro_batch = outer->micro_batch;
        }
      }
      rows[{pid, rank.stages[i]}].push_back(pass);
    }
  }
  if (rows.empty()) {
    throw Error(
        "trace timeline: no forward or backward span in the chosen step(s): the "
        "strategy ran no layers through the layer runner there");
  }

  const int width = options.width;
  const double per_column = (end - begin) / width;
  const double total_ms = (end - begin) / 1000.0;
  std::vector<std::string> labels;
  std::size_t label_width = 0;
  for (const auto& [key, passes] : rows) {
    auto label = "rank " + std::to_string(key.first);
    if (key.second >= 0) label += " stage " + std::to_string(key.second);
    label_width = std::max(label_width, label.size());
    labels.push_back(std::move(label));
  }
  label_width = std::max<std::size_t>(label_width + 2, 11);  // room for "time (ms)"

  std::string out;
  const std::string window =
      options.step
          ? "step " + std::to_string(*options.step)
          : (recorded.size() == 1 ? "step " : "steps ") + std::to_string(*recorded.begin()) +
                (recorded.size() == 1 ? "" : "-" + std::to_string(*recorded.rbegin()));
  char scale[64];
  std::snprintf(scale, sizeof scale, "%.3g", per_column / 1000.0);
  out += window + ": " + format_ms(total_ms, total_ms) + " ms, " + scale + " ms per column\n";
  out +=
      "Fk forward of micro-batch k (runs on as -), Bk its backward (=), U optimizer step, "
      ". waiting for communication, blank anything else (the loss, a send) or idle\n";
  std::string ticks(label_width, ' ');
  std::string marks(label_width, ' ');
  ticks.replace(0, 9, "time (ms)");
  for (int c = 0; c < width; c += 10) {
    auto text = format_ms(c * per_column / 1000.0, total_ms);
    text.resize(10, ' ');
    ticks += text;
    marks += "|         ";
  }
  out += ticks.substr(0, ticks.find_last_not_of(' ') + 1) + "\n";
  marks.resize(label_width + static_cast<std::size_t>(width));
  out += marks.substr(0, marks.find_last_not_of(' ') + 1) + "\n";

  // Each column takes what covers most of 8 evenly spaced instants in it; a layer pass wins
  // over the waits nested in it (a tensor-parallel all-reduce inside a layer), then an
  // optimizer step, then a wait.
  constexpr int kSamples = 8;
  std::size_t row_index = 0;
  for (auto& [key, layers] : rows) {
    const auto passes = whole_passes(std::move(layers));
    const auto& others = ranks[key.first].others;
    std::vector<Cell> cells(static_cast<std::size_t>(width));
    for (int c = 0; c < width; ++c) {
      std::array<std::pair<Cell, int>, kSamples> tally{};
      int distinct = 0;
      for (int s = 0; s < kSamples; ++s) {
        const double t = begin + (c + (s + 0.5) / kSamples) * per_column;
        Cell cell;
        if (const auto* pass = covering(passes, t)) {
          cell = {pass->kind, pass->micro_batch};
        } else if (const auto* other = covering(others, t)) {
          cell = {other->kind, -1};
        }
        int i = 0;
        while (i < distinct && !(tally[i].first == cell)) ++i;
        if (i == distinct) tally[distinct++] = {cell, 0};
        ++tally[i].second;
      }
      const auto priority = [](char kind) {
        return kind == 'F' || kind == 'B' ? 3 : kind == 'U' ? 2 : kind == '.' ? 1 : 0;
      };
      int best = 0;
      for (int i = 1; i < distinct; ++i) {
        if (tally[i].second > tally[best].second ||
            (tally[i].second == tally[best].second &&
             priority(tally[i].first.kind) > priority(tally[best].first.kind))) {
          best = i;
        }
      }
      cells[c] = tally[best].first;
    }
    std::string line = labels[row_index++];
    line.resize(label_width, ' ');
    for (int c = 0; c < width;) {
      int run = 1;
      while (c + run < width && cells[c + run] == cells[c]) ++run;
      const Cell& cell = cells[c];
      const char fill = cell.kind == 'F' ? '-' : cell.kind == 'B' ? '=' : cell.kind;
      std::string text(1, cell.kind);
      if ((cell.kind == 'F' || cell.kind == 'B') && cell.micro_batch >= 0) {
        text += std::to_string(cell.micro_batch);
      }
      if (static_cast<int>(text.size()) > run) text.resize(1);
      text.resize(static_cast<std::size_t>(run), fill);
      line += text;
      c += run;
    }
    out += line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
  }
  return out;
}

}  // namespace tessera::cli
