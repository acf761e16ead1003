// Tracing (docs/tracing.md): a 2-rank ddp run over `local` writes one Chrome trace per rank with
// the spans and collectives of every recorded step, only those of the step window, nothing at
// all when tracing is off; a bad path is refused before training, and a failed run still
// leaves its trace, marked.
#include "tessera/base/trace.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ddp_strategy.hpp"
#include "ddp_test_support.hpp"
#include "mlp/mlp_model.hpp"
#include "sgd/sgd.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/base/error.hpp"
#include "tessera/runtime/trace_files.hpp"
#include "tessera/runtime/trainer.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// An X event's interval and arguments, in microseconds.
struct Interval {
  double begin = 0.0;
  double end = 0.0;
  [[nodiscard]] bool contains(const Interval& inner) const {
    return inner.begin >= begin - 1e-3 && inner.end <= end + 1e-3;
  }
};

Interval interval_of(const json& event) {
  const double ts = event.at("ts").get<double>();
  return {ts, ts + event.at("dur").get<double>()};
}

json read_json(const fs::path& file) {
  std::ifstream in(file);
  EXPECT_TRUE(in.good()) << file;
  return json::parse(in);
}

std::vector<json> events_named(const json& trace, const std::string& name,
                               const std::string& phase = "X") {
  std::vector<json> out;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == phase && e.value("name", "") == name) out.push_back(e);
  }
  return out;
}

class Tracing : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-trace-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    mlp::MlpConfig sizes;
    sizes.sizes = {16, 32, 4};
    model_ = std::make_shared<mlp::MlpModel>(sizes);
    synthetic::SyntheticConfig data;
    data.samples = 256;
    data.test_samples = 64;
    data.features = 16;
    data.classes = 4;
    data_ = std::make_shared<synthetic::SyntheticDataset>(data);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static TrainerOptions options(std::int64_t max_steps) {
    TrainerOptions o;
    o.epochs = 1;
    o.max_steps = max_steps;
    o.batch_size = 16;
    o.schedule.base_lr = 0.05F;
    o.seed = 3;
    o.progress = ProgressMode::off;
    return o;
  }

  // Trains over 2 local ranks; `provider` (if any) is every rank's world provider.
  void train(const TrainerOptions& o, const ChangePlan& provider = {}) {
    testing::run_ranks(2, [&](std::shared_ptr<Communicator> world) {
      TrainerComponents parts{
          world,
          model_,
          std::make_shared<sgd::SgdOptimizer>(sgd::SgdConfig{0.9F, 0.0F, 0.0F, false}),
          data_,
          std::make_shared<ddp::DdpStrategy>(ddp::DdpConfig{}),
          "ddp"};
      Trainer trainer(o, parts);
      if (provider) trainer.set_world_plan(provider);
      (void)trainer.run(false);
    });
  }

  fs::path dir_;
  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Dataset> data_;
};

// Within each thread's track, two complete events are disjoint or one holds the other.
void expect_proper_nesting(const json& trace) {
  std::map<int, std::vector<Interval>> by_thread;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "X") by_thread[e.at("tid").get<int>()].push_back(interval_of(e));
  }
  for (auto& [tid, spans] : by_thread) {
    std::sort(spans.begin(), spans.end(), [](const Interval& a, const Interval& b) {
      return a.begin < b.begin || (a.begin == b.begin && a.end > b.end);
    });
    std::vector<Interval> open;
    for (const auto& s : spans) {
      while (!open.empty() && open.back().end <= s.begin + 1e-3) open.pop_back();
      if (!open.empty()) {
        ASSERT_TRUE(open.back().contains(s))
            << "tid " << tid << ": [" << s.begin << ", " << s.end << ") overlaps ["
            << open.back().begin << ", " << open.back().end << ")";
      }
      open.push_back(s);
    }
  }
}

