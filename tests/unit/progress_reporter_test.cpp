// The metrics file across a change of the reporting rank: an elastic run's rank 0 that dies
// after a step completed everywhere, before it wrote that step's record, leaves the record to
// the new rank 0 (every rank saw the same step: loss, norm and samples are reduced), so every
// step of the run is in the file once.
#include "progress_reporter.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::trainer {
namespace {

namespace fs = std::filesystem;

StepReport step(std::int64_t n) {
  StepReport r;
  r.step = n;
  r.batch = static_cast<std::size_t>(n);
  r.batches = 10;
  r.samples = 48;
  r.learning_rate = 0.1F;
  r.stats.loss = 2.0 / static_cast<double>(n);
  return r;
}

struct Record {
  std::int64_t step;
  bool recovered;
  bool redone;
  friend bool operator==(const Record&, const Record&) = default;
};

std::vector<Record> records(const fs::path& file) {
  std::vector<Record> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    out.push_back(
        {j["step"].get<std::int64_t>(), j.value("recovered", false), j.value("redone", false)});
  }
  return out;
}

TEST(ProgressReporter, ASuccessorWritesTheStepItsDeadPredecessorCompletedButDidNotRecord) {
  const fs::path file =
      fs::temp_directory_path() / ("tessera-progress-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(file);
  {
    ProgressReporter old_rank0(ProgressMode::off, file, true, 10, 1);
    ProgressReporter survivor(ProgressMode::off, file, false, 10, 1);
    for (std::int64_t s = 1; s <= 3; ++s) {
      old_rank0.step(step(s));
      survivor.step(step(s));
    }
    survivor.step(step(4));  // rank 0 died before its record of step 4
    survivor.hand_over(true);
    survivor.step(step(5));
    survivor.finish();
  }
  const std::vector<Record> expected{
      {1, false, false}, {2, false, false}, {3, false, false}, {4, true, false}, {5, false, false}};
  EXPECT_EQ(records(file), expected);
  fs::remove(file);
}

TEST(ProgressReporter, ASuccessorWritesNothingTwiceWhenItsPredecessorRecordedTheStep) {
  const fs::path file =
      fs::temp_directory_path() / ("tessera-progress-2-" + std::to_string(::getpid()) + ".jsonl");
  fs::remove(file);
  {
    ProgressReporter old_rank0(ProgressMode::off, file, true, 10, 1);
    ProgressReporter survivor(ProgressMode::off, file, false, 10, 1);
    for (std::int64_t s = 1; s <= 4; ++s) {
      old_rank0.step(step(s));
      survivor.step(step(s));
    }
    survivor.hand_over(true);
    // A world that goes on from the step before (copies a step behind) trains step 4 again.
    survivor.step(step(4));
    survivor.finish();
  }
  const std::vector<Record> expected{
      {1, false, false}, {2, false, false}, {3, false, false}, {4, false, false}, {4, false, true}};
  EXPECT_EQ(records(file), expected);
  fs::remove(file);
}

}  // namespace
}  // namespace tessera::trainer
