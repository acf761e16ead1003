// What a trace::Span costs (docs/tracing.md): per span with no recorder installed (tracing
// off, the price every build pays), with one installed but outside the step window, and with
// one recording. Prints ns per span, after subtracting the same loop without a span.
//   build/ci/bin/tessera_bench_trace [SPANS]   (default 20000000)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "tessera/base/trace.hpp"

namespace {

volatile std::int64_t sink = 0;  // keeps the loops from being folded away

template <class Body>
double ns_per_iteration(std::int64_t n, Body&& body) {
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < n; ++i) body(i);
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    if (took.count() / static_cast<double>(n) < best) best = took.count() / static_cast<double>(n);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using tessera::trace::Recorder;
  using tessera::trace::ScopedRecorder;
  using tessera::trace::Span;
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 20'000'000;
  auto bare = [](std::int64_t i) { sink = sink + i; };
  auto spanned = [](std::int64_t i) {
    const Span span("forward", "compute", {{"layer", i & 7}, {"micro_batch", 1}});
    sink = sink + i;
  };
  const double base = ns_per_iteration(n, bare);
  const double off = ns_per_iteration(n, spanned) - base;
  // Recording keeps every event: a million of them (about 110 MiB) is enough to time.
  const std::int64_t kept = n < 1'000'000 ? n : 1'000'000;
  Recorder recorder(0, static_cast<std::size_t>(kept));
  double inactive = 0.0;
  double on = 0.0;
  {
    const ScopedRecorder installed(&recorder);
    inactive = ns_per_iteration(n, spanned) - base;
    recorder.set_active(true);
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < kept; ++i) spanned(i);
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    on = took.count() / static_cast<double>(kept) - base;
  }
  std::printf("%-36s %10s\n", "span", "ns/span");
  std::printf("%-36s %10.2f\n", "tracing off (no recorder)", off);
  std::printf("%-36s %10.2f\n", "recorder installed, outside window", inactive);
  std::printf("%-36s %10.2f\n", "recording", on);
  std::printf("(loop without a span: %.2f ns/iteration, %lld iterations, best of 5)\n", base,
              static_cast<long long>(n));
  return 0;
}
