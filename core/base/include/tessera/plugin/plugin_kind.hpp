#pragma once
// The kinds of plugin and the interface each kind's factory returns.

#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

enum class PluginKind : std::uint8_t { transport, store, strategy, optimizer, model, dataset };

inline constexpr PluginKind kAllPluginKinds[] = {PluginKind::transport, PluginKind::store,
                                                 PluginKind::strategy,  PluginKind::optimizer,
                                                 PluginKind::model,     PluginKind::dataset};

[[nodiscard]] std::string_view plugin_kind_name(PluginKind kind) noexcept;
[[nodiscard]] std::optional<PluginKind> parse_plugin_kind(std::string_view name) noexcept;

class Transport;
class Store;
class Strategy;
class Optimizer;
class Model;
class Dataset;

// interface_kind<Transport>::value == PluginKind::transport, and so on.
template <class Interface>
struct interface_kind;
template <>
struct interface_kind<Transport> {
  static constexpr PluginKind value = PluginKind::transport;
};
template <>
struct interface_kind<Store> {
  static constexpr PluginKind value = PluginKind::store;
};
template <>
struct interface_kind<Strategy> {
  static constexpr PluginKind value = PluginKind::strategy;
};
template <>
struct interface_kind<Optimizer> {
  static constexpr PluginKind value = PluginKind::optimizer;
};
template <>
struct interface_kind<Model> {
  static constexpr PluginKind value = PluginKind::model;
};
template <>
struct interface_kind<Dataset> {
  static constexpr PluginKind value = PluginKind::dataset;
};

}  // namespace tessera
