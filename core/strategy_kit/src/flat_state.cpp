#include "tessera/strategy_kit/flat_state.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <sstream>

#include "tessera/base/error.hpp"

namespace tessera {

namespace {

std::string layer_text(const Model& model, std::size_t layer) {
  return "layer " + std::to_string(layer) + " (" + model.layer(layer).name() + ")";
}

std::string spec_text(const ParamSpec& spec) {
  return std::string(dtype_name(spec.dtype)) + " " + shape_text(spec.shape);
}

// The index in `layout.params` of the parameter an earlier layer declares as `spec.tied_to`;
// `owned` holds the spec of each of layout.params.
std::size_t owner_of(const Model& model, const FlatLayout& layout,
                     const std::vector<ParamSpec>& owned, std::size_t layer,
                     const ParamSpec& spec) {
  const std::string tie =
      layer_text(model, layer) + " ties its parameter " + spec.name + " to '" + spec.tied_to + "'";
  std::vector<std::size_t> found;
  for (std::size_t i = 0; i < layout.params.size(); ++i) {
    if (layout.params[i].param == spec.tied_to) found.push_back(i);
  }
  if (found.empty()) {
    throw ConfigError(tie +
                      ", which no earlier layer declares as its own; a tie names a "
                      "parameter of a layer before it");
  }
  if (found.size() > 1) {
    throw ConfigError(tie + ", which " + layer_text(model, layout.params[found[0]].layer) +
                      " and " + layer_text(model, layout.params[found[1]].layer) +
                      " both declare; a tie needs a name only one layer uses");
  }
  const FlatParam& owner = layout.params[found.front()];
  const ParamSpec& owner_spec = owned[found.front()];
  if (owner_spec.shape != spec.shape || owner_spec.dtype != spec.dtype) {
    throw ConfigError(tie + " of " + layer_text(model, owner.layer) +
                      ", but they differ: " + spec.name + " is " + spec_text(spec) + ", " +
                      owner_spec.name + " is " + spec_text(owner_spec) +
                      "; a tied parameter needs its owner's shape and dtype");
  }
  return found.front();
}

}  // namespace

FlatLayout FlatLayout::of(const Model& model) {
  FlatLayout layout;
  std::vector<ParamSpec> owned;  // the spec of each of layout.params
  layout.layer_params.resize(model.layer_count());
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    const auto& layer = model.layer(l);
    for (const auto& spec : layer.parameters()) {
      if (!spec.tied_to.empty()) {
        layout.layer_params[l].push_back(owner_of(model, layout, owned, l, spec));
        continue;
      }
      TESSERA_CHECK(spec.dtype == DType::f32,
                    "parameter " + spec.name + " of layer " + layer.name() + " is not f32");
      const std::size_t count = element_count(spec.shape);
      layout.layer_params[l].push_back(layout.params.size());
      layout.params.push_back({std::to_string(l) + "." + layer.name() + "." + spec.name, spec.name,
                               spec.shape, layout.total, count, l, spec.weight_decay});
      layout.total += count;
      owned.push_back(spec);
    }
  }
  return layout;
}

bool FlatLayout::has_ties() const noexcept {
  for (std::size_t l = 0; l < layer_params.size(); ++l) {
    for (const std::size_t index : layer_params[l]) {
      if (params[index].layer != l) return true;
    }
  }
  return false;
}

FlatLayout FlatLayout::parse(const std::string& text) {
  FlatLayout layout;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  std::istringstream head(line);
  std::string magic, version, word;
  if (!(head >> magic >> version >> word >> layout.total) || magic != "flat_layout" ||
      version != "1" || word != "total") {
    throw CheckpointError("checkpoint blob 'flat/layout' is malformed: '" + line + "'");
  }
  // Parameters follow each other without gaps, each as large as its shape says, and add up
  // to the total: a layout that does not is refused here, before anything is sized by it.
  std::size_t next = 0;
  while (std::getline(in, line)) {
    const auto bad = [&](const std::string& what) {
      throw CheckpointError("checkpoint blob 'flat/layout' " + what + ": '" + line + "'");
    };
    std::istringstream row(line);
    FlatParam p;
    std::string shape;
    if (!(row >> word >> p.layer >> p.offset >> p.count >> shape) || word != "param") {
      bad("has a bad line");
    }
    std::getline(row >> std::ws, p.name);
    std::size_t elements = 1;
    if (shape != "scalar") {
      std::istringstream dims(shape);
      std::string dim;
      while (std::getline(dims, dim, 'x')) {
        std::size_t value = 0;
        const auto [end, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), value);
        if (dim.empty() || ec != std::errc() || end != dim.data() + dim.size() ||
            __builtin_mul_overflow(elements, value, &elements)) {
          bad("has a bad shape '" + shape + "'");
        }
        p.shape.push_back(value);
      }
    }
    if (elements != p.count) bad("gives a parameter of shape " + shape + " another count");
    if (p.offset != next) bad("leaves a gap or overlap before a parameter");
    if (__builtin_add_overflow(next, p.count, &next)) bad("overflows");
    layout.params.push_back(std::move(p));
  }
  if (next != layout.total) {
    throw CheckpointError("checkpoint blob 'flat/layout' lists " + std::to_string(next) +
                          " elements, its total says " + std::to_string(layout.total));
  }
  return layout;
}

bool operator==(const FlatLayout& a, const FlatLayout& b) {
  if (a.total != b.total || a.params.size() != b.params.size()) return false;
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    const auto& x = a.params[i];
    const auto& y = b.params[i];
    if (x.name != y.name || x.shape != y.shape || x.offset != y.offset || x.count != y.count)
      return false;
  }
  return true;
}

}  // namespace tessera
