#include "tessera/strategy_kit/tied_gradients.hpp"

#include <algorithm>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera {

TiedGradients::TiedGradients(const FlatLayout& layout, Device device, std::size_t first,
                             std::size_t last,
                             const std::function<std::size_t(std::size_t param)>& held_count) {
  last = std::min(last, layout.layer_params.size());
  for (std::size_t l = first; l < last; ++l) {
    for (std::size_t s = 0; s < layout.layer_params[l].size(); ++s) {
      if (!layout.borrowed(l, s)) continue;
      const std::size_t param = layout.layer_params[l][s];
      const FlatParam& owner = layout.params[param];
      if (owner.layer < first) continue;  // on another pipeline stage
      if (device != Device::cpu()) {
        throw ConfigError("tied parameter " + owner.name + " (used by layer " + std::to_string(l) +
                          " too) has its gradient on " + to_string(device) +
                          ": tied parameters are supported in host memory only; train this "
                          "model with [runtime] device = cpu");
      }
      const auto found = std::find_if(ties_.begin(), ties_.end(),
                                      [&](const Tie& tie) { return tie.param == param; });
      const auto tie = static_cast<std::size_t>(found - ties_.begin());
      if (found == ties_.end()) {
        const auto& owner_params = layout.layer_params[owner.layer];
        const auto spec = static_cast<std::size_t>(
            std::find(owner_params.begin(), owner_params.end(), param) - owner_params.begin());
        const std::size_t count = held_count ? held_count(param) : owner.count;
        ties_.push_back({param, owner.layer, spec, std::vector<float>(count, 0.0F), {}});
      }
      borrowers_.push_back({l, s, tie});
    }
  }
}

void TiedGradients::add_into_owners(
    const std::function<BufferView(std::size_t param)>& owner_gradient) {
  for (auto& tie : ties_) {
    tie.owner_gradient = owner_gradient(tie.param);
    TESSERA_CHECK(tie.owner_gradient.count == tie.collected.size(),
                  "tied gradients: the owner's gradient view has the wrong size");
    tie.collected = std::vector<float>();
  }
}

void TiedGradients::prepare(std::size_t layer, std::span<BufferView> grads) {
  for (const Use& use : borrowers_) {
    if (use.layer != layer) continue;
    auto& tie = ties_[use.tie];
    grads[use.spec] = tie.owner_gradient.data != nullptr ? tie.owner_gradient
                                                         : view_of(std::span<float>(tie.collected));
  }
  for (auto& tie : ties_) {
    if (tie.owner != layer || tie.owner_gradient.data != nullptr) continue;
    const auto owner = grads[tie.owner_spec].host_span<float>("tied parameter gradient");
    TESSERA_CHECK(owner.size() == tie.collected.size(),
                  "tied gradients: the owner's gradient view has the wrong size");
    for (std::size_t i = 0; i < owner.size(); ++i) owner[i] += tie.collected[i];
    std::fill(tie.collected.begin(), tie.collected.end(), 0.0F);
  }
}

std::size_t TiedGradients::buffer_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& tie : ties_) bytes += tie.collected.size() * sizeof(float);
  return bytes;
}

std::function<BufferView(std::size_t param)> flat_gradient_of(const FlatLayout& layout,
                                                              const Tensor& flat_gradients) {
  return [&layout, &flat_gradients](std::size_t param) {
    const FlatParam& flat = layout.params[param];
    return flat_gradients.view().slice(flat.offset, flat.count);
  };
}

}  // namespace tessera
