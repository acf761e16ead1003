#include "tessera/plugin/plugin_kind.hpp"

namespace tessera {

std::string_view plugin_kind_name(PluginKind kind) noexcept {
  switch (kind) {
    case PluginKind::transport: return "transport";
    case PluginKind::store: return "store";
    case PluginKind::strategy: return "strategy";
    case PluginKind::optimizer: return "optimizer";
    case PluginKind::model: return "model";
    case PluginKind::dataset: return "dataset";
  }
  return "unknown";
}

std::optional<PluginKind> parse_plugin_kind(std::string_view name) noexcept {
  for (PluginKind kind : kAllPluginKinds) {
    if (plugin_kind_name(kind) == name) return kind;
  }
  return std::nullopt;
}

}  // namespace tessera
