// embed_host: a host application that trains its own model (tiny_mlp.hpp, hand-written
// backward) data-parallel by embedding tessera through the bring-your-own-compute API:
// tessera connects the ranks and averages the gradients; the host owns everything else.
//
//   ./embed_host [--epochs N] [--max-steps N] [--batch-size B] [--lr X] [--hidden H]
//                [--dataset fashion-mnist|synthetic] [--seed S] [--section.key=value ...]
//   tessera launch -n 2 -- ./embed_host --batch-size 64     # 2 processes over shm
//
// --batch-size is per rank: one process with B and N launched processes with B/N train on
// the same global batches and reach the same accuracy.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "tessera/base/error.hpp"
#include "tessera/config/config.hpp"
#include "tessera/plugin/dataset.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/runtime/data_order.hpp"
#include "tessera/runtime/world.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"
#include "tessera/transport_kit/launch_env.hpp"
#include "tiny_mlp.hpp"

namespace {

struct HostOptions {
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;  // 0: every epoch
  std::size_t batch_size = 128;
  float lr = 0.1F;
  float momentum = 0.9F;
  std::size_t hidden = 64;
  std::string dataset = "fashion-mnist";
  std::uint64_t seed = 1;
  std::vector<std::string> tessera_flags;  // --section.key=value, handed to tessera's Config
};

HostOptions parse(int argc, char** argv) {
  HostOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--epochs")
      o.epochs = std::stoll(value());
    else if (arg == "--max-steps")
      o.max_steps = std::stoll(value());
    else if (arg == "--batch-size")
      o.batch_size = std::stoul(value());
    else if (arg == "--lr")
      o.lr = std::stof(value());
    else if (arg == "--momentum")
      o.momentum = std::stof(value());
    else if (arg == "--hidden")
      o.hidden = std::stoul(value());
    else if (arg == "--dataset")
      o.dataset = value();
    else if (arg == "--seed")
      o.seed = std::stoull(value());
    else if (arg.starts_with("--") && arg.find('.') != std::string::npos)
      o.tessera_flags.push_back(arg);
    else
      throw std::invalid_argument("unknown argument " + arg);
  }
  if (o.batch_size == 0) throw std::invalid_argument("--batch-size must be at least 1");
  return o;
}

// The host's optimizer: SGD with momentum over its own buffers.
void sgd_step(std::vector<embed_host::Parameter>& params, std::vector<std::vector<float>>& velocity,
              float lr, float momentum) {
  for (std::size_t p = 0; p < params.size(); ++p) {
    auto& v = velocity[p];
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = momentum * v[i] + params[p].grad[i];
      params[p].value[i] -= lr * v[i];
    }
  }
}

// Test-set accuracy and mean loss: each rank evaluates its share, one all-reduce sums them.
std::pair<double, double> evaluate(const embed_host::TinyMlp& model, const tessera::Dataset& data,
                                   tessera::Communicator& world) {
  tessera::EpochShard shard(
      {data.size(tessera::Split::test), 0, 0, world.rank(), world.size(), 1000, false});
  double totals[3] = {0.0, 0.0, 0.0};  // correct, loss sum, samples
  for (std::size_t s = 0; s < shard.steps(); ++s) {
    const auto indices = shard.batch(s);
    if (indices.empty()) continue;
    const tessera::Batch batch = data.gather(tessera::Split::test, indices);
    const auto result = model.evaluate(batch.inputs.as<float>(), batch.targets.as<std::int64_t>());
    totals[0] += static_cast<double>(result.correct);
    totals[1] += result.loss_sum;
    totals[2] += static_cast<double>(indices.size());
  }
  world
      .all_reduce({totals, 3, tessera::DType::f64, tessera::Device::cpu()}, tessera::ReduceOp::sum)
      ->wait(world.timeout());
  return {totals[0] / totals[2], totals[1] / totals[2]};
}

