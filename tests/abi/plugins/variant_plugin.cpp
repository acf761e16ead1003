// One optimizer plugin source, built several times with different compile definitions, each
// build breaking one descriptor field on purpose (see ../CMakeLists.txt).
#include <algorithm>
#include <exception>
#include <span>
#include <string>

#include "tessera/base/error.hpp"
#include "tessera/sdk/plugin.hpp"

#ifndef TEST_ABI_MAJOR
#define TEST_ABI_MAJOR TESSERA_PLUGIN_ABI_MAJOR
#endif
#ifndef TEST_ABI_MINOR
#define TEST_ABI_MINOR TESSERA_PLUGIN_ABI_MINOR
#endif
// The major in the exported symbol's name (tessera_plugin_descriptor_vN), normally the field's.
#ifndef TEST_SYMBOL_MAJOR
#define TEST_SYMBOL_MAJOR TEST_ABI_MAJOR
#endif
#ifndef TEST_CAPABILITY_FLAGS
#define TEST_CAPABILITY_FLAGS 0
#endif
#ifndef TEST_CAPABILITY_DEVICES
#define TEST_CAPABILITY_DEVICES 0
#endif
#ifndef TEST_BUILD_ID
#define TEST_BUILD_ID TESSERA_BUILD_ID
#endif
#ifndef TEST_KIND
#define TEST_KIND "optimizer"
#endif
#ifndef TEST_NAME
#define TEST_NAME "abi_good"
#endif
#ifndef TEST_RATE_TYPE
#define TEST_RATE_TYPE "float"
#endif
#ifndef TEST_SCALE_MIN
#define TEST_SCALE_MIN "0"
#endif
#ifndef TEST_SCALE_MAX
#define TEST_SCALE_MAX "4"
#endif

namespace {

#if defined(TEST_FACTORY_THROWS_LOCAL) || defined(TEST_STEP_THROWS_LOCAL)
// Defined in the plugin, so its vtable, type_info and destructor are emitted in the plugin's
// file; thrown through std::make_exception_ptr, whose destructor thunk is instantiated here
// too. A caller that keeps the exception keeps pointers into this library.
class PluginLocalError final : public tessera::InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
  [[nodiscard]] const char* what() const noexcept override { return InvalidArgument::what(); }
};

[[noreturn]] void throw_plugin_local(const std::string& what) {
  std::rethrow_exception(std::make_exception_ptr(PluginLocalError(what)));
}
#endif

// Adds `scale` times the gradient: simple enough that a test can predict every bit.
class ScaledAdd final : public tessera::Optimizer {
 public:
  explicit ScaledAdd(const tessera::Options& options)
      : scale_(static_cast<float>(options.get_float("scale"))) {
#ifdef TEST_FACTORY_THROWS
    throw tessera::InvalidArgument("abi_throws refuses to be built: scale " +
                                   std::to_string(scale_));
#endif
#ifdef TEST_FACTORY_THROWS_LOCAL
    throw_plugin_local(TEST_NAME " refuses to be built");
#endif
  }

  [[nodiscard]] std::size_t state_per_param() const noexcept override {
    return 0;
  }

  using tessera::Optimizer::step;
  void step(tessera::BufferView param_view, tessera::BufferView grad_view,
            tessera::BufferView /*state*/,
            [[maybe_unused]] const tessera::StepInfo& info) const override {
#ifdef TEST_STEP_THROWS_LOCAL
    throw_plugin_local(TEST_NAME " refuses step " + std::to_string(info.step));
#endif
    const auto params = param_view.host_span<float>("parameters");
    const auto grads = grad_view.host_span<const float>("gradients");
    for (std::size_t i = 0; i < params.size(); ++i) params[i] += scale_ * grads[i];
  }

 private:
  float scale_;
};

#ifndef TEST_ABI_1
constexpr tessera_option_desc kOptions[] = {
    {"scale", TEST_RATE_TYPE, "0.5", "factor applied to the gradient", nullptr, TEST_SCALE_MIN,
     TEST_SCALE_MAX},
    {"mode", "string", "plain", "how to add", "plain|fancy", nullptr, nullptr},
};
#else
// What a plugin built against plugin ABI 1.1 exports: its descriptor under the _v1
// name, ending with option_desc_size, and no capabilities.
struct Descriptor11 {
  uint32_t struct_size;
  uint16_t abi_major;
  uint16_t abi_minor;
  const char* build_id;
  const char* kind;
  const char* name;
  const char* const* aliases;
  const char* version;
  const char* description;
  const tessera_option_desc* options;
  uint32_t option_count;
  void* (*create)(const tessera_factory_args* args);
  uint32_t option_desc_size;
};
constexpr tessera_option_desc kOptions11[] = {
    {"scale", TEST_RATE_TYPE, "0.5", "factor applied to the gradient", nullptr, "0", "4"},
};
#endif

}  // namespace

#ifdef TEST_ABI_1
extern "C" __attribute__((visibility("default")))
const Descriptor11 tessera_plugin_descriptor_v1 = {
    sizeof(Descriptor11),
    1,
    1,
    TEST_BUILD_ID,
    TEST_KIND,
    TEST_NAME,
    TESSERA_NO_ALIASES,
    "1.0.0",
    "test optimizer built against plugin ABI 1.1",
    kOptions11,
    1,
    &tessera::sdk::create<tessera::PluginKind::optimizer, ScaledAdd>,
    sizeof(tessera_option_desc),
};
#elif !defined(TEST_NO_DESCRIPTOR)
extern "C" __attribute__((visibility("default")))
const tessera_plugin_descriptor TESSERA_PLUGIN_ABI_CAT(tessera_plugin_descriptor_v,
                                                       TEST_SYMBOL_MAJOR) = {
    sizeof(tessera_plugin_descriptor),
    TEST_ABI_MAJOR,
    TEST_ABI_MINOR,
    TEST_BUILD_ID,
    TEST_KIND,
    TEST_NAME,
    TESSERA_NO_ALIASES,
    "1.2.3",
    "test optimizer with a deliberately configurable descriptor",
    kOptions,
    2,
    sizeof(tessera_option_desc),
    {TEST_CAPABILITY_FLAGS, TEST_CAPABILITY_DEVICES},
    &tessera::sdk::create<tessera::PluginKind::optimizer, ScaledAdd>,
    nullptr,  // url_scheme: an optimizer is named by no URL
    nullptr,
};
#else
// Exported, so that the file is a real shared object with symbols, just not a plugin.
extern "C" __attribute__((visibility("default"))) int abi_not_a_plugin_answer() {
  return 42;
}
#endif
