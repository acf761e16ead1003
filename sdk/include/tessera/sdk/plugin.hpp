#pragma once
// TESSERA_PLUGIN: the one way a plugin, in-tree or third-party, declares itself.
//
//   namespace {
//   constexpr tessera_option_desc kOptions[] = {
//       {"timeout", "duration", "300s", "deadline of every blocking call", nullptr, "1ms",
//       nullptr},
//   };
//   constexpr const char* kAliases[] = {"threads", nullptr};
//   constexpr tessera_plugin_capabilities kCapabilities = {0, TESSERA_DEVICE_CPU};
//   }  // namespace
//   TESSERA_PLUGIN(transport, "local", "1.0.0", "ranks as threads of one process",
//                  kAliases, kOptions, kCapabilities, tessera::local::LocalTransport)
//
// The class must derive from the kind's interface (tessera::Transport for `transport`, ...)
// and be constructible from `const tessera::Options&`. Pass TESSERA_NO_ALIASES,
// TESSERA_NO_OPTIONS or TESSERA_NO_CAPABILITIES where a plugin has none. The macro defines the
// exported descriptor (tessera_plugin_descriptor_v2) and a factory that turns exceptions into
// an exception_ptr for the host to rethrow.
//
// An option's last two fields are its inclusive minimum and maximum, in the type's syntax, or
// nullptr for no bound: the host refuses a value outside them (with the file:line, flag or
// variable it came from) before the plugin's constructor runs, so declare every bound the
// constructor would otherwise have to check.
//
// Capabilities (plugin_abi.h) are what the host knows without creating the object: a transport
// declares the devices its buffers may live on and whether its ranks may be separate processes
// (TESSERA_SPANS_PROCESSES) or hosts (TESSERA_SPANS_HOSTS); a store whether clients in separate
// processes or on separate hosts share its keys. Other kinds declare none; the macro refuses,
// at compile time, capabilities a kind cannot have.
//
// A store that URLs may name (`tessera launch --store SCHEME://...`) declares, inside its class,
// `using UrlScheme = C;` for a default-constructible class C derived from tessera::StoreUrlScheme
// with a `static constexpr const char* kScheme` (tessera/plugin/store_url_scheme.hpp); the macro
// puts the scheme and C's factory in the descriptor (ABI 3.0).

#include <cstdint>
#include <exception>
#include <type_traits>

#include "tessera/plugin/build_id.hpp"
#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/plugin_abi.h"
#include "tessera/plugin/plugin_kind.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/plugin/store_url_scheme.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/plugin/transport.hpp"