TEST_F(Tracing, TwoRankDdpTraceHoldsEveryLayerCollectiveAndUpdateOfEachStep) {
  auto o = options(3);
  o.trace.file = dir_ / "run.json";
  train(o);

  const std::size_t layers = model_->layer_count();
  std::vector<std::size_t> collectives_per_step[2];
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json trace = read_json(dir_ / ("run.rank" + std::to_string(rank) + ".json"));
    EXPECT_EQ(trace.at("otherData").at("status"), "complete");
    EXPECT_EQ(trace.at("otherData").at("rank"), rank);
    EXPECT_EQ(trace.at("otherData").at("dropped_events"), 0);
    for (const auto& e : trace.at("traceEvents")) ASSERT_EQ(e.at("pid"), rank) << e;
    const auto names = events_named(trace, "process_name", "M");
    ASSERT_EQ(names.size(), 1U);
    EXPECT_EQ(names[0].at("args").at("name"), "rank " + std::to_string(rank));
    expect_proper_nesting(trace);

    // Every async begin has one end of the same name and id.
    std::map<std::int64_t, std::string> begun;
    std::map<std::int64_t, double> begun_at;
    std::map<std::int64_t, double> ended_at;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.at("ph") == "b") {
        ASSERT_TRUE(begun.emplace(e.at("id").get<std::int64_t>(), e.at("name")).second) << e;
        begun_at[e.at("id").get<std::int64_t>()] = e.at("ts").get<double>();
      }
    }
    for (const auto& e : trace.at("traceEvents")) {
      if (e.at("ph") != "e") continue;
      const auto id = e.at("id").get<std::int64_t>();
      ASSERT_EQ(begun.count(id), 1U) << e;
      EXPECT_EQ(begun[id], e.at("name"));
      EXPECT_EQ(e.at("args").at("failed"), 0) << e;
      ASSERT_TRUE(ended_at.emplace(id, e.at("ts").get<double>()).second) << "two ends: " << e;
    }
    EXPECT_EQ(ended_at.size(), begun.size());

    const auto steps = events_named(trace, "step");
    ASSERT_EQ(steps.size(), 3U);
    for (const auto& step : steps) {
      const Interval in = interval_of(step);
      const auto s = step.at("args").at("step").get<int>();
      SCOPED_TRACE("step " + std::to_string(s));
      for (const char* pass : {"forward", "backward"}) {
        std::vector<int> seen;
        for (const auto& e : events_named(trace, pass)) {
          if (in.contains(interval_of(e))) seen.push_back(e.at("args").at("layer").get<int>());
        }
        std::sort(seen.begin(), seen.end());
        std::vector<int> each(layers);
        for (std::size_t l = 0; l < layers; ++l) each[l] = static_cast<int>(l);
        EXPECT_EQ(seen, each) << pass;
      }
      std::size_t updates = 0;
      for (const auto& e : events_named(trace, "optimizer_step")) {
        if (in.contains(interval_of(e))) ++updates;
      }
      EXPECT_GE(updates, 1U);
      // The step's collectives begin and end inside it (ddp waits for all of them).
      std::size_t collectives = 0;
      for (const auto& [id, name] : begun) {
        if (begun_at[id] >= in.begin && begun_at[id] <= in.end) {
          ++collectives;
          EXPECT_EQ(name, "all_reduce");
          EXPECT_LE(ended_at[id], in.end + 1e-3) << name << " " << id;
        }
      }
      EXPECT_GE(collectives, 2U);  // the gradient bucket and the loss
      collectives_per_step[rank].push_back(collectives);
    }
    EXPECT_EQ(events_named(trace, "setup").size(), 1U);
    EXPECT_GE(events_named(trace, "evaluate").size(), 1U);
  }
  EXPECT_EQ(collectives_per_step[0], collectives_per_step[1]);
}

TEST_F(Tracing, OnlyTheStepWindowIsRecorded) {
  auto o = options(6);
  o.trace.file = dir_ / "run.json";
  o.trace.set_steps("2:4");
  train(o);
  const json trace = read_json(dir_ / "run.rank1.json");
  std::set<int> steps;
  for (const auto& e : events_named(trace, "step"))
    steps.insert(e.at("args").at("step").get<int>());
  EXPECT_EQ(steps, (std::set<int>{2, 3, 4}));
  // No training forward outside the window: each lies in a recorded step or an evaluation.
  std::vector<Interval> holders;
  for (const char* name : {"step", "evaluate"}) {
    for (const auto& e : events_named(trace, name)) holders.push_back(interval_of(e));
  }
  for (const auto& e : events_named(trace, "forward")) {
    const Interval f = interval_of(e);
    EXPECT_TRUE(std::any_of(holders.begin(), holders.end(), [&](const Interval& h) {
      return h.contains(f);
    })) << e;
  }
  EXPECT_EQ(trace.at("otherData").at("first_step"), 2);
  EXPECT_EQ(trace.at("otherData").at("last_step"), 4);
}

