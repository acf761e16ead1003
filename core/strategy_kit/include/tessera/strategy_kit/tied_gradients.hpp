#pragma once
// TiedGradients: where the gradient of a tied parameter (ParamSpec::tied_to) collects from the
// layers that borrow it until its owner's backward. Backward runs from the last layer down, so
// the borrowers (GPT-2's output head) compute before the owner (the token embedding); a
// strategy whose gradient memory follows the layers (zero2's staging windows, zero3's units)
// has no place for the owner's gradient yet. So every strategy does the same: a borrower adds
// into a buffer of this helper, and just before the owner's backward the buffer is added into
// the owner's gradient and cleared. The additions are the same, in the same order, under every
// strategy, so ddp and zero1/2/3 keep equal bits.

#include <cstddef>
#include <span>
#include <vector>

#include "tessera/base/buffer_view.hpp"
#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera {

class TiedGradients {
 public:
  TiedGradients() = default;
  // The ties of `layout` among layers [first, last) whose owner lies in the range too (a
  // pipeline stage's; a borrower whose owner is on another stage holds a copy, which is the
  // strategy's business). Gradients live on `device`; on any but the host, a model with ties in
  // the range is refused (ConfigError naming [runtime] device): the helper adds in host memory.
  TiedGradients(const FlatLayout& layout, Device device, std::size_t first = 0,
                std::size_t last = SIZE_MAX);

  [[nodiscard]] bool empty() const noexcept { return ties_.empty(); }

  // Call with the views layer `layer`'s backward is about to add its gradients into, one per
  // ParamSpec, right before that backward. A borrowed parameter's view is replaced by the
  // helper's buffer; an owned parameter that others borrow receives (+=) what they collected,
  // and the buffer is cleared for the next micro-batch. Not thread-safe.
  void prepare(std::size_t layer, std::span<BufferView> grads);

  [[nodiscard]] std::size_t buffer_bytes() const noexcept;

 private:
  struct Tie {
    std::size_t param = 0;       // FlatLayout index of the parameter
    std::size_t owner = 0;       // the layer that owns the parameter
    std::size_t owner_spec = 0;  // its place among that layer's ParamSpecs
    std::vector<float> collected;
  };
  struct Use {
    std::size_t layer = 0;
    std::size_t spec = 0;
    std::size_t tie = 0;
  };
  std::vector<Tie> ties_;
  std::vector<Use> borrowers_;
};

}  // namespace tessera