namespace tessera::sdk {

template <PluginKind kind>
struct kind_interface;
template <>
struct kind_interface<PluginKind::transport> {
  using type = Transport;
};
template <>
struct kind_interface<PluginKind::store> {
  using type = Store;
};
template <>
struct kind_interface<PluginKind::strategy> {
  using type = Strategy;
};
template <>
struct kind_interface<PluginKind::optimizer> {
  using type = Optimizer;
};
template <>
struct kind_interface<PluginKind::model> {
  using type = Model;
};
template <>
struct kind_interface<PluginKind::dataset> {
  using type = Dataset;
};

template <std::size_t N>
constexpr std::uint32_t option_count(const tessera_option_desc (&)[N]) noexcept {
  return N;
}
constexpr std::uint32_t option_count(std::nullptr_t) noexcept {
  return 0;
}
template <std::size_t N>
constexpr const tessera_option_desc* option_table(const tessera_option_desc (&table)[N]) noexcept {
  return table;
}
constexpr const tessera_option_desc* option_table(std::nullptr_t) noexcept {
  return nullptr;
}

// Whether `capabilities` are ones a plugin of `kind` may declare (plugin_abi.h); the host
// checks the same at load time.
constexpr bool capabilities_fit(PluginKind kind,
                                tessera_plugin_capabilities capabilities) noexcept {
  constexpr std::uint32_t kSpans = TESSERA_SPANS_PROCESSES | TESSERA_SPANS_HOSTS;
  constexpr std::uint32_t kDevices = TESSERA_DEVICE_CPU | TESSERA_DEVICE_CUDA;
  const bool hosts_without_processes = (capabilities.flags & TESSERA_SPANS_HOSTS) != 0 &&
                                       (capabilities.flags & TESSERA_SPANS_PROCESSES) == 0;
  switch (kind) {
    case PluginKind::transport:
      return (capabilities.flags & ~kSpans) == 0 && !hosts_without_processes &&
             capabilities.devices != 0 && (capabilities.devices & ~kDevices) == 0;
    case PluginKind::store:
      return (capabilities.flags & ~kSpans) == 0 && !hosts_without_processes &&
             capabilities.devices == 0;
    case PluginKind::strategy:
      return (capabilities.flags & ~TESSERA_REPLICATED_STATE) == 0 &&
             (capabilities.devices & ~kDevices) == 0;
    default: return capabilities.flags == 0 && capabilities.devices == 0;
  }
}

// The factory behind every descriptor: builds Concrete, returns it as its kind's interface.
template <PluginKind kind, class Concrete>
void* create(const tessera_factory_args* args) noexcept {
  using Interface = typename kind_interface<kind>::type;
  static_assert(std::is_base_of_v<Interface, Concrete>,
                "TESSERA_PLUGIN: the class must derive from its kind's interface");
  static_assert(std::is_constructible_v<Concrete, const Options&>,
                "TESSERA_PLUGIN: the class must be constructible from const tessera::Options&");
  try {
    const auto& options = *static_cast<const Options*>(args->options);
    Interface* object = new Concrete(options);
    return object;
  } catch (...) {
    *static_cast<std::exception_ptr*>(args->error) = std::current_exception();
    return nullptr;
  }
}

// A store's URL scheme (store_url_scheme.hpp), when its class names one as UrlScheme.
template <class Concrete>
concept has_url_scheme = requires {
  typename Concrete::UrlScheme;
};
template <PluginKind kind, class Concrete>
inline constexpr bool names_url_scheme = (kind == PluginKind::store) && has_url_scheme<Concrete>;

template <class Scheme>
void* create_url_scheme(const tessera_factory_args* args) noexcept {
  static_assert(std::is_base_of_v<StoreUrlScheme, Scheme>,
                "TESSERA_PLUGIN: a store's UrlScheme must derive from tessera::StoreUrlScheme");
  static_assert(std::is_default_constructible_v<Scheme>,
                "TESSERA_PLUGIN: a store's UrlScheme must be default-constructible");
  try {
    StoreUrlScheme* scheme = new Scheme();
    return scheme;
  } catch (...) {
    *static_cast<std::exception_ptr*>(args->error) = std::current_exception();
    return nullptr;
  }
}

template <PluginKind kind, class Concrete>
constexpr const char* url_scheme() noexcept {
  if constexpr (names_url_scheme<kind, Concrete>) {
    return Concrete::UrlScheme::kScheme;
  } else {
    return nullptr;
  }
}

template <PluginKind kind, class Concrete>
constexpr auto url_scheme_factory() noexcept -> void* (*)(const tessera_factory_args*) {
  if constexpr (names_url_scheme<kind, Concrete>) {
    return &create_url_scheme<typename Concrete::UrlScheme>;
  } else {
    return nullptr;
  }
}

}  // namespace tessera::sdk

#define TESSERA_NO_ALIASES nullptr
#define TESSERA_NO_OPTIONS nullptr
#define TESSERA_NO_CAPABILITIES (tessera_plugin_capabilities{0U, 0U})

#define TESSERA_PLUGIN(kind, name, version, description, aliases, options, capabilities, Concrete) \
  static_assert(::tessera::sdk::capabilities_fit(::tessera::PluginKind::kind, capabilities),       \
                "TESSERA_PLUGIN: a transport declares its devices (TESSERA_DEVICE_*) and may "     \
                "span processes and hosts, a store may span processes and hosts, a strategy may "  \
                "declare TESSERA_REPLICATED_STATE, other kinds declare TESSERA_NO_CAPABILITIES; "  \
                "spanning hosts implies spanning processes");                                      \
  extern "C" __attribute__((visibility("default")))                                                \
  const tessera_plugin_descriptor TESSERA_PLUGIN_DESCRIPTOR_NAME = {                               \
      sizeof(tessera_plugin_descriptor),                                                           \
      TESSERA_PLUGIN_ABI_MAJOR,                                                                    \
      TESSERA_PLUGIN_ABI_MINOR,                                                                    \
      TESSERA_BUILD_ID,                                                                            \
      #kind,                                                                                       \
      name,                                                                                        \
      aliases,                                                                                     \
      version,                                                                                     \
      description,                                                                                 \
      ::tessera::sdk::option_table(options),                                                       \
      ::tessera::sdk::option_count(options),                                                       \
      sizeof(tessera_option_desc),                                                                 \
      capabilities,                                                                                \
      &::tessera::sdk::create<::tessera::PluginKind::kind, Concrete>,                              \
      ::tessera::sdk::url_scheme<::tessera::PluginKind::kind, Concrete>(),                         \
      ::tessera::sdk::url_scheme_factory<::tessera::PluginKind::kind, Concrete>(),                 \
  };
