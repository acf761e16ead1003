#include "trainer/progress_reporter.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "tessera/error.hpp"
#include "tessera/json_text.hpp"

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

}  // namespace

ProgressReporter::ProgressReporter(ProgressMode mode, const std::filesystem::path& metrics_file,
                                   bool active, std::int64_t total_steps, std::int64_t epochs)
    : active_(active), total_steps_(total_steps), epochs_(epochs) {
  if (!active_) return;
  enabled_ = mode != ProgressMode::off;
  in_place_ = mode == ProgressMode::bar || (mode == ProgressMode::automatic && ::isatty(2) == 1);
  if (!metrics_file.empty()) {
    // Appended to, so that a resumed run keeps the lines of the run it continues.
    std::error_code ignored;  // a missing folder is reported by the open below
    if (metrics_file.has_parent_path())
      std::filesystem::create_directories(metrics_file.parent_path(), ignored);
    metrics_.open(metrics_file, std::ios::app);
    if (!metrics_) throw ConfigError("cannot open metrics_file " + metrics_file.string());
  }
}

ProgressReporter::~ProgressReporter() {
  finish();
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

void ProgressReporter::step(const StepReport& r) {
  // Counted on every rank, so that each can report the run's throughput.
  ++steps_;
  samples_ += r.samples;
  if (!active_) return;
  if (metrics_.is_open()) {
    metrics_ << "{\"step\":" << r.step << ",\"epoch\":" << r.epoch + 1
             << ",\"loss\":" << json_number(r.stats.loss)
             << ",\"lr\":" << json_number(r.learning_rate)
             << ",\"grad_norm\":" << json_number(r.stats.grad_norm) << ",\"samples\":" << r.samples
             << ",\"samples_per_s\":" << json_number(samples_per_s())
             << ",\"time_s\":" << json_number(seconds()) << "}\n";
    metrics_.flush();
  }
  // A terminal gets ~10 updates a second; a log file a line every 5 s and at each epoch's end.
  const auto now = Clock::now();
  const auto interval =
      in_place_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
  const bool epoch_end = r.batch == r.batches;
  if (now - last_print_ < interval && !epoch_end && r.step != total_steps_) return;
  last_print_ = now;
  const double rate = seconds() > 0.0 ? static_cast<double>(steps_) / seconds() : 0.0;
  const double eta = rate > 0.0 ? static_cast<double>(total_steps_ - r.step) / rate : 0.0;
  char text[256];
  std::snprintf(text, sizeof text,
                "epoch %lld/%lld  step %zu/%zu (%lld/%lld)  loss %.4f  %.0f samples/s  ETA %s",
                static_cast<long long>(r.epoch + 1), static_cast<long long>(epochs_), r.batch,
                r.batches, static_cast<long long>(r.step), static_cast<long long>(total_steps_),
                r.stats.loss, samples_per_s(), format_duration(eta).c_str());
  print_line(text, true);
}

void ProgressReporter::evaluation(std::int64_t step, std::int64_t epoch, double accuracy,
                                  double loss) {
  if (!active_) return;
  if (metrics_.is_open()) {
    metrics_ << "{\"step\":" << step << ",\"epoch\":" << epoch + 1
             << ",\"test_accuracy\":" << json_number(accuracy)
             << ",\"test_loss\":" << json_number(loss) << "}\n";
    metrics_.flush();
  }
  char text[160];
  std::snprintf(text, sizeof text, "epoch %lld  step %lld  test accuracy %.2f %%  test loss %.4f",
                static_cast<long long>(epoch + 1), static_cast<long long>(step), 100.0 * accuracy,
                loss);
  print_line(text, false);
}

void ProgressReporter::checkpoint(std::int64_t step, const std::filesystem::path& folder) {
  if (!active_) return;
  print_line("step " + std::to_string(step) + "  checkpoint " + folder.string(), false);
}

void ProgressReporter::finish() {
  if (!active_ || !bar_open_) return;
  std::cerr << "\n";
  std::cerr.flush();
  bar_open_ = false;
}

}  // namespace tessera::trainer
