// The `synthetic` data set.
#include "tessera/sdk/plugin.hpp"

#include "synthetic/synthetic.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"samples", "int", "10000", "training samples", nullptr, "1", "1000000000"},
    {"test_samples", "int", "2000", "test samples (the run's accuracy is measured on them)",
     nullptr, "1", "1000000000"},
    {"features", "int", "784", "elements per sample (standard normal)", nullptr, "1", "100000000"},
    {"classes", "int", "10",
     "classes; a sample's label is the arg-max of a fixed random linear map", nullptr, "2",
     "1000000"},
    {"seed", "int", "0", "seed of the inputs and of the labelling map", nullptr, "0", nullptr},
    {"context", "int", "0",
     "0: feature vectors; > 0: windows of this many uniform token ids in [0, classes), the "
     "targets their next tokens (a language model's layout, for speed runs)",
     nullptr, "0", "1048576"},
};

}  // namespace

TESSERA_PLUGIN(dataset, "synthetic", "1.0.0", "seeded random inputs with linearly separable labels",
               TESSERA_NO_ALIASES, kOptions, TESSERA_NO_CAPABILITIES,
               tessera::synthetic::SyntheticDataset)
