#pragma once
// LineRelay: copies one worker stream to a launcher descriptor, whole lines at a time, each
// prefixed with "[rank R] ". Whole-line writes keep lines of different ranks from interleaving
// mid-line; a partial last line is completed with a newline when the stream ends.

#include <string>

namespace tessera::launch {

class LineRelay {
 public:
  // `target` < 0 drains the stream without printing (rank-0-only output).
  LineRelay(int rank, int source, int target, bool prefix = true);
  ~LineRelay();
  LineRelay(LineRelay&& other) noexcept;
  LineRelay& operator=(LineRelay&&) = delete;
  LineRelay(const LineRelay&) = delete;
  LineRelay& operator=(const LineRelay&) = delete;

  [[nodiscard]] int source() const noexcept { return source_; }
  [[nodiscard]] bool open() const noexcept { return source_ >= 0; }

  // Reads what is available now (the source is non-blocking) and writes the complete lines.
  // Closes the source at end of stream, after writing any partial line.
  void pump();
  // Writes any partial line and closes the source, whether or not it has ended.
  void close();

 private:
  void emit(std::string_view line);
  std::string prefix_;
  int source_ = -1;
  int target_ = -1;
  std::string pending_;
};

}  // namespace tessera::launch
