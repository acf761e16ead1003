#include "progress_reporter.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "tessera/base/error.hpp"

namespace tessera::trainer {

namespace {

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%lld:%02lld", s / 60, s % 60);
  }
  return text;
}

// Calls `seen(step)` for each record of `file` that has `field` ("loss": a step record,
// "test_accuracy": an evaluation) and a step: another process (the rank 0 of an earlier world,
// the run --resume continues) may have written it. A line that does not parse (a record cut by
// a crash) is passed over.
void for_each_record_with(const std::filesystem::path& file, const char* field,
                          const std::function<void(std::int64_t)>& seen) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains(field) || !record.contains("step")) continue;
    if (const auto& step = record["step"]; step.is_number_integer()) seen(step.get<std::int64_t>());
  }
}

// The newest step that `file` holds a step record of, -1 if none.
std::int64_t newest_recorded_step(const std::filesystem::path& file) {
  std::int64_t newest = -1;
  for_each_record_with(file, "loss", [&](std::int64_t step) { newest = std::max(newest, step); });
  return newest;
}

}  // namespace

ProgressReporter::ProgressReporter(ProgressMode mode, const std::filesystem::path& metrics_file,
                                   bool active, std::int64_t total_steps, std::int64_t epochs)
    : mode_(mode), total_steps_(total_steps), epochs_(epochs), metrics_path_(metrics_file) {
  hand_over(active);
}

void ProgressReporter::hand_over(bool active) {
  if (active == active_) return;
  active_ = active;
  if (!active_) {
    close_metrics();
    return;
  }
  enabled_ = mode_ != ProgressMode::off;
  in_place_ = mode_ == ProgressMode::bar || (mode_ == ProgressMode::automatic && ::isatty(2) == 1);
  open_metrics();
  if (metrics_fd_ >= 0 && last_step_ && last_step_->step > newest_recorded_step_) {
    write_step_record(*last_step_, true);
  }
}

