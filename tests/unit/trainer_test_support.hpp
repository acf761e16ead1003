#pragma once
// What the trainer tests share: a data set that records the training samples gathered from it,
// and the small synthetic task and model they train.
#include <cstddef>
#include <memory>
#include <span>

#include "mlp/mlp_model.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/plugin/dataset.hpp"

namespace tessera::testing {

// Forwards to `data`; each gather of training samples is shown to record() first (from the
// gathering rank's thread: derived classes lock what they keep).
class RecordingDatasetBase : public Dataset {
 public:
  explicit RecordingDatasetBase(std::shared_ptr<const Dataset> data) : data_(std::move(data)) {}
  [[nodiscard]] std::size_t size(Split split) const noexcept override { return data_->size(split); }
  [[nodiscard]] SampleLayout layout() const override { return data_->layout(); }
  [[nodiscard]] Batch gather(Split split, std::span<const std::size_t> indices) const override {
    if (split == Split::train) record(indices);
    return data_->gather(split, indices);
  }

 protected:
  virtual void record(std::span<const std::size_t> indices) const = 0;

 private:
  std::shared_ptr<const Dataset> data_;
};

// `samples` training samples of 16 features in 4 classes, 30 test samples.
inline std::shared_ptr<const Dataset> small_synthetic_data(std::size_t samples) {
  synthetic::SyntheticConfig data;
  data.samples = samples;
  data.test_samples = 30;
  data.features = 16;
  data.classes = 4;
  return std::make_shared<synthetic::SyntheticDataset>(data);
}

// The MLP 16-32-4 that small_synthetic_data fits.
inline std::shared_ptr<const Model> small_mlp() {
  mlp::MlpConfig sizes;
  sizes.sizes = {16, 32, 4};
  return std::make_shared<mlp::MlpModel>(sizes);
}

}  // namespace tessera::testing
