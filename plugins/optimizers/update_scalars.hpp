#pragma once
// The per-step scalars of each optimizer's element-wise update, computed once on the host and
// handed to the host loop's device twin. Plain structs with no tessera or CUDA headers, so the
// .cu kernels include them too.

namespace tessera::optimizers {

// sgd/sgd.hpp has the formula; momentum == 0 means no state slot.
struct SgdScalars {
  float lr = 0.0F;
  float weight_decay = 0.0F;
  float momentum = 0.0F;
  float keep = 1.0F;  // 1 - dampening
  bool first = true;  // step 1: the buffer starts at the gradient, undampened
  bool nesterov = false;
};

// adam/adam.hpp has the formula; decay is AdamW's factor, l2 Adam's gradient penalty.
struct AdamScalars {
  float beta1 = 0.0F;
  float beta2 = 0.0F;
  float one_minus_b1 = 0.0F;
  float one_minus_b2 = 0.0F;
  float step_size = 0.0F;  // lr / (1 - beta1^t)
  float bc2_sqrt = 0.0F;   // sqrt(1 - beta2^t)
  float eps = 0.0F;
  float decay = 0.0F;
  float l2 = 0.0F;
  bool decoupled = false;
};

// rmsprop/rmsprop.hpp has the formula and the order of the state slots.
struct RmspropScalars {
  float lr = 0.0F;
  float alpha = 0.0F;
  float one_minus_alpha = 0.0F;
  float eps = 0.0F;
  float weight_decay = 0.0F;
  float momentum = 0.0F;
  bool use_momentum = false;
  bool centered = false;
};

}  // namespace tessera::optimizers
