// What dropout on the attention probabilities costs (layers/causal_attention.hpp): milliseconds
// of thread CPU time for one causal attention forward plus backward at rate 0 and at a rate
// above it, on GPT-2 124M's attention (12 heads of 64 channels) at context 256, one thread, in
// each instruction-set copy of the kernel this CPU runs. Rounds are paired: each round times
// rate 0 and the rate in turn on the same data, so a neighbour's load falls on both; the table
// gives the medians, the median of the per-round ratios, and the best (least) sums of the rounds
// with their ratio, which a loaded machine disturbs least.
//   build/ci/bin/tessera_bench_attention_dropout [ROUNDS [BATCH [RATE]]]   (default 9 1 0.1)
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "layers/causal_attention.hpp"
#include "tessera/base/random.hpp"

namespace {

using tessera::layers::AttentionDropout;
using tessera::layers::AttentionShape;
using tessera::layers::ComputeContext;
using tessera::layers::VectorIsa;

double thread_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Buffers {
  std::vector<float> qkv, dy, output, lse, grad_qkv;

  explicit Buffers(const AttentionShape& s) {
    const std::size_t tokens = s.batch * s.time;
    qkv.resize(tokens * 3 * s.channels());
    dy.resize(tokens * s.channels());
    for (std::size_t i = 0; i < qkv.size(); ++i) {
      qkv[i] = 2.0F * tessera::counter_uniform(1, 0, i) - 1.0F;
    }
    for (std::size_t i = 0; i < dy.size(); ++i) {
      dy[i] = 2.0F * tessera::counter_uniform(1, 1, i) - 1.0F;
    }
    output.resize(dy.size());
    lse.resize(tokens * s.heads);
    grad_qkv.resize(qkv.size());
  }
};

// Forward then backward once; returns {forward ms, backward ms}.
std::pair<double, double> time_once(Buffers& b, const AttentionShape& s,
                                    const ComputeContext& compute, const AttentionDropout& drop) {
  std::fill(b.grad_qkv.begin(), b.grad_qkv.end(), 0.0F);
  const double start = thread_ms();
  tessera::layers::causal_attention_forward<float>(b.output, b.lse, b.qkv, s, compute, drop);
  const double mid = thread_ms();
  tessera::layers::causal_attention_backward<float>(b.grad_qkv, b.dy, b.qkv, b.output, b.lse, s,
                                                    compute, drop);
  return {mid - start, thread_ms() - mid};
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  const auto batch = static_cast<std::size_t>(argc > 2 ? std::atoll(argv[2]) : 1);
  const float rate = argc > 3 ? std::strtof(argv[3], nullptr) : 0.1F;
  if (rounds < 1 || batch < 1 || !(rate > 0.0F && rate < 1.0F)) {
    std::fprintf(stderr, "usage: %s [ROUNDS >= 1 [BATCH >= 1 [RATE in (0, 1)]]]\n", argv[0]);
    return 2;
  }
  const AttentionShape shape{batch, 256, 12, 64};
  const AttentionDropout off{};
  const AttentionDropout on{rate, {2026, 7, 1, 0}, shape.heads};
  std::printf(
      "causal attention, batch %zu x T %zu, %zu heads of %zu, one thread, %d paired "
      "rounds (medians, ms of thread CPU time)\n",
      shape.batch, shape.time, shape.heads, shape.head_size, rounds);
  std::printf("%-9s %9s %9s %9s %9s %9s %9s %8s %9s %9s %8s\n", "isa", "fwd p=0", "bwd p=0",
              "sum p=0", "fwd p", "bwd p", "sum p", "ratio", "best p=0", "best p", "ratio");
  std::vector<VectorIsa> isas{VectorIsa::baseline};
  if (tessera::layers::widest_vector_isa() == VectorIsa::avx2) isas.push_back(VectorIsa::avx2);
  for (const VectorIsa isa : isas) {
    const ComputeContext compute(1, isa);
    Buffers b(shape);
    time_once(b, shape, compute, on);  // warm the pages and caches
    std::vector<double> f0, b0, s0, f1, b1, s1, ratio;
    for (int r = 0; r < rounds; ++r) {
      const auto [fa, ba] = time_once(b, shape, compute, off);
      const auto [fb, bb] = time_once(b, shape, compute, on);
      f0.push_back(fa);
      b0.push_back(ba);
      s0.push_back(fa + ba);
      f1.push_back(fb);
      b1.push_back(bb);
      s1.push_back(fb + bb);
      ratio.push_back((fb + bb) / (fa + ba));
    }
    const double best0 = *std::min_element(s0.begin(), s0.end());
    const double best1 = *std::min_element(s1.begin(), s1.end());
    std::printf("%-9s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %7.3fx %9.2f %9.2f %7.3fx\n",
                tessera::layers::vector_isa_name(isa), median(f0), median(b0), median(s0),
                median(f1), median(b1), median(s1), median(ratio), best0, best1, best1 / best0);
  }
  std::printf(
      "(p = %.3g; ratio: the median over rounds of (sum at p) / (sum at 0); best: the least sum "
      "of the rounds)\n",
      static_cast<double>(rate));
  return 0;
}