TEST_F(Tracing, TracingOffRecordsNothingAndWritesNothing) {
  auto o = options(2);
  ASSERT_TRUE(o.trace.file.empty());  // the default
  std::atomic<int> calls{0};
  std::atomic<int> with_recorder{0};
  train(o, [&](std::int64_t) -> std::optional<PlannedChange> {
    // Runs inside Trainer::run, on each rank's thread.
    ++calls;
    if (trace::current() != nullptr) ++with_recorder;
    return std::nullopt;
  });
  EXPECT_EQ(calls.load(), 4);
  EXPECT_EQ(with_recorder.load(), 0);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(Tracing, AnUnwritablePathIsRefusedBeforeTrainingNamingTheFlag) {
  auto o = options(2);
  o.trace.file = dir_ / "missing-folder" / "run.json";
  try {
    train(o);
    FAIL() << "a trace in a folder that does not exist was accepted";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--trace"), std::string::npos) << message;
    EXPECT_NE(message.find((dir_ / "missing-folder" / "run.json").string()), std::string::npos)
        << message;
  }
  EXPECT_FALSE(fs::exists(dir_ / "missing-folder"));
}

TEST_F(Tracing, AFailedRunLeavesItsTraceMarkedFailed) {
  auto o = options(5);
  o.trace.file = dir_ / "run.json";
  EXPECT_THROW(train(o,
                     [](std::int64_t steps_done) -> std::optional<PlannedChange> {
                       if (steps_done == 2) throw std::runtime_error("provider gave up at 2");
                       return std::nullopt;
                     }),
               std::runtime_error);
  for (int rank = 0; rank < 2; ++rank) {
    const json trace = read_json(dir_ / ("run.rank" + std::to_string(rank) + ".json"));
    EXPECT_EQ(trace.at("otherData").at("status"), "failed");
    EXPECT_EQ(trace.at("otherData").at("error"), "provider gave up at 2");
    EXPECT_EQ(events_named(trace, "step").size(), 2U);  // the second ends in the failure
    EXPECT_EQ(events_named(trace, "run_failed", "i").size(), 1U);
    EXPECT_FALSE(fs::exists(dir_ / ("run.rank" + std::to_string(rank) + ".json.tmp")));
  }
}

TEST_F(Tracing, MergeJoinsEveryRankAndRefusesARankTwice) {
  auto o = options(1);
  o.trace.file = dir_ / "run.json";
  train(o);
  const auto r0 = dir_ / "run.rank0.json";
  const auto r1 = dir_ / "run.rank1.json";
  merge_trace_files({r0, r1}, dir_ / "merged.json");
  const json merged = read_json(dir_ / "merged.json");
  std::set<int> pids;
  for (const auto& e : merged.at("traceEvents")) pids.insert(e.at("pid").get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(merged.at("traceEvents").size(),
            read_json(r0).at("traceEvents").size() + read_json(r1).at("traceEvents").size());
  EXPECT_EQ(merged.at("otherData").at("ranks").size(), 2U);
  EXPECT_THROW(merge_trace_files({r0, r0}, dir_ / "twice.json"), Error);
  EXPECT_FALSE(fs::exists(dir_ / "twice.json"));
}

TEST(TraceOptions, StepWindowsParseOrAreRefused) {
  TraceOptions t;
  t.set_steps("5:");
  EXPECT_EQ(t.first_step, 5);
  EXPECT_EQ(t.last_step, TraceOptions::kNoLastStep);
  EXPECT_TRUE(t.covers(1'000'000));
  EXPECT_FALSE(t.covers(4));
  t.set_steps("3:3");
  EXPECT_TRUE(t.covers(3));
  EXPECT_FALSE(t.covers(4));
  for (const char* bad : {"", "3", "0:4", "4:3", "a:b", "1:2x", ":5", "-1:2"}) {
    EXPECT_THROW(t.set_steps(bad), ConfigError) << bad;
  }
  EXPECT_EQ(trace_file_for_rank("out/run.json", 3), fs::path("out/run.rank3.json"));
  EXPECT_EQ(trace_file_for_rank("run", 0), fs::path("run.rank0"));
}

TEST(TraceRecorder, KeepsAtMostItsCapAndEveryEndOfAKeptBegin) {
  trace::Recorder recorder(0, 1000);
  recorder.set_active(true);
  const trace::ScopedRecorder installed(&recorder);
  const auto id = recorder.begin_async("op", "comm", {});
  ASSERT_NE(id, 0U);
  for (int i = 0; i < 2000; ++i) {
    const trace::Span span("work", "test", {{"i", i}});
  }
  EXPECT_EQ(recorder.event_count(), 1000U);
  EXPECT_EQ(recorder.dropped_count(), 1001U);
  EXPECT_EQ(recorder.begin_async("late", "comm", {}), 0U);  // full: not begun, not ended
  recorder.end_async("op", "comm", id, {});
  EXPECT_EQ(recorder.event_count(), 1001U);
}

TEST(TraceRecorder, EachThreadRecordsIntoItsOwnInstalledRecorder) {
  trace::Recorder a(0);
  trace::Recorder b(1);
  a.set_active(true);
  b.set_active(true);
  auto record = [](trace::Recorder* recorder, int spans) {
    const trace::ScopedRecorder installed(recorder);
    for (int i = 0; i < spans; ++i) const trace::Span span("work", "test");
  };
  std::thread ta(record, &a, 3);
  std::thread tb(record, &b, 5);
  ta.join();
  tb.join();
  EXPECT_EQ(a.event_count(), 3U);
  EXPECT_EQ(b.event_count(), 5U);
  // Not installed on this thread, inactive, or gone: nothing is recorded.
  EXPECT_EQ(trace::current(), nullptr);
  { const trace::Span span("work", "test"); }
  a.set_active(false);
  record(&a, 4);
  EXPECT_EQ(a.event_count(), 3U);
  EXPECT_EQ(b.event_count(), 5U);
}

}  // namespace
}  // namespace tessera
