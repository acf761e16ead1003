#pragma once
// The canonical flat layout of a model's parameters: every data-parallel strategy (ddp,
// zero1/2/3) keeps parameters as one flat fp32 vector in ParamSpec order and cuts it into
// contiguous shards. Checkpoints store slices of parameters (param_checkpoint.hpp); format-1
// checkpoints stored this layout as the blob flat/layout, which parse() still reads.

#include <cstddef>
#include <string>
#include <vector>

#include "tessera/plugin/model.hpp"

namespace tessera {

struct FlatParam {
  std::string name;   // "<layer index>.<layer name>.<param name>"
  std::string param;  // the ParamSpec name
  Shape shape;
  std::size_t offset = 0;  // elements from the start of the flat vector
  std::size_t count = 0;
  std::size_t layer = 0;
  bool weight_decay = true;  // the ParamSpec's (weight_decay.hpp); format-1 layouts: true
};

struct FlatLayout {
  std::vector<FlatParam> params;
  std::size_t total = 0;  // unpadded element count
  // Per model layer, the index into `params` of each of its ParamSpecs, in order. A tied spec
  // (ParamSpec::tied_to) has no entry of its own: it maps to its owner's, a parameter of an
  // earlier layer. Empty for a layout parsed from a format-1 checkpoint.
  std::vector<std::vector<std::size_t>> layer_params;

  // Every parameter of every layer, in order, a tied one once (at its owner). Throws
  // InvalidArgument for a non-f32 parameter, and ConfigError for a tie to a name no earlier
  // layer declares (or several do) and for a tie whose shape or dtype differs from its owner's,
  // naming both layers.
  [[nodiscard]] static FlatLayout of(const Model& model);
  // Whether spec `spec` of layer `layer` uses a parameter an earlier layer owns (a tie).
  [[nodiscard]] bool borrowed(std::size_t layer, std::size_t spec) const {
    return params[layer_params[layer][spec]].layer != layer;
  }
  // Whether any layer borrows a parameter.
  [[nodiscard]] bool has_ties() const noexcept;
  // The flat/layout blob of a format-1 checkpoint; `param` is left empty (the text does not
  // separate the layer's name from the parameter's). Throws CheckpointError on malformed text.
  [[nodiscard]] static FlatLayout parse(const std::string& text);
  friend bool operator==(const FlatLayout&, const FlatLayout&);
};

// One shard of the flat vector, [begin, end); end may pass layout.total (padding).
struct FlatShard {
  std::size_t begin = 0;
  std::size_t end = 0;
};

}  // namespace tessera
