#pragma once
// The reference layers' computation on a GPU. cuda/device_compute.cpp implements it where
// tessera is built with CUDA (cuBLAS GEMMs and the kernels of cuda/layer_kernels.cu, all on the
// device's legacy default stream), host_only_compute.cpp elsewhere: CMake picks the file once, so
// no layer carries an #if.
//
// Every function runs on the device of its tensors, returns tensors from
// tessera::cuda::allocator_for(that device), and does not wait for the device unless it says so:
// the work is ordered on the default stream, where the allocator, the next layer and the nccl
// transport find it. Results are bitwise the same from run to run (no atomics; every reduction
// adds in a fixed order), though not bitwise the host's (cuBLAS sums a dot product in another
// order than OpenBLAS; CUDA's tanhf is not glibc's).

#include <cstddef>
#include <string>

#include "layers/activation.hpp"
#include "tessera/plugin/model.hpp"

namespace tessera::layers::device {

// Throws InvalidArgument, naming `layer`, unless this build computes on `device`: a CUDA device
// this process sees.
void require_computes_on(Device device, const std::string& layer);

// Throws InvalidArgument, naming `what`, unless the view's memory really is on its device (a view
// that says cuda:0 over host memory).
void require_memory(const BufferView& view, const std::string& what);

// y = x w^T (+ b when add_bias): x [n, in], w [out, in], b [out]; y is [n, out].
[[nodiscard]] Tensor linear_forward(const Tensor& x, const float* w, const float* b, std::size_t in,
                                    std::size_t out, bool add_bias);

// dw += dy^T x and db += the column sums of dy, adding rows 0..n-1 in order (the host's bits).
void linear_backward_params(const Tensor& x, const Tensor& dy, float* dw, float* db, std::size_t in,
                            std::size_t out);

// dx = dy w, [n, in].
[[nodiscard]] Tensor linear_backward_input(const Tensor& dy, const float* w, std::size_t in,
                                           std::size_t out);

// The activation of x, element-wise, and its backward from what forward saved (ReLU: its output,
// GELU: its input; see activation.hpp).
[[nodiscard]] Tensor activation_forward(ActivationKind kind, const Tensor& x);
[[nodiscard]] Tensor activation_backward(ActivationKind kind, const Tensor& saved,
                                         const Tensor& dy);

// softmax_cross_entropy.hpp's contract on device logits [n, classes]: targets (i64, n) on the host
// or on the logits' device; grad_logits on the logits' device; loss and correct on the host, so
// this one waits for the device.
[[nodiscard]] LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& targets,
                                               std::size_t classes);

}  // namespace tessera::layers::device
