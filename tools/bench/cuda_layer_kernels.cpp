// Times each transformer kernel of the reference layers on the host and on cuda:0, through the
// same Tensor forms the layers call (the GPU's side includes what those do on the host: the
// token and target checks, the embedding's grouping of tokens, the loss's copies back), on
// GPT-2 124M's shapes. Prints one table row per kernel: milliseconds a call on each side (the
// median of --rounds rounds of --reps calls; the GPU's rounds end in cudaDeviceSynchronize) and
// host / GPU.
//
//   build/ci/bin/tessera_bench_cuda_layers [--batch 4] [--time 256] [--threads 1] [--rounds 5]
//       [--reps 3] [--gpu-only]
//
// --gpu-only skips the host (for shapes where one host call takes seconds, such as 8 x 1024).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_allocator.hpp"
#include "cuda/cuda_device.hpp"
#include "layers/causal_attention_tensors.hpp"
#include "layers/device_compute.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layer_norm.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "tessera/base/random.hpp"

namespace {

using namespace tessera;
using namespace tessera::layers;

struct Options {
  std::size_t batch = 4;
  std::size_t time = 256;
  int threads = 1;
  int rounds = 5;
  int reps = 3;
  bool gpu_only = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: tessera_bench_cuda_layers [--batch N] [--time N] [--threads N] "
               "[--rounds N] [--reps N] [--gpu-only]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--gpu-only") {
      options.gpu_only = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing the value of " + arg).c_str());
    const long value = std::strtol(argv[++i], nullptr, 10);
    if (value < 1) usage((arg + " needs a positive integer").c_str());
    if (arg == "--batch") {
      options.batch = static_cast<std::size_t>(value);
    } else if (arg == "--time") {
      options.time = static_cast<std::size_t>(value);
    } else if (arg == "--threads") {
      options.threads = static_cast<int>(value);
    } else if (arg == "--rounds") {
      options.rounds = static_cast<int>(value);
    } else if (arg == "--reps") {
      options.reps = static_cast<int>(value);
    } else {
      usage(("unknown option " + arg).c_str());
    }
  }
  return options;
}

Tensor random_on(Shape shape, std::uint64_t seed, const std::shared_ptr<DeviceAllocator>& to) {
  Tensor host(std::move(shape), DType::f32);
  auto v = host.as<float>();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 2.0F * counter_uniform(seed, 1, i) - 1.0F;
  return to ? host.copy_to(to) : std::move(host);
}

// Milliseconds a call: the median over rounds of (reps calls, then the device's queue drained).
double time_ms(const Options& options, bool gpu, const std::function<void()>& call) {
  call();  // warm-up: first-touch pages, pool growth, module load
  if (gpu) cudaDeviceSynchronize();
  std::vector<double> rounds;
  for (int r = 0; r < options.rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < options.reps; ++k) call();
    if (gpu) cudaDeviceSynchronize();
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    rounds.push_back(took.count() / options.reps);
  }
  std::nth_element(rounds.begin(), rounds.begin() + rounds.size() / 2, rounds.end());
  return rounds[rounds.size() / 2];
}

// One side's inputs for every kernel, GPT-2 124M's widths (768 channels, 12 heads of 64, a
// vocabulary of 50,257, 3072 MLP features).
struct Inputs {
  static constexpr std::size_t kWidth = 768;
  static constexpr std::size_t kHeads = 12;
  static constexpr std::size_t kVocab = 50257;
  static constexpr std::size_t kContext = 1024;

  Inputs(const Options& o, const std::shared_ptr<DeviceAllocator>& to)
      : shape{o.batch, o.time, kHeads, kWidth / kHeads},
        embedding{o.batch, o.time, kWidth, kVocab, std::max(kContext, o.time)},
        tokens({o.batch, o.time}, DType::i64),
        wte(random_on({kVocab, kWidth}, 1, to)),
        wpe(random_on({embedding.context, kWidth}, 2, to)),
        x(random_on({o.batch, o.time, kWidth}, 3, to)),
        gain(random_on({kWidth}, 4, to)),
        qkv(random_on({o.batch, o.time, 3 * kWidth}, 5, to)),
        fc(random_on({o.batch, o.time, 4 * kWidth}, 6, to)),
        logits(random_on({o.batch, o.time, kVocab}, 7, to)),
        targets({o.batch * o.time}, DType::i64),
        grad_qkv(random_on(qkv.shape(), 10, to)),
        grad_fc(random_on(fc.shape(), 11, to)) {
    for (std::size_t i = 0; i < tokens.count(); ++i) {
      tokens.as<std::int64_t>()[i] = static_cast<std::int64_t>(counter_random(8, 1, i) % kVocab);
      targets.as<std::int64_t>()[i] = static_cast<std::int64_t>(counter_random(9, 1, i) % kVocab);
    }
  }
  AttentionShape shape;
  EmbeddingShape embedding;
  Tensor tokens;  // on the host on both sides: where the data set puts them
  Tensor wte, wpe, x, gain, qkv, fc, logits, targets;
  Tensor grad_qkv, grad_fc;  // what backward adds into
};

