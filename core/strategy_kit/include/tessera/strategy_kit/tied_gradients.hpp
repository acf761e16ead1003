#pragma once
// TiedGradients: where the gradient of a tied parameter (ParamSpec::tied_to) collects from the
// layers that borrow it until its owner's backward. Backward runs from the last layer down, so
// the borrowers (GPT-2's output head) compute before the owner (the token embedding); a
// strategy whose gradient memory follows the layers (zero2's staging windows, zero3's units)
// has no place for the owner's gradient yet. So every strategy does the same: a borrower adds
// into a buffer of this helper, and just before the owner's backward the buffer is added into
// the owner's gradient and cleared. The additions are the same, in the same order, under every
// strategy, so ddp and zero1/2/3 keep equal bits.
//
// Where the owner's gradient is in memory during the borrower's backward and still zero there
// (every layer's gradient in one buffer, one micro-batch a step: ddp's and zero1's), the
// borrower may add into it directly (add_into_owners): 0 + x is x, so the sum has the same bits
// without the buffer's extra write, read and clearing (GPT-2's head: [50257 x 768] floats).

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "tessera/base/buffer_view.hpp"
#include "tessera/base/tensor.hpp"
#include "tessera/strategy_kit/flat_state.hpp"

namespace tessera {

class TiedGradients {
 public:
  TiedGradients() = default;
  // The ties of `layout` among layers [first, last) whose owner lies in the range too (a
  // pipeline stage's; a borrower whose owner is on another stage holds a copy, which is the
  // strategy's business). Gradients live on `device`; on any but the host, a model with ties in
  // the range is refused (ConfigError naming [runtime] device): the helper adds in host memory.
  // held_count(param): the elements of FlatLayout parameter `param` this rank's layers compute
  // with, when they hold a tensor-parallel slice of it (the same slice in owner and borrowers);
  // unset, the whole parameter's.
  TiedGradients(const FlatLayout& layout, Device device, std::size_t first = 0,
                std::size_t last = SIZE_MAX,
                const std::function<std::size_t(std::size_t param)>& held_count = {});

  [[nodiscard]] bool empty() const noexcept { return ties_.empty(); }

  // Call with the views layer `layer`'s backward is about to add its gradients into, one per
  // ParamSpec, right before that backward. A borrowed parameter's view is replaced by the
  // helper's buffer; an owned parameter that others borrow receives (+=) what they collected,
  // and the buffer is cleared for the next micro-batch. Not thread-safe.
  void prepare(std::size_t layer, std::span<BufferView> grads);

  // Borrowers add straight into their owner's gradient, `owner_gradient(param)` (the view of
  // FlatLayout parameter `param`'s gradient, valid as long as this helper is used), and the
  // owner's backward adds nothing more. Only for a strategy that keeps every layer's gradient
  // in place through the backward and zeroes it before each step's single micro-batch: with
  // more micro-batches the owner's gradient holds the earlier ones' sum when the borrower adds,
  // and the additions would group differently from the collecting strategies'. Frees the
  // buffers.
  void add_into_owners(const std::function<BufferView(std::size_t param)>& owner_gradient);

  [[nodiscard]] std::size_t buffer_bytes() const noexcept;

 private:
  struct Tie {
    std::size_t param = 0;       // FlatLayout index of the parameter
    std::size_t owner = 0;       // the layer that owns the parameter
    std::size_t owner_spec = 0;  // its place among that layer's ParamSpecs
    std::vector<float> collected;
    BufferView owner_gradient;  // set by add_into_owners: borrowers add here instead
  };
  struct Use {
    std::size_t layer = 0;
    std::size_t spec = 0;
    std::size_t tie = 0;
  };
  std::vector<Tie> ties_;
  std::vector<Use> borrowers_;
};

// For add_into_owners: the view of a parameter's gradient in a flat gradient buffer laid out as
// `layout` (ddp's, zero1's). Both must outlive the returned function's use.
[[nodiscard]] std::function<BufferView(std::size_t param)> flat_gradient_of(
    const FlatLayout& layout, const Tensor& flat_gradients);

}  // namespace tessera
