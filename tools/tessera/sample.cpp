#include "sample.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>

#include "checkpoint.hpp"
#include "config_flags.hpp"
#include "tessera/base/error.hpp"
#include "tessera/base/random.hpp"
#include "tessera/config/config.hpp"
#include "tessera/elastic/elastic_options.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/runtime/checkpoint.hpp"
#include "tessera/strategy_kit/param_checkpoint.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

namespace po = boost::program_options;

constexpr const char* kUsage =
    "usage: tessera sample --config FILE --checkpoint PATH [--prompt TEXT] [--tokens N]\n"
    "                      [--temperature T] [--top-k K] [--seed S] [--section.key=value ...]\n"
    "  generates byte-level text from the [train] model of FILE with the parameters of a\n"
    "  checkpoint (a folder, or a root: its newest) written by any strategy at any world size\n";

struct SampleOptions {
  std::string config_file;
  std::string checkpoint;
  std::string prompt = "\n";
  std::size_t tokens = 200;
  double temperature = 0.8;
  std::size_t top_k = 40;
  std::uint64_t seed = 1;
};

// Every parameter of every layer, read whole from the checkpoint by (layer, name).
class LoadedParameters {
 public:
  LoadedParameters(const Model& model, const std::filesystem::path& source) {
    const FileCheckpointReader reader(checkpoint_folder(source));
    const SliceReader slices(reader);
    std::map<std::pair<std::size_t, std::string>, const ParamId*> held;
    for (const auto& p : slices.index().params) held[{p.layer, p.name}] = &p;
    // A tied parameter is its owner's entry (FlatLayout resolves the tie).
    const FlatLayout layout = FlatLayout::of(model);
    for (std::size_t l = 0; l < model.layer_count(); ++l) {
      auto& layer = values_.emplace_back();
      const auto specs = model.layer(l).parameters();
      for (std::size_t s = 0; s < specs.size(); ++s) {
        const auto& spec = specs[s];
        const auto& owner = layout.params[layout.layer_params[l][s]];
        const auto it = held.find({owner.layer, owner.param});
        const std::string where = "checkpoint " + reader.folder().string() + ": ";
        if (it == held.end()) {
          throw CheckpointError(where + "has no parameter " + spec.name + " of layer " +
                                std::to_string(l) + " (" + model.layer(l).name() +
                                "); was it written for this model and these [model] options?");
        }
        if (it->second->shape != spec.shape) {
          throw CheckpointError(where + "holds " + describe(*it->second) + ", the model's " +
                                spec.name + " is " + shape_text(spec.shape) +
                                "; sample with the [model] options it was trained with");
        }
        const std::size_t rows = spec.shape.empty() ? 1 : spec.shape[0];
        layer.push_back(slices.read_slice(*it->second, StateKind::parameter, 0, 0, 0, rows));
      }
    }
    // A parameter the model does not have: most likely a head of its own where this model ties
    // it to the embedding, and sampling without it would silently use another matrix.
    for (const auto& p : slices.index().params) {
      const bool known =
          std::any_of(layout.params.begin(), layout.params.end(),
                      [&](const auto& f) { return f.layer == p.layer && f.param == p.name; });
      if (!known) {
        throw CheckpointError("checkpoint " + reader.folder().string() + ": holds " + describe(p) +
                              ", which this model does not have (it may tie that parameter to "
                              "another); sample with the [model] options it was trained with "
                              "(a gpt head of its own: tie_embeddings = false)");
      }
    }
    step_ = reader.manifest().step;
  }

  [[nodiscard]] std::vector<BufferView> views(std::size_t layer) {
    std::vector<BufferView> out;
    for (auto& v : values_[layer]) out.push_back(view_of(std::span<float>(v)));
    return out;
  }
  [[nodiscard]] std::int64_t step() const noexcept { return step_; }

 private:
  std::vector<std::vector<std::vector<float>>> values_;
  std::int64_t step_ = 0;
};

// The logits of the last position after `window`, [vocab].
std::vector<float> next_logits(const Model& model, LoadedParameters& params,
                               const std::vector<std::int64_t>& window) {
  Tensor x({1, window.size()}, DType::i64);
  std::copy(window.begin(), window.end(), x.as<std::int64_t>().begin());
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    LayerContext ctx;  // no backward: dropped after each layer
    x = model.layer(l).forward(x, params.views(l), ctx);
  }
  const auto all = x.as<float>();
  const std::size_t vocab = model.layout().classes;
  return {all.end() - static_cast<std::ptrdiff_t>(vocab), all.end()};
}