struct Kernel {
  std::string name;
  std::string shape;
  std::function<void(Inputs&, const ComputeContext&)> call;
};

std::vector<Kernel> kernels(const Options& o) {
  const std::string rows = std::to_string(o.batch) + "x" + std::to_string(o.time);
  return {
      {"embedding forward", rows + "x768",
       [](Inputs& in, const ComputeContext& c) {
         (void)embedding_forward(in.tokens, in.wte.view(), in.wpe.view(), in.embedding, c);
       }},
      {"embedding backward", rows + "x768",
       [](Inputs& in, const ComputeContext& c) {
         embedding_backward(in.wte.view(), in.wpe.view(), in.x, in.tokens, in.embedding, c);
       }},
      {"layer norm forward", rows + "x768",
       [](Inputs& in, const ComputeContext& c) {
         (void)layer_norm_forward(in.x, in.gain.view(), in.gain.view(), 768, c);
       }},
      {"layer norm forward + backward", rows + "x768",
       [](Inputs& in, const ComputeContext& c) {
         const LayerNormOutput n = layer_norm_forward(in.x, in.gain.view(), in.gain.view(), 768, c);
         layer_norm_backward(n.output, in.gain.view(), in.gain.view(), in.x, in.x, in.gain.view(),
                             n.mean, n.rstd, 768, c);
       }},
      {"GELU forward", rows + "x3072",
       [](Inputs& in, const ComputeContext& c) { (void)gelu_forward(in.fc, c); }},
      {"GELU backward", rows + "x3072",
       [](Inputs& in, const ComputeContext& c) { gelu_backward(in.grad_fc, in.fc, in.fc, c); }},
      {"attention forward", rows + ", 12 heads of 64",
       [](Inputs& in, const ComputeContext& c) {
         (void)causal_attention_forward(in.qkv, in.shape, c);
       }},
      {"attention forward + backward", rows + ", 12 heads of 64",
       [](Inputs& in, const ComputeContext& c) {
         const AttentionOutput a = causal_attention_forward(in.qkv, in.shape, c);
         causal_attention_backward(in.grad_qkv, a.output, in.qkv, a.output, a.log_sum_exp, in.shape,
                                   c);
       }},
      {"softmax cross-entropy", rows + "x50257",
       [](Inputs& in, const ComputeContext& c) {
         (void)softmax_cross_entropy(in.logits, in.targets, Inputs::kVocab, c);
       }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  if (tessera::cuda::device_count() == 0) {
    std::fprintf(stderr, "tessera_bench_cuda_layers: no CUDA device is visible\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const ComputeContext compute(options.threads);
  Inputs gpu(options, tessera::cuda::allocator_for(0));
  std::unique_ptr<Inputs> host;
  if (!options.gpu_only) host = std::make_unique<Inputs>(options, nullptr);
  std::printf("# %s; host: %d thread(s); batch %zu x time %zu; median of %d rounds of %d calls\n",
              prop.name, options.threads, options.batch, options.time, options.rounds,
              options.reps);
  std::printf("%-30s %-24s %12s %12s %10s\n", "kernel", "shape", "host ms", "gpu ms", "host/gpu");
  for (const Kernel& k : kernels(options)) {
    const double gpu_ms = time_ms(options, true, [&] { k.call(gpu, compute); });
    if (!host) {
      std::printf("%-30s %-24s %12s %12.4f %10s\n", k.name.c_str(), k.shape.c_str(), "-", gpu_ms,
                  "-");
      continue;
    }
    const double host_ms = time_ms(options, false, [&] { k.call(*host, compute); });
    std::printf("%-30s %-24s %12.3f %12.4f %10.1f\n", k.name.c_str(), k.shape.c_str(), host_ms,
                gpu_ms, host_ms / gpu_ms);
  }
  return 0;
}
