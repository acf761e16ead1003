#include "tessera/strategy_kit/flat_state.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <sstream>

#include "tessera/base/error.hpp"

namespace tessera {

FlatLayout FlatLayout::of(const Model& model) {
  FlatLayout layout;
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    const auto& layer = model.layer(l);
    for (const auto& spec : layer.parameters()) {
      TESSERA_CHECK(spec.dtype == DType::f32,
                    "parameter " + spec.name + " of layer " + layer.name() + " is not f32");
      const std::size_t count = element_count(spec.shape);
      layout.params.push_back({std::to_string(l) + "." + layer.name() + "." + spec.name, spec.name,
                               spec.shape, layout.total, count, l, spec.weight_decay});
      layout.total += count;
    }
  }
  return layout;
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