// Greedy at temperature 0; else a draw from softmax(logits / temperature) over the top_k.
std::int64_t choose(const std::vector<float>& logits, const SampleOptions& o, std::uint64_t draw) {
  std::vector<std::size_t> order(logits.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
  if (o.temperature == 0.0) return static_cast<std::int64_t>(order.front());
  const std::size_t k = o.top_k == 0 ? order.size() : std::min(o.top_k, order.size());
  std::vector<double> weight(k);
  const double top = logits[order.front()];
  for (std::size_t i = 0; i < k; ++i) {
    weight[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / o.temperature);
  }
  const double total = std::accumulate(weight.begin(), weight.end(), 0.0);
  double u = static_cast<double>(counter_uniform(o.seed, 0, draw)) * total;
  for (std::size_t i = 0; i < k; ++i) {
    if (u < weight[i]) return static_cast<std::int64_t>(order[i]);
    u -= weight[i];
  }
  return static_cast<std::int64_t>(order[k - 1]);
}

}  // namespace

int run_sample(const std::vector<std::string>& args) {
  SampleOptions o;
  po::options_description flags("sample");
  flags.add_options()("help,h", "this help")("config", po::value(&o.config_file), "INI file")(
      "checkpoint", po::value(&o.checkpoint), "checkpoint folder, or a root (its newest)")(
      "prompt", po::value(&o.prompt), "text to continue (default: a newline)")(
      "tokens", po::value(&o.tokens), "tokens to generate (default 200)")(
      "temperature", po::value(&o.temperature), "0: greedy; default 0.8")(
      "top-k", po::value(&o.top_k), "draw among the K most likely (0: all; default 40)")(
      "seed", po::value(&o.seed), "seed of the draws (default 1)");
  po::variables_map vm;
  const auto config_flags = parse_command_flags(args, flags, vm, "sample");
  if (vm.count("help") != 0U) {
    std::cout << kUsage << flags;
    return 0;
  }
  if (o.config_file.empty() || o.checkpoint.empty()) {
    throw UsageError("sample: --config FILE and --checkpoint PATH are required\n" +
                     std::string(kUsage));
  }
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature)) {
    throw UsageError("sample: --temperature must be a finite number >= 0 (0: greedy)");
  }
  if (o.prompt.empty()) throw UsageError("sample: --prompt needs at least one character");

  ConfigSources sources;
  sources.file = o.config_file;
  sources.flags = config_flags;
  PluginRegistry registry;
  registry.scan(Config::plugin_search_path(sources));
  // A training config may carry an [elastic] section: it loads here as it does for train.
  const Config config = Config::load(sources, registry, elastic_sections());
  const auto model = config.create<Model>(registry, "train", "model");
  const SampleLayout layout = model->layout();
  const std::string model_name = config.section("train").get_string("model");
  if (layout.input_dtype != DType::i64 || layout.input_shape.size() != 1 ||
      layout.target_shape != layout.input_shape) {
    throw ConfigError("[train] model = " + model_name + " takes " + describe(layout) +
                      ": tessera sample needs a language model (token ids in, the next token out)");
  }
  const std::size_t context = layout.input_shape[0];
  std::vector<std::int64_t> tokens;
  for (const unsigned char byte : o.prompt) {
    if (byte >= layout.classes) {
      throw ConfigError("[train] model = " + model_name + " has a vocabulary of " +
                        std::to_string(layout.classes) + " tokens; the prompt's byte " +
                        std::to_string(byte) + " is not one of them");
    }
    tokens.push_back(byte);
  }
  LoadedParameters params(*model, o.checkpoint);
  std::cout << o.prompt;
  for (std::size_t i = 0; i < o.tokens; ++i) {
    const std::size_t begin = tokens.size() > context ? tokens.size() - context : 0;
    const std::vector<std::int64_t> window(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                           tokens.end());
    const std::int64_t next = choose(next_logits(*model, params, window), o, i);
    tokens.push_back(next);
    std::cout << static_cast<char>(next);
    std::cout.flush();
  }
  std::cout << "\n";
  std::cerr << "tessera sample: " << o.tokens << " tokens after a prompt of " << o.prompt.size()
            << " bytes, from the checkpoint of step " << params.step() << "\n";
  return 0;
}

}  // namespace tessera::cli
