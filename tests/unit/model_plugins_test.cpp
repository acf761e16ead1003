// The compute plugins load through the registry and build from their declared defaults, the way
// `tessera train` creates them.
#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/base/error.hpp"
#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/registry/registry.hpp"

namespace tessera {
namespace {

class ComputePlugins : public ::testing::Test {
 protected:
  void SetUp() override { registry_.scan_directory(TESSERA_PLUGIN_DIR); }

  template <class Interface>
  std::shared_ptr<Interface> with_defaults(PluginKind kind, const std::string& name) {
    return registry_.create<Interface>(name, registry_.default_options(kind, name));
  }

  PluginRegistry registry_;
};

TEST_F(ComputePlugins, MlpBuildsFromItsDefaults) {
  const auto model = with_defaults<Model>(PluginKind::model, "mlp");
  EXPECT_EQ(model->layout(), (SampleLayout{DType::f32, {784}, {}, 10}));
  EXPECT_EQ(model->layer_count(), 5U);
}

TEST_F(ComputePlugins, EveryOptimizerBuildsFromItsDefaults) {
  EXPECT_EQ(with_defaults<Optimizer>(PluginKind::optimizer, "sgd")->state_per_param(), 0U);
  EXPECT_EQ(with_defaults<Optimizer>(PluginKind::optimizer, "adam")->state_per_param(), 2U);
  EXPECT_EQ(with_defaults<Optimizer>(PluginKind::optimizer, "adamw")->state_per_param(), 2U);
  EXPECT_EQ(with_defaults<Optimizer>(PluginKind::optimizer, "rmsprop")->state_per_param(), 1U);
}

TEST_F(ComputePlugins, DataSetsBuildFromTheirDefaults) {
  const auto synthetic = with_defaults<Dataset>(PluginKind::dataset, "synthetic");
  EXPECT_EQ(synthetic->size(Split::train), 10000U);
  if (std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    EXPECT_EQ(with_defaults<Dataset>(PluginKind::dataset, "fashion-mnist")->size(Split::test),
              10000U);
  }
}

}  // namespace
}  // namespace tessera
