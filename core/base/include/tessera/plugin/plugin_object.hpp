#pragma once
// The base of every interface a plugin's factory returns (Transport, Strategy, ...): the host
// owns such an object through its interface and destroys it with this virtual destructor.
//
// It carries nothing else. Plugin ABI 1 kept a "library anchor" here that held the plugin's
// library loaded while its objects lived; since a loaded plugin is never unloaded (the
// registry opens it RTLD_NODELETE, docs/architecture.md), ABI 2 dropped it.

namespace tessera {

class PluginObject {
 public:
  virtual ~PluginObject() = default;
};

}  // namespace tessera
