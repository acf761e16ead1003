#include "tessera/base/trace.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "tessera/base/error.hpp"

namespace tessera::trace {

namespace detail {
constinit thread_local Recorder* installed_recorder = nullptr;
}  // namespace detail

namespace {

void append_escaped(std::string& out, const char* text) {
  out += '"';
  for (const char* c = text; *c != '\0'; ++c) {
    const auto byte = static_cast<unsigned char>(*c);
    if (byte == '"' || byte == '\\') {
      out += '\\';
      out += *c;
    } else if (byte < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    } else {
      out += *c;
    }
  }
  out += '"';
}

// Microseconds with three decimals, exact: the viewers' unit, without rounding nanoseconds
// into neighbouring spans.
void append_micros(std::string& out, std::int64_t ns) {
  char text[40];
  const std::uint64_t magnitude =
      ns < 0 ? static_cast<std::uint64_t>(-(ns + 1)) + 1 : static_cast<std::uint64_t>(ns);
  std::snprintf(text, sizeof text, "%s%" PRIu64 ".%03" PRIu64, ns < 0 ? "-" : "", magnitude / 1000,
                magnitude % 1000);
  out += text;
}

constexpr std::size_t kFlushBytes = std::size_t{1} << 20;

std::int64_t since_epoch_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

Recorder::Recorder(int rank, std::size_t max_events)
    : rank_(rank), max_events_(max_events), origin_(Clock::now()) {}

std::uint32_t Recorder::thread_index_locked() {
  const auto me = std::this_thread::get_id();
  for (std::size_t t = 0; t < threads_.size(); ++t) {
    if (threads_[t].first == me) return static_cast<std::uint32_t>(t);
  }
  threads_.emplace_back(me, threads_.empty() ? "rank " + std::to_string(rank_)
                                             : "thread " + std::to_string(threads_.size()));
  return static_cast<std::uint32_t>(threads_.size() - 1);
}

void Recorder::append_locked(const char* name, const char* category, char phase,
                             Clock::time_point ts, std::int64_t dur_ns, std::uint64_t id,
                             std::span<const Arg> args, bool always) {
  if (!always && event_total_ >= max_events_) {
    ++dropped_;
    return;
  }
  Event event{name, category, since_epoch_ns(ts), dur_ns, id, thread_index_locked(), phase, 0, {}};
  for (const Arg& arg : args) {
    if (arg.key == nullptr) continue;
    if (event.arg_count == kMaxArgs) break;
    event.args[event.arg_count++] = arg;
  }
  if (chunks_.empty() || chunks_.back().size() == kChunkEvents) {
    chunks_.emplace_back().reserve(kChunkEvents);
  }
  chunks_.back().push_back(event);
  ++event_total_;
}

void Recorder::complete(const char* name, const char* category, Clock::time_point begin,
                        Clock::time_point end, std::span<const Arg> args) noexcept {
  try {
    const std::lock_guard lock(mutex_);
    append_locked(name, category, 'X', begin,
                  std::chrono::duration_cast<std::chrono::nanoseconds>(end - begin).count(), 0,
                  args, false);
  } catch (...) {
    // Out of memory while tracing: the event is lost, training goes on.
  }
}

std::uint64_t Recorder::begin_async(const char* name, const char* category,
                                    std::span<const Arg> args) noexcept {
  if (!active()) return 0;
  try {
    const std::lock_guard lock(mutex_);
    if (event_total_ >= max_events_) {
      ++dropped_;
      return 0;
    }
    const std::uint64_t id = next_id_++;
    append_locked(name, category, 'b', Clock::now(), 0, id, args, false);
    return id;
  } catch (...) {
    return 0;
  }
}

void Recorder::end_async(const char* name, const char* category, std::uint64_t id,
                         std::span<const Arg> args) noexcept {
  if (id == 0) return;
  try {
    const std::lock_guard lock(mutex_);
    append_locked(name, category, 'e', Clock::now(), 0, id, args, true);
  } catch (...) {
    // As in complete(): lost, the viewer then shows the operation as never ending.
  }
}

void Recorder::instant(const char* name, const char* category, std::span<const Arg> args) noexcept {
  try {
    const std::lock_guard lock(mutex_);
    append_locked(name, category, 'i', Clock::now(), 0, 0, args, true);
  } catch (...) {
  }
}

void Recorder::name_thread(const std::string& name) {
  const std::lock_guard lock(mutex_);
  threads_[thread_index_locked()].second = name;
}

std::size_t Recorder::event_count() const {
  const std::lock_guard lock(mutex_);
  return event_total_;
}

std::size_t Recorder::dropped_count() const {
  const std::lock_guard lock(mutex_);
  return dropped_;
}

void Recorder::append_event(std::string& out, const Event& e, const std::string& pid,
                            std::int64_t origin_ns) {
  out += ",\n{\"name\":";
  append_escaped(out, e.name);
  out += ",\"cat\":";
  append_escaped(out, e.category);
  out += ",\"ph\":\"";
  out += e.phase;
  out += "\",\"pid\":" + pid + ",\"tid\":" + std::to_string(e.thread) + ",\"ts\":";
  append_micros(out, e.ts_ns - origin_ns);
  if (e.phase == 'X') {
    out += ",\"dur\":";
    append_micros(out, e.dur_ns);
  } else if (e.phase == 'b' || e.phase == 'e') {
    out += ",\"id\":" + std::to_string(e.id);
  } else if (e.phase == 'i') {
    out += ",\"s\":\"t\"";
  }
  if (e.arg_count > 0) {
    out += ",\"args\":{";
    for (std::uint8_t a = 0; a < e.arg_count; ++a) {
      if (a > 0) out += ',';
      append_escaped(out, e.args[a].key);
      out += ':' + std::to_string(e.args[a].value);
    }
    out += '}';
  }
  out += '}';
}

void Recorder::write(const std::filesystem::path& path, const std::string& other_data_json) const {
  auto temporary = path;
  temporary += ".tmp";
  std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
  auto fail = [&](const std::string& what, int error) {
    file.close();
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw Error("cannot " + what + " the trace " + temporary.string() + ": " +
                std::strerror(error));
  };
  if (!file) fail("create", errno);
  // Written in pieces of about 1 MiB, so that writing adds no second copy of a large trace.
  std::string out;
  out.reserve(kFlushBytes + 4096);
  auto flush_if_full = [&](bool last) {
    if (!last && out.size() < kFlushBytes) return;
    file.write(out.data(), static_cast<std::streamsize>(out.size()));
    out.clear();
  };
  {
    const std::lock_guard lock(mutex_);
    const std::string pid = std::to_string(rank_);
    const std::int64_t origin = since_epoch_ns(origin_);
    out += "{\"traceEvents\":[\n";
    // Metadata first: one process per rank, in rank order, with named thread tracks.
    out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid +
           ",\"tid\":0,\"args\":{\"name\":\"rank " + pid + "\"}},\n";
    out += "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + pid +
           ",\"tid\":0,\"args\":{\"sort_index\":" + pid + "}}";
    for (std::size_t t = 0; t < threads_.size(); ++t) {
      out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid +
             ",\"tid\":" + std::to_string(t) + ",\"args\":{\"name\":";
      append_escaped(out, threads_[t].second.c_str());
      out += "}}";
    }
    for (const auto& chunk : chunks_) {
      for (const Event& e : chunk) {
        append_event(out, e, pid, origin);
        flush_if_full(false);
      }
    }
    out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"rank\":" + pid +
           ",\"events\":" + std::to_string(event_total_) +
           ",\"dropped_events\":" + std::to_string(dropped_) +
           ",\"max_events\":" + std::to_string(max_events_);
    if (!other_data_json.empty()) out += "," + other_data_json;
    out += "}}\n";
  }
  flush_if_full(true);
  if (!file.flush()) fail("write", errno);
  file.close();
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    throw Error("cannot rename the trace " + temporary.string() + " to " + path.string() + ": " +
                ec.message());
  }
}

void Span::start(Recorder* recorder, const char* name, const char* category,
                 std::initializer_list<Arg> args) noexcept {
  recorder_ = recorder;
  name_ = name;
  category_ = category;
  for (const Arg& arg : args) {
    if (arg.key == nullptr) continue;
    if (arg_count_ == kMaxArgs) break;
    args_[arg_count_++] = arg;
  }
  begin_ = Clock::now();
}

void Span::finish() noexcept {
  recorder_->complete(name_, category_, begin_, Clock::now(), {args_.data(), arg_count_});
}

}  // namespace tessera::trace
