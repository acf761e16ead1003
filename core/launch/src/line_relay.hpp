#pragma once
// LineRelay: copies one worker stream to a launcher descriptor, whole lines at a time, each
// prefixed with "[rank R] ". Whole-line writes keep lines of different ranks from interleaving
// mid-line; a partial last line is completed with a newline when the stream ends.
//
// No byte is dropped and no newline is inserted inside a line, whatever the reads look like:
// a line may arrive in any number of reads, the last one may lack its newline, and a line
// longer than the relay buffers (kMaxBufferedLine) goes out in pieces that continue it (only
// such a line can interleave with another rank's). A target that is full or non-blocking is
// waited for, never skipped.

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera::launch {

class LineRelay {
 public:
  // The most a relay holds back waiting for a newline.
  static constexpr std::size_t kMaxBufferedLine = 64 * 1024;

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
  // Writes `text` (no newline in it), starting a prefixed line unless one is open, and ends
  // the line when `end_line`.
  void emit(std::string_view text, bool end_line);
  std::string prefix_;
  int source_ = -1;
  int target_ = -1;
  std::string pending_;
  bool line_open_ = false;  // part of a long line is out, its end is not
};

}  // namespace tessera::launch
