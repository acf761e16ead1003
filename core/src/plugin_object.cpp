#include "tessera/plugin/plugin_object.hpp"

#include "tessera/plugin/communicator.hpp"
#include "tessera/plugin/dataset.hpp"
#include "tessera/plugin/model.hpp"
#include "tessera/plugin/optimizer.hpp"
#include "tessera/plugin/store.hpp"
#include "tessera/plugin/strategy.hpp"
#include "tessera/plugin/transport.hpp"
#include "tessera/plugin/work.hpp"

namespace tessera {

namespace {

// Lives in libtessera, so the shared_ptr control block that calls it is libtessera code too:
// the object's destructor (plugin code) returns before the anchor, and with it possibly the
// library, goes away.
template <class T>
struct AnchoredDelete {
  std::shared_ptr<const void> anchor;
  void operator()(T* object) const noexcept { delete object; }
};

}  // namespace

template <class T>
std::shared_ptr<T> adopt_plugin_object(T* object, std::shared_ptr<const void> anchor) {
  if (object == nullptr) return nullptr;
  if (!anchor) return std::shared_ptr<T>(object);
  return std::shared_ptr<T>(object, AnchoredDelete<T>{std::move(anchor)});
}

template std::shared_ptr<Transport> adopt_plugin_object(Transport*, std::shared_ptr<const void>);
template std::shared_ptr<Communicator> adopt_plugin_object(Communicator*,
                                                           std::shared_ptr<const void>);
template std::shared_ptr<Work> adopt_plugin_object(Work*, std::shared_ptr<const void>);
template std::shared_ptr<Store> adopt_plugin_object(Store*, std::shared_ptr<const void>);
template std::shared_ptr<Strategy> adopt_plugin_object(Strategy*, std::shared_ptr<const void>);
template std::shared_ptr<Optimizer> adopt_plugin_object(Optimizer*, std::shared_ptr<const void>);
template std::shared_ptr<Model> adopt_plugin_object(Model*, std::shared_ptr<const void>);
template std::shared_ptr<Dataset> adopt_plugin_object(Dataset*, std::shared_ptr<const void>);

}  // namespace tessera
