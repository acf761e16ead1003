// The `fashion-mnist` data set.
#include "tessera/sdk/plugin.hpp"

#include "fashion_mnist/fashion_mnist.hpp"

namespace {

constexpr tessera_option_desc kOptions[] = {
    {"path", "string", "/usr/share/datasets/fashion-mnist",
     "folder holding the four *-ubyte.gz IDX files", nullptr, nullptr, nullptr},
    {"normalize", "bool", "true",
     "subtract mean 0.2860 and divide by std 0.3530 after scaling to [0,1]", nullptr, nullptr,
     nullptr},
};

constexpr const char* kAliases[] = {"fashion_mnist", nullptr};

}  // namespace

TESSERA_PLUGIN(dataset, "fashion-mnist", "1.0.0",
               "Fashion-MNIST: 60000/10000 28x28 grey images, 10 classes", kAliases, kOptions,
               TESSERA_NO_CAPABILITIES, tessera::fashion_mnist::FashionMnist)
