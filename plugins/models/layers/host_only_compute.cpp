// device_compute.hpp where tessera is built without CUDA: the layers compute on the host only,
// and require_computes_on refuses every device before any of the others could be reached.
#include "layers/device_compute.hpp"
#include "tessera/base/error.hpp"

namespace tessera::layers::device {
namespace {

[[noreturn]] void no_device(Device device) {
  throw InvalidArgument(
      "this build of tessera has no CUDA support, so the reference layers "
      "cannot compute on " +
      to_string(device));
}

}  // namespace

void require_computes_on(Device device, const std::string& layer) {
  throw InvalidArgument(layer + ": cannot compute on " + to_string(device) +
                        "; this build of tessera has no CUDA support, keep the tensors on the "
                        "host");
}

void require_memory(const BufferView& view, const std::string& /*what*/) {
  no_device(view.device);
}

Tensor linear_forward(const Tensor& x, const float* /*w*/, const float* /*b*/, std::size_t /*in*/,
                      std::size_t /*out*/, bool /*add_bias*/) {
  no_device(x.device());
}

void linear_backward_params(const Tensor& x, const Tensor& /*dy*/, float* /*dw*/, float* /*db*/,
                            std::size_t /*in*/, std::size_t /*out*/) {
  no_device(x.device());
}

Tensor linear_backward_input(const Tensor& dy, const float* /*w*/, std::size_t /*in*/,
                             std::size_t /*out*/) {
  no_device(dy.device());
}

Tensor activation_forward(ActivationKind /*kind*/, const Tensor& x) {
  no_device(x.device());
}

Tensor activation_backward(ActivationKind /*kind*/, const Tensor& saved, const Tensor& /*dy*/) {
  no_device(saved.device());
}

LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& /*targets*/,
                                 std::size_t /*classes*/) {
  no_device(logits.device());
}

}  // namespace tessera::layers::device