void ProgressReporter::open_metrics() {
  if (metrics_path_.empty()) return;
  // Appended to, so that a resumed run keeps the lines of the run it continues.
  std::error_code ignored;  // a missing folder is reported by the open below
  if (metrics_path_.has_parent_path())
    std::filesystem::create_directories(metrics_path_.parent_path(), ignored);
  newest_recorded_step_ = std::max(newest_recorded_step_, newest_recorded_step(metrics_path_));
  metrics_fd_ = ::open(metrics_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (metrics_fd_ < 0) {
    throw ConfigError("[train] metrics_file " + metrics_path_.string() +
                      ": cannot open it: " + std::strerror(errno));
  }
}

ProgressReporter::~ProgressReporter() {
  // Reached without finish() only while an error is already on its way out.
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
  if (active_ && bar_open_) std::cerr << "\n";
}

void ProgressReporter::write_metrics(const std::string& record, const std::string& what) {
  std::string_view rest = record;
  while (!rest.empty()) {
    const ssize_t n = ::write(metrics_fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : "nothing written";
      throw TrainingError("[train] metrics_file " + metrics_path_.string() +
                          ": cannot write the record of " + what + ": " + reason +
                          "; training stopped so that no metrics are lost (free space, or point "
                          "metrics_file elsewhere)");
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

void ProgressReporter::close_metrics() {
  if (metrics_fd_ < 0) return;
  const int fd = std::exchange(metrics_fd_, -1);
  const bool synced = ::fsync(fd) == 0 || errno == EINVAL;  // EINVAL: a pipe or /dev/null
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    throw TrainingError("[train] metrics_file " + metrics_path_.string() + ": cannot " +
                        (synced ? "close" : "sync") +
                        " it: " + std::strerror(synced ? errno : sync_errno) +
                        "; its last records may be lost (free space, or point metrics_file "
                        "elsewhere)");
  }
}

double ProgressReporter::seconds() const noexcept {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

double ProgressReporter::samples_per_s() const noexcept {
  const double s = seconds();
  return s > 0.0 ? static_cast<double>(samples_) / s : 0.0;
}

void ProgressReporter::print_line(const std::string& text, bool transient) {
  if (!enabled_) return;
  if (in_place_) {
    std::cerr << "\r" << text << "\033[K";
    if (!transient) std::cerr << "\n";
    bar_open_ = transient;
  } else {
    std::cerr << text << "\n";
  }
  std::cerr.flush();
}

double ProgressReporter::bits_per_byte(double loss) const noexcept {
  return bytes_per_target_ > 0.0 ? loss / std::log(2.0) / bytes_per_target_ : 0.0;
}

double ProgressReporter::tokens_per_s() const noexcept {
  return samples_per_s() * static_cast<double>(tokens_per_sample_);
}

void ProgressReporter::count_tokens(std::size_t targets_per_sample, double bytes_per_target) {
  tokens_per_sample_ = targets_per_sample > 1 ? targets_per_sample : 0;
  bytes_per_target_ = bytes_per_target;
}

void ProgressReporter::write_step_record(const StepReport& r, bool recovered) {
  nlohmann::ordered_json line;
  line["step"] = r.step;
  line["epoch"] = r.epoch + 1;
  line["loss"] = r.stats.loss;
  line["lr"] = r.learning_rate;
  line["grad_norm"] = r.stats.grad_norm;
  if (r.stats.skipped) line["skipped"] = true;
  // A step trained again after a recovery or a resume: this record replaces the earlier one,
  // whose samples must not be counted twice.
  if (r.step <= newest_recorded_step_) line["redone"] = true;
  if (recovered) line["recovered"] = true;
  line["samples"] = r.samples;
  line["samples_per_s"] = samples_per_s();
  if (tokens_per_sample_ > 0) line["tokens_per_s"] = tokens_per_s();
  line["time_s"] = seconds();
  line["wall_time"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  write_metrics(line.dump() + "\n", "step " + std::to_string(r.step));
  newest_recorded_step_ = std::max(newest_recorded_step_, r.step);
}

void ProgressReporter::step(const StepReport& r) {
  // Counted on every rank, so that each can report the run's throughput.
  ++steps_;
  samples_ += r.samples;
  last_step_ = r;
  if (!active_) return;
  if (metrics_fd_ >= 0) write_step_record(r, false);
  // A terminal gets ~10 updates a second; a log file a line every 5 s and at each epoch's end.
  const auto now = Clock::now();
  const auto interval =
      in_place_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
  const bool epoch_end = r.batch == r.batches;
  if (now - last_print_ < interval && !epoch_end && r.step != total_steps_) return;
  last_print_ = now;
  const double rate = seconds() > 0.0 ? static_cast<double>(steps_) / seconds() : 0.0;
  const double eta = rate > 0.0 ? static_cast<double>(total_steps_ - r.step) / rate : 0.0;
  char throughput[64];
  if (tokens_per_sample_ > 0) {
    std::snprintf(throughput, sizeof throughput, "%.0f tokens/s", tokens_per_s());
  } else {
    std::snprintf(throughput, sizeof throughput, "%.0f samples/s", samples_per_s());
  }
  char text[256];
  std::snprintf(text, sizeof text,
                "epoch %lld/%lld  step %zu/%zu (%lld/%lld)  loss %.4f  %s  ETA %s",
                static_cast<long long>(r.epoch + 1), static_cast<long long>(epochs_), r.batch,
                r.batches, static_cast<long long>(r.step), static_cast<long long>(total_steps_),
                r.stats.loss, throughput, format_duration(eta).c_str());
  print_line(text, true);
}

void ProgressReporter::evaluation(std::int64_t step, std::int64_t epoch, double accuracy,
                                  double loss) {
  if (!active_) return;
  if (metrics_fd_ >= 0) {
    nlohmann::ordered_json line;
    line["step"] = step;
    line["epoch"] = epoch + 1;
    line["test_accuracy"] = accuracy;
    line["test_loss"] = loss;
    if (tokens_per_sample_ > 0) line["test_perplexity"] = std::exp(loss);
    if (bytes_per_target_ > 0.0) line["test_bits_per_byte"] = bits_per_byte(loss);
    write_metrics(line.dump() + "\n", "the evaluation at step " + std::to_string(step));
  }
  char text[160];
  std::snprintf(text, sizeof text, "epoch %lld  step %lld  test accuracy %.2f %%  test loss %.4f",
                static_cast<long long>(epoch + 1), static_cast<long long>(step), 100.0 * accuracy,
                loss);
  std::string line = text;
  if (tokens_per_sample_ > 0) {
    std::snprintf(text, sizeof text, "  perplexity %.2f", std::exp(loss));
    line += text;
  }
  if (bytes_per_target_ > 0.0) {
    std::snprintf(text, sizeof text, "  %.3f bits/byte", bits_per_byte(loss));
    line += text;
  }
  print_line(line, false);
}

bool ProgressReporter::evaluation_recorded(std::int64_t step) const {
  if (metrics_path_.empty()) return false;
  bool found = false;
  for_each_record_with(metrics_path_, "test_accuracy",
                       [&](std::int64_t recorded) { found = found || recorded == step; });
  return found;
}

void ProgressReporter::checkpoint(std::int64_t step, const std::filesystem::path& folder) {
  if (!active_) return;
  print_line("step " + std::to_string(step) + "  checkpoint " + folder.string(), false);
}

void ProgressReporter::finish() {
  if (active_ && bar_open_) {
    std::cerr << "\n";
    std::cerr.flush();
    bar_open_ = false;
  }
  close_metrics();
}

}  // namespace tessera::trainer
