// The compute plugins load through the registry and build from their declared defaults, the way
// `tessera train` creates them; loading them and computing on the host maps no cuBLAS.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

// The files of this process's mappings whose path names `part`.
std::vector<std::string> mapped_files_naming(const std::string& part) {
  std::vector<std::string> found;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(part) != std::string::npos) found.push_back(line.substr(line.find('/')));
  }
  return found;
}

// The gpt and mlp plugins compute on a GPU with cuBLAS where tessera is built with CUDA, but
// load it only when a GPU computes: libcublasLt alone costs about 150 MiB of resident memory at
// load, which every rank of a host-only run paid at plugin discovery while the plugins linked it.
// Discovery (SetUp scans every plugin, as `tessera train` does), both models built and a gpt
// forward on the host leave it unmapped.
TEST_F(ComputePlugins, TheModelsLoadAndComputeOnTheHostWithoutMappingCublas) {
  EXPECT_GT(with_defaults<Model>(PluginKind::model, "mlp")->layer_count(), 0U);
  const auto gpt = with_defaults<Model>(PluginKind::model, "gpt");
  ASSERT_GT(gpt->layer_count(), 2U);
  const std::size_t context = gpt->layout().input_shape.at(0);
  Tensor x({2, context}, DType::i64);    // token 0 everywhere
  for (std::size_t l = 0; l < 2; ++l) {  // the embedding and the first block
    std::vector<Tensor> params;
    std::vector<BufferView> views;
    for (const ParamSpec& spec : gpt->layer(l).parameters()) {
      params.emplace_back(spec.shape, DType::f32);
      views.push_back(params.back().view());
    }
    LayerContext ctx;
    x = gpt->layer(l).forward(x, views, ctx);
  }
  EXPECT_EQ(x.shape().size(), 3U);
  EXPECT_EQ(mapped_files_naming("libcublas"), std::vector<std::string>{});
}

}  // namespace
}  // namespace tessera
