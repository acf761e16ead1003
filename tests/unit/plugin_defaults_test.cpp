// A plugin's option schema is where its defaults are written. Some settings structs keep
// defaults too, for C++ users that build the object without the registry (tests, a host that
// embeds a strategy directly); each such default must be the schema's, and this test holds
// every one of them to it. Structs without such users (shm, ucx, tcp) have no defaults at all.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "adam/adam.hpp"
#include "fashion_mnist/fashion_mnist.hpp"
#include "hybrid_strategy.hpp"
#include "mlp/mlp_model.hpp"
#include "rmsprop/rmsprop.hpp"
#include "sgd/sgd.hpp"
#include "synthetic/synthetic.hpp"
#include "tessera/registry/registry.hpp"
#include "tessera/strategy_kit/gradient_sync.hpp"
#include "text/text_dataset.hpp"
#include "zero3_strategy.hpp"
#include "zero_strategy.hpp"

namespace tessera {
namespace {

class PluginDefaults : public ::testing::Test {
 protected:
  void SetUp() override { registry_.scan_directory(TESSERA_PLUGIN_DIR); }

  [[nodiscard]] Options defaults(PluginKind kind, const std::string& name) const {
    return registry_.default_options(kind, name);
  }

  PluginRegistry registry_;
};

TEST_F(PluginDefaults, DdpBucketsAreTheGradientSyncDefaults) {
  const Options ddp = defaults(PluginKind::strategy, "ddp");
  const GradientSyncOptions sync;
  EXPECT_EQ(ddp.get_size("first_bucket"), sync.first_bucket_bytes);
  EXPECT_EQ(ddp.get_size("bucket_cap"), sync.bucket_cap_bytes);
  EXPECT_EQ(ddp.get_string("compression"), "none");
  EXPECT_EQ(sync.compression, GradientCompression::none);
}

TEST_F(PluginDefaults, ZeroAndZero3ConfigsAreTheirSchemas) {
  const zero::ZeroConfig zero;
  for (const char* name : {"zero1", "zero2"}) {
    const Options options = defaults(PluginKind::strategy, name);
    EXPECT_EQ(options.get_size("first_bucket"), zero.first_bucket_bytes) << name;
    EXPECT_EQ(options.get_size("bucket_cap"), zero.bucket_cap_bytes) << name;
  }
  EXPECT_EQ(defaults(PluginKind::strategy, "zero2").get_int("staging_windows"),
            static_cast<std::int64_t>(zero.staging_windows));
  const zero3::Zero3Config zero3;
  const Options options = defaults(PluginKind::strategy, "zero3");
  EXPECT_EQ(options.get_bool("reshard_after_forward"), zero3.reshard_after_forward);
  EXPECT_EQ(options.get_int("prefetch"), static_cast<std::int64_t>(zero3.prefetch));
  EXPECT_EQ(options.get_int("unit_size"), static_cast<std::int64_t>(zero3.unit_size));
  EXPECT_EQ(options.get_int("max_inflight"), static_cast<std::int64_t>(zero3.max_inflight));
}

TEST_F(PluginDefaults, HybridConfigIsItsSchema) {
  const hybrid::HybridConfig config;
  const Options options = defaults(PluginKind::strategy, "hybrid");
  EXPECT_EQ(options.get_int("tensor_parallel"), config.tensor_parallel);
  EXPECT_EQ(options.get_int("pipeline_parallel"), config.pipeline_parallel);
  EXPECT_EQ(options.get_int("micro_batches"), static_cast<std::int64_t>(config.micro_batches));
  EXPECT_EQ(hybrid::parse_schedule(options.get_string("schedule")), config.schedule);
  EXPECT_EQ(hybrid::parse_partition(options.get_string("partition")), config.partition);
  EXPECT_EQ(options.get_string("recompute") == "full", config.recompute);
  EXPECT_EQ(options.get_string("data_parallel_sharding") == "zero1", config.zero1);
  EXPECT_EQ(options.get_size("first_bucket"), config.sync.first_bucket_bytes);
  EXPECT_EQ(options.get_size("bucket_cap"), config.sync.bucket_cap_bytes);
}

TEST_F(PluginDefaults, OptimizerConfigsAreTheirSchemas) {
  const sgd::SgdConfig sgd;
  const Options sgd_options = defaults(PluginKind::optimizer, "sgd");
  EXPECT_EQ(static_cast<float>(sgd_options.get_float("momentum")), sgd.momentum);
  EXPECT_EQ(static_cast<float>(sgd_options.get_float("dampening")), sgd.dampening);
  EXPECT_EQ(static_cast<float>(sgd_options.get_float("weight_decay")), sgd.weight_decay);
  EXPECT_EQ(sgd_options.get_bool("nesterov"), sgd.nesterov);

  const adam::AdamConfig adam;
  const Options adam_options = defaults(PluginKind::optimizer, "adam");
  EXPECT_EQ(static_cast<float>(adam_options.get_float("beta1")), adam.beta1);
  EXPECT_EQ(static_cast<float>(adam_options.get_float("beta2")), adam.beta2);
  EXPECT_EQ(static_cast<float>(adam_options.get_float("eps")), adam.eps);
  EXPECT_EQ(static_cast<float>(adam_options.get_float("weight_decay")), adam.weight_decay);

  const rmsprop::RmspropConfig rmsprop;
  const Options rmsprop_options = defaults(PluginKind::optimizer, "rmsprop");
  EXPECT_EQ(static_cast<float>(rmsprop_options.get_float("alpha")), rmsprop.alpha);
  EXPECT_EQ(static_cast<float>(rmsprop_options.get_float("eps")), rmsprop.eps);
  EXPECT_EQ(static_cast<float>(rmsprop_options.get_float("weight_decay")), rmsprop.weight_decay);
  EXPECT_EQ(static_cast<float>(rmsprop_options.get_float("momentum")), rmsprop.momentum);
  EXPECT_EQ(rmsprop_options.get_bool("centered"), rmsprop.centered);
}

TEST_F(PluginDefaults, ModelAndDatasetConfigsAreTheirSchemas) {
  const mlp::MlpConfig mlp;
  const Options mlp_options = defaults(PluginKind::model, "mlp");
  std::string sizes;
  for (const auto size : mlp.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(size);
  EXPECT_EQ(mlp_options.get_string("layers"), sizes);
  EXPECT_EQ(layers::parse_activation(mlp_options.get_string("activation")), mlp.activation);
  EXPECT_EQ(mlp_options.get_int("threads"), mlp.threads);

  const synthetic::SyntheticConfig synthetic;
  const Options synthetic_options = defaults(PluginKind::dataset, "synthetic");
  EXPECT_EQ(synthetic_options.get_int("samples"), static_cast<std::int64_t>(synthetic.samples));
  EXPECT_EQ(synthetic_options.get_int("test_samples"),
            static_cast<std::int64_t>(synthetic.test_samples));
  EXPECT_EQ(synthetic_options.get_int("features"), static_cast<std::int64_t>(synthetic.features));
  EXPECT_EQ(synthetic_options.get_int("classes"), static_cast<std::int64_t>(synthetic.classes));
  EXPECT_EQ(synthetic_options.get_int("seed"), static_cast<std::int64_t>(synthetic.seed));

  const fashion_mnist::FashionMnistConfig fashion;
  const Options fashion_options = defaults(PluginKind::dataset, "fashion-mnist");
  EXPECT_EQ(fashion_options.get_string("path"), fashion.path.string());
  EXPECT_EQ(fashion_options.get_bool("normalize"), fashion.normalize);

  const text::TextConfig text_config;
  const Options text_options = defaults(PluginKind::dataset, "text");
  EXPECT_EQ(text_options.get_string("path"), text_config.path.string());
  EXPECT_EQ(text_options.get_string("path"), text::kDefaultTokenFile);  // what prepare writes
  EXPECT_EQ(text_options.get_int("context"), static_cast<std::int64_t>(text_config.context));
}

}  // namespace
}  // namespace tessera