void train_rank(const HostOptions& o, const tessera::Dataset& data,
                std::shared_ptr<tessera::Communicator> world) {
  const int rank = world->rank();
  const tessera::SampleLayout layout = data.layout();
  const std::size_t features = layout.input_shape.at(0);
  embed_host::TinyMlp model(features, o.hidden, layout.classes, o.seed);
  auto& params = model.parameters();

  // Every rank starts from rank 0's parameters, as any data-parallel host must ensure.
  for (auto& p : params) {
    world->broadcast(tessera::view_of(std::span<float>(p.value)), 0)->wait(world->timeout());
  }

  // Bring-your-own-compute: register the host's gradient buffers in forward order; the
  // synchronizer buckets them and starts each bucket's all-reduce as backward completes it.
  tessera::GradientSynchronizer sync(world, tessera::GradientSyncOptions{});
  for (auto& p : params) (void)sync.add_parameter(p.name, p.value, p.grad);
  sync.finalize();

  std::vector<std::vector<float>> velocity;
  for (const auto& p : params) velocity.emplace_back(p.value.size(), 0.0F);

  const auto start = std::chrono::steady_clock::now();
  std::int64_t step = 0;
  double last_loss = 0.0;
  for (std::int64_t epoch = 0; epoch < o.epochs; ++epoch) {
    tessera::EpochShard shard({data.size(tessera::Split::train), static_cast<std::uint64_t>(epoch),
                               o.seed, rank, world->size(), o.batch_size, true});
    double epoch_loss = 0.0;
    std::size_t epoch_samples = 0;
    for (std::size_t s = 0; s < shard.steps(); ++s) {
      if (o.max_steps > 0 && step == o.max_steps) break;
      const auto indices = shard.batch(s);
      const tessera::Batch batch = data.gather(tessera::Split::train, indices);
      // The all-reduce averages over ranks; scaling each rank's summed gradient by
      // world / global makes the average the mean over the global batch, even when the last
      // batch of an epoch is split unevenly.
      const double global = static_cast<double>(shard.global_batch_size(s));
      const auto scale = static_cast<float>(world->size() / global);
      auto result =
          indices.empty()
              ? embed_host::BatchResult{}
              : model.forward_backward(batch.inputs.as<float>(), batch.targets.as<std::int64_t>(),
                                       scale, [&](std::size_t p) { sync.grad_ready(p); });
      if (indices.empty()) {
        // An empty share still takes part in every bucket's all-reduce, with zero gradients.
        for (auto& p : params) std::fill(p.grad.begin(), p.grad.end(), 0.0F);
        for (std::size_t p = params.size(); p-- > 0;) sync.grad_ready(p);
      }
      double stats[2] = {result.loss_sum, static_cast<double>(indices.size())};
      auto loss_work = world->all_reduce({stats, 2, tessera::DType::f64, tessera::Device::cpu()},
                                         tessera::ReduceOp::sum);
      sync.wait(world->timeout());
      loss_work->wait(world->timeout());
      sgd_step(params, velocity, o.lr, o.momentum);
      ++step;
      last_loss = stats[0] / stats[1];
      epoch_loss += stats[0];
      epoch_samples += static_cast<std::size_t>(stats[1]);
    }
    const auto [accuracy, test_loss] = evaluate(model, data, *world);
    if (rank == 0) {
      std::printf(
          "epoch %lld  steps %lld  train loss %.4f  test loss %.4f  test accuracy %.2f %%\n",
          static_cast<long long>(epoch + 1), static_cast<long long>(step),
          epoch_samples ? epoch_loss / static_cast<double>(epoch_samples) : 0.0, test_loss,
          100.0 * accuracy);
    }
    if (o.max_steps > 0 && step == o.max_steps) break;
  }
  const auto [accuracy, test_loss] = evaluate(model, data, *world);
  if (rank == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "ranks %d  steps %lld  final loss %.4f  test loss %.4f  test accuracy %.4f  "
        "(%.1f s)\n",
        world->size(), static_cast<long long>(step), last_loss, test_loss, accuracy, seconds);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const HostOptions options = parse(argc, argv);
    // Where this process sits: `tessera launch`, mpirun or srun left it in the environment; a
    // process started alone is rank 0 of 1.
    const tessera::LaunchInfo launch = tessera::launch_info_from_environment();

    // Launched processes meet over shared memory through the launcher's tcp store; a lone
    // process needs no store at all. Flags on the command line override either choice.
    tessera::ConfigSources sources;
    sources.flags = {"--runtime.transport=shm",
                     launch.world_size > 1 ? "--runtime.store=tcp" : "--runtime.store=memory"};
    sources.flags.insert(sources.flags.end(), options.tessera_flags.begin(),
                         options.tessera_flags.end());

    // The plugins first (the config may name more folders in --plugins.path), then the config
    // validated against them, then how this process joins the job.
    tessera::PluginRegistry registry;
    registry.scan(tessera::Config::plugin_search_path(sources));
    const tessera::Config config = tessera::Config::load(sources, registry);
    const tessera::WorldPlan plan = tessera::plan_world(config, registry, launch);

    // The data set comes from a tessera plugin; only the model and its training are the host's.
    const auto data = registry.create<tessera::Dataset>(
        options.dataset, registry.default_options(tessera::PluginKind::dataset, options.dataset));

    tessera::run_world(config, registry, plan, [&](std::shared_ptr<tessera::Communicator> world) {
      train_rank(options, *data, std::move(world));
    });
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "embed_host: error: " << e.what() << "\n";
    return 1;
  }
}
