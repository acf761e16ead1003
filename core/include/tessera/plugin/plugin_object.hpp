#pragma once
// The base of every object a plugin's factory creates: it carries the anchor that keeps the
// plugin's shared library loaded while the object, or anything it hands out, is alive.

#include <memory>

namespace tessera {

class PluginObject {
 public:
  virtual ~PluginObject() = default;

  // Set by the registry when a factory creates the object; empty for objects built directly
  // (tests, statically linked hosts). Objects pass it to the children they hand out through
  // core wrappers, which release it only after the child's destructor has returned: unloading
  // the library from inside its own code would return into unmapped memory.
  void set_library_anchor(std::shared_ptr<const void> anchor) noexcept {
    anchor_ = std::move(anchor);
  }
  [[nodiscard]] const std::shared_ptr<const void>& library_anchor() const noexcept {
    return anchor_;
  }

 private:
  std::shared_ptr<const void> anchor_;
};

// Wraps a freshly created plugin object in a shared_ptr whose deleter, compiled into
// libtessera, destroys the object first and drops the library anchor afterwards.
template <class T>
[[nodiscard]] std::shared_ptr<T> adopt_plugin_object(T* object, std::shared_ptr<const void> anchor);

}  // namespace tessera
