#include "model_split.hpp"

#include <algorithm>
#include <iomanip>
#include <limits>
#include <memory>
#include <sstream>

#include "tessera/base/error.hpp"

namespace tessera::hybrid {

PartitionKind parse_partition(const std::string& name) {
  if (name == "uniform") return PartitionKind::uniform;
  if (name == "balanced") return PartitionKind::balanced;
  throw ConfigError("[strategy.hybrid] partition = " + name +
                    " is not a partition; use uniform or balanced");
}

namespace {

std::vector<StageRange> uniform_partition(std::size_t layers, std::size_t stages) {
  std::vector<StageRange> ranges;
  std::size_t first = 0;
  for (std::size_t s = 0; s < stages; ++s) {
    const std::size_t count = layers / stages + (s < layers % stages ? 1 : 0);
    ranges.push_back({first, first + count});
    first += count;
  }
  return ranges;
}

// The linear-partition dynamic programme: best[k][i] is the smallest possible largest cost of
// cutting layers [0, i) into k stages. O(stages * layers^2), nothing for a model's layer count.
std::vector<StageRange> balanced_partition(std::span<const double> costs, std::size_t stages) {
  const std::size_t n = costs.size();
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<std::size_t>> cut(stages + 1, std::vector<std::size_t>(n + 1, 0));
  best[0][0] = 0.0;
  for (std::size_t k = 1; k <= stages; ++k) {
    for (std::size_t i = k; i <= n; ++i) {
      // The last stage is [j, i); the latest j reaching the optimum gives earlier stages as many
      // layers as they can take.
      for (std::size_t j = k - 1; j < i; ++j) {
        const double cost = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (cost <= best[k][i]) {
          best[k][i] = cost;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<StageRange> ranges(stages);
  std::size_t end = n;
  for (std::size_t k = stages; k >= 1; --k) {
    ranges[k - 1] = {cut[k][end], end};
    end = cut[k][end];
  }
  return ranges;
}

}  // namespace

std::vector<StageRange> partition_layers(std::span<const double> costs, std::size_t stages,
                                         PartitionKind kind) {
  if (stages < 1 || stages > costs.size()) {
    throw ConfigError("[strategy.hybrid] pipeline_parallel = " + std::to_string(stages) +
                      " stages for a model of " + std::to_string(costs.size()) +
                      " layers: every stage needs at least one layer; use a pipeline_parallel "
                      "between 1 and " +
                      std::to_string(costs.size()));
  }
  return kind == PartitionKind::uniform ? uniform_partition(costs.size(), stages)
                                        : balanced_partition(costs, stages);
}

std::vector<double> estimated_layer_costs(const Model& model) {
  std::vector<double> costs;
  const SampleLayout layout = model.layout();
  Shape shape{1};
  for (auto d : layout.input_shape) shape.push_back(d);
  // A layer fed integer ids (a token embedding) looks one row of its table up per id: its work
  // is its output, not a product with every element (GPT-2's wte would count as 5 blocks).
  const bool ids_in = layout.input_dtype == DType::i64 || layout.input_dtype == DType::i32 ||
                      layout.input_dtype == DType::u8;
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    const Layer& layer = model.layer(l);
    double params = 0.0;
    for (const auto& spec : layer.parameters())
      params += static_cast<double>(element_count(spec.shape));
    shape = layer.output_shape(shape);
    const bool looks_up = l == 0 && ids_in;
    costs.push_back((looks_up ? 0.0 : 2.0 * params) + static_cast<double>(element_count(shape)));
  }
  return costs;
}

namespace {

std::string role_name(TensorParallelRole role) {
  switch (role) {
    case TensorParallelRole::column: return "column-parallel";
    case TensorParallelRole::row: return "row-parallel";
    case TensorParallelRole::pair: return "as a column/row pair inside the layer";
    case TensorParallelRole::vocabulary: return "vocabulary-parallel";
    case TensorParallelRole::replicate: break;
  }
  return "replicated";
}

bool can_split(const Layer& layer, TensorParallelRole role) {
  return layer.sliced(role, {0, 1}) != nullptr;
}

// A layer that may sit between a column- and a row-parallel layer: it computes the same on a
// slice of the features as on the whole.
bool element_wise(const Layer& layer, const Shape& input) {
  return layer.parameters().empty() && !can_split(layer, TensorParallelRole::column) &&
         !can_split(layer, TensorParallelRole::row) && layer.output_shape(input) == input;
}

// Throws ConfigError unless every split parameter of `layer` in `role` divides by tp.
void check_divides(const Layer& layer, std::size_t index, TensorParallelRole role, int tp) {
  std::unique_ptr<Layer> slice;
  try {
    slice = layer.sliced(role, {0, tp});
  } catch (const InvalidArgument& e) {
    throw ConfigError("[strategy.hybrid] tensor_parallel = " + std::to_string(tp) +
                      " cannot split layer " + std::to_string(index) + " (" + layer.name() +
                      "): " + e.what());
  }
  for (const auto& spec : slice->parameters()) {
    if (spec.slice.whole()) continue;
    const std::size_t extent = spec.slice.full_shape.at(spec.slice.dim) / spec.slice.blocks;
    // By role: what a split cuts of a Linear (its rows or its columns), or of a pair's part.
    static const char* const features[] = {"", "output features", "input features", "features"};
    if (extent % static_cast<std::size_t>(tp) != 0) {
      throw ConfigError(
          "[strategy.hybrid] tensor_parallel = " + std::to_string(tp) + " does not divide the " +
          std::to_string(extent) + " " + features[static_cast<std::size_t>(role)] + " of layer " +
          std::to_string(index) + " (" + spec.name + "), which runs " + role_name(role) +
          "; use a tensor_parallel that divides every split layer's features");
    }
  }
}

// The shape of one sample entering each layer of `model`.
std::vector<Shape> layer_inputs(const Model& model) {
  std::vector<Shape> inputs;
  Shape shape{1};
  for (auto d : model.layout().input_shape) shape.push_back(d);
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    inputs.push_back(shape);
    shape = model.layer(l).output_shape(shape);
  }
  return inputs;
}

// `layer` split by vocabulary as tensor rank `slice` holds it; ConfigError naming the layer when
// it cannot be (a vocabulary of fewer tokens than tensor ranks).
std::unique_ptr<Layer> vocabulary_part(const Layer& layer, std::size_t index, TensorSlice slice) {
  try {
    return layer.sliced(TensorParallelRole::vocabulary, slice);
  } catch (const InvalidArgument& e) {
    throw ConfigError("[strategy.hybrid] tensor_parallel = " + std::to_string(slice.size) +
                      " cannot split layer " + std::to_string(index) + " (" + layer.name() +
                      ") by vocabulary: " + e.what());
  }
}

// Whether `part` (a vocabulary split of `layer`) gives a slice of the classes, not the whole
// output: a head rather than an embedding.
bool splits_output(const Layer& layer, const Layer& part, const Shape& input) {
  return part.output_shape(input) != layer.output_shape(input);
}

}  // namespace

std::vector<TensorParallelRole> tensor_parallel_roles(const Model& model, int tensor_parallel) {
  const std::size_t n = model.layer_count();
  std::vector<TensorParallelRole> roles(n, TensorParallelRole::replicate);
  if (tensor_parallel <= 1) return roles;
  const std::vector<Shape> inputs = layer_inputs(model);  // of one sample
  bool any = false;
  for (std::size_t l = 0; l < n; ++l) {
    if (!can_split(model.layer(l), TensorParallelRole::pair)) continue;
    check_divides(model.layer(l), l, TensorParallelRole::pair, tensor_parallel);
    roles[l] = TensorParallelRole::pair;
    any = true;
  }
  // Only a model that says it reads a vocabulary slice in its loss is asked for the role (a layer
  // built before ABI 3.1 might not refuse a role it never knew).
  if (dynamic_cast<const VocabularyParallelModel*>(&model) != nullptr) {
    for (std::size_t l = 0; l < n; ++l) {
      const Layer& layer = model.layer(l);
      if (roles[l] != TensorParallelRole::replicate ||
          !can_split(layer, TensorParallelRole::vocabulary))
        continue;
      const auto part = vocabulary_part(layer, l, {0, tensor_parallel});
      if (l + 1 < n && splits_output(layer, *part, inputs[l])) {
        throw ConfigError("[strategy.hybrid] tensor_parallel = " + std::to_string(tensor_parallel) +
                          ": layer " + std::to_string(l) + " (" + layer.name() +
                          ") splits its output by vocabulary but is not the "
                          "model's last layer; only the logits the loss reads may be a "
                          "vocabulary slice");
      }
      roles[l] = TensorParallelRole::vocabulary;
      any = true;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (roles[i] != TensorParallelRole::replicate ||
        !can_split(model.layer(i), TensorParallelRole::column))
      continue;
    std::size_t j = i + 1;
    while (j < n && element_wise(model.layer(j), inputs[j])) ++j;
    if (j >= n || roles[j] != TensorParallelRole::replicate ||
        !can_split(model.layer(j), TensorParallelRole::row))
      continue;
    check_divides(model.layer(i), i, TensorParallelRole::column, tensor_parallel);
    check_divides(model.layer(j), j, TensorParallelRole::row, tensor_parallel);
    roles[i] = TensorParallelRole::column;
    roles[j] = TensorParallelRole::row;
    any = true;
    i = j;
  }
  if (!any) {
    throw ConfigError("[strategy.hybrid] tensor_parallel = " + std::to_string(tensor_parallel) +
                      " but the model has no pair of layers to split (a column-parallel layer "
                      "such as a Linear, element-wise layers, then a row-parallel one); use "
                      "tensor_parallel = 1");
  }
  return roles;
}

std::optional<VocabularySlice> vocabulary_slice_of(const Model& model,
                                                   std::span<const TensorParallelRole> roles,
                                                   TensorSlice slice) {
  const std::size_t n = model.layer_count();
  if (n == 0 || roles.size() != n || roles[n - 1] != TensorParallelRole::vocabulary) {
    return std::nullopt;
  }
  const Layer& head = model.layer(n - 1);
  const Shape input = layer_inputs(model).back();
  const auto part = vocabulary_part(head, n - 1, slice);
  if (!splits_output(head, *part, input)) return std::nullopt;
  const std::size_t classes = head.output_shape(input).back();
  const auto [begin, end] = slice.range_of(classes);
  if (part->output_shape(input).back() != end - begin) {
    throw ConfigError("[strategy.hybrid] tensor_parallel = " + std::to_string(slice.size) +
                      ": layer " + std::to_string(n - 1) + " (" + head.name() + ") gives tensor " +
                      "rank " + std::to_string(slice.rank) + " " +
                      std::to_string(part->output_shape(input).back()) + " of its " +
                      std::to_string(classes) + " classes, not the rows [" + std::to_string(begin) +
                      ", " + std::to_string(end) + ") TensorSlice::range_of gives it");
  }
  return VocabularySlice{begin, end, classes, nullptr};
}

namespace {

// What layer `layer` holds of its spec `spec` as tensor rank `rank`.
ParamSpec held_spec(const Model& model, std::span<const TensorParallelRole> roles,
                    std::size_t layer, std::size_t spec, TensorSlice slice) {
  if (roles[layer] == TensorParallelRole::replicate) return model.layer(layer).parameters()[spec];
  return model.layer(layer).sliced(roles[layer], slice)->parameters()[spec];
}

}  // namespace

void check_tied_slices(const Model& model, const FlatLayout& layout,
                       std::span<const TensorParallelRole> roles, int tensor_parallel) {
  if (tensor_parallel <= 1) return;
  for (std::size_t l = 0; l < layout.layer_params.size(); ++l) {
    for (std::size_t s = 0; s < layout.layer_params[l].size(); ++s) {
      if (!layout.borrowed(l, s)) continue;
      const std::size_t index = layout.layer_params[l][s];
      const std::size_t owner = layout.params[index].layer;
      const auto& owned = layout.layer_params[owner];
      const auto at_owner =
          static_cast<std::size_t>(std::find(owned.begin(), owned.end(), index) - owned.begin());
      for (int r = 0; r < tensor_parallel; ++r) {
        const TensorSlice slice{r, tensor_parallel};
        const ParamSpec mine = held_spec(model, roles, l, s, slice);
        const ParamSpec theirs = held_spec(model, roles, owner, at_owner, slice);
        if (mine.slice == theirs.slice && mine.shape == theirs.shape) continue;
        throw ConfigError(
            "[strategy.hybrid] tensor_parallel = " + std::to_string(tensor_parallel) + ": layer " +
            std::to_string(l) + " (" + model.layer(l).name() + ", " + role_name(roles[l]) +
            ") ties its " + mine.name + " to " + theirs.name + " of layer " +
            std::to_string(owner) + " (" + model.layer(owner).name() + ", " +
            role_name(roles[owner]) + "), but tensor rank " + std::to_string(r) +
            " would hold other parts of it in the two (a tied parameter is one storage); split "
            "both layers alike, untie the parameter or use tensor_parallel = 1");
      }
    }
  }
}

namespace {

std::size_t parameter_bytes(const Layer& layer) {
  std::size_t bytes = 0;
  for (const auto& spec : layer.parameters()) {
    if (spec.tied_to.empty()) bytes += element_count(spec.shape) * sizeof(float);
  }
  return bytes;
}

}  // namespace

std::string describe_tensor_parallel_plan(const Model& model,
                                          std::span<const TensorParallelRole> roles,
                                          int tensor_parallel) {
  std::ostringstream text;
  text << "hybrid: tensor-parallel plan over " << tensor_parallel << " tensor ranks\n";
  text << "  layer  name                  split                                  "
          "bytes per rank     whole\n";
  std::size_t rank_total = 0;
  std::size_t whole_total = 0;
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    const Layer& layer = model.layer(l);
    const TensorParallelRole role = l < roles.size() ? roles[l] : TensorParallelRole::replicate;
    const std::size_t whole = parameter_bytes(layer);
    const std::size_t held = role == TensorParallelRole::replicate
                                 ? whole
                                 : parameter_bytes(*layer.sliced(role, {0, tensor_parallel}));
    rank_total += held;
    whole_total += whole;
    text << "  " << std::setw(5) << l << "  " << std::left << std::setw(20) << layer.name() << "  "
         << std::setw(37) << role_name(role) << std::right << "  " << std::setw(14) << held << "  "
         << std::setw(8) << whole;
    // A tied parameter's bytes are its owner's line's.
    for (const auto& spec : layer.parameters()) {
      if (!spec.tied_to.empty()) text << "  (" << spec.name << " is " << spec.tied_to << ")";
    }
    text << "\n";
  }
  text << "  total" << std::string(62, ' ') << std::setw(14) << rank_total << "  " << std::setw(8)
       << whole_total << "\n";
  return text.str();
}

}  // namespace tessera::hybrid
