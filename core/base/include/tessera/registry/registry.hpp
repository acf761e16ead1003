#pragma once
// PluginRegistry: finds plugin shared objects, checks their descriptors, and creates objects.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/base/dtype.hpp"
#include "tessera/plugin/options.hpp"
#include "tessera/plugin/plugin_kind.hpp"
#include "tessera/plugin/plugin_object.hpp"

namespace tessera {

class StoreUrlScheme;

// What a plugin can do, read from its descriptor (tessera_plugin_capabilities, plugin_abi.h)
// without creating its object. For a transport: its ranks and its buffers; for a store: its
// clients; for a strategy: its state; other kinds have none.
struct PluginCapabilities {
  bool spans_processes = false;  // ranks (clients) may be separate processes
  bool spans_hosts = false;      // ... on different hosts
  // A strategy's state is whole on every rank and a failed step leaves it untouched
  // (TESSERA_REPLICATED_STATE): the elastic runtime then copies none of it.
  bool replicated_state = false;
  std::vector<DeviceType> devices;  // transports: where buffers may live
};

struct PluginInfo {
  PluginKind kind = PluginKind::transport;
  std::string name;
  std::vector<std::string> aliases;
  std::string version;
  std::string description;
  std::filesystem::path file;
  std::vector<OptionSpec> options;
  PluginCapabilities capabilities;
  // A store's URL scheme ("etcd" for etcd://...; plugin_abi.h, ABI 3.0); empty when no URL
  // names it, as for every store built for ABI 2.3 or older.
  std::string url_scheme;
};

// Where plugins are looked for. `defaults` are scanned first (TESSERA_PLUGIN_PATH's folders,
// then the one beside libtessera); `named` are folders a user named (a config's plugins.path,
// `tessera plugins --path`), which must exist and whose plugins win over the defaults'.
struct PluginSearchPath {
  std::vector<std::filesystem::path> defaults;
  std::vector<std::filesystem::path> named;
  std::string named_origin;  // where `named` was given: "FILE:LINE (plugins.path)", "flag --path"
};

struct PluginLoadFailure {
  std::filesystem::path file;
  std::string reason;
  // A well-formed plugin whose kind and name a file found earlier already took: usually the
  // same plugin twice on the search path (a build tree's and an installed copy). The earlier
  // one is used; worth a note, not a warning.
  bool shadowed = false;
};

// No global state: a host may hold several registries. A loaded library stays mapped until the
// process exits (RTLD_NODELETE), so objects, Works and errors from a plugin may outlive it.
// Thread-safety: loading is not thread-safe; once loaded, find/list/create may be called from
// any thread concurrently.
class PluginRegistry {
 public:
  PluginRegistry();
  ~PluginRegistry();
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // Most explicit first, since the first plugin found under a name wins: every folder of
  // TESSERA_PLUGIN_PATH (colon-separated, empty entries skipped), then the folder of in-tree
  // plugins beside libtessera (lib/tessera/plugins). Throws ConfigError naming
  // TESSERA_PLUGIN_PATH when one of its folders does not exist: a typo would otherwise quietly
  // leave the installed copies in use.
  [[nodiscard]] static std::vector<std::filesystem::path> default_search_path();

  // Splits a colon-separated folder list (TESSERA_PLUGIN_PATH, plugins.path); empty entries are
  // skipped. The one parser of search paths, so every list reads the same way.
  [[nodiscard]] static std::vector<std::filesystem::path> split_folder_list(std::string_view list);

  // Loads every "*.so" in `dir` (not recursive). A file that fails is recorded in failures()
  // and skipped, so one broken plugin does not hide the others. A missing folder is skipped.
  // A plugin whose kind and name is already loaded is skipped and recorded as shadowed.
  void scan_directory(const std::filesystem::path& dir);
  // scan_directory over each folder in order.
  void scan(const std::vector<std::filesystem::path>& dirs);
  // scan(path.defaults), then scan_named(path.named, path.named_origin) if any were named.
  void scan(const PluginSearchPath& path);

  // Folders a user named (a config's plugins.path, `tessera plugins --path`), scanned after the
  // default search path and winning over it: a plugin of the same kind and name loaded by
  // scan()/scan_directory() is replaced by the named folder's copy and recorded as shadowed;
  // between two named folders the first wins. Every folder must exist: one that does not is a
  // ConfigError naming the folder and `origin`, where the user named it ("FILE:LINE",
  // "flag --plugins.path", "environment TESSERA_PLUGINS_PATH"). Call before creating objects;
  // PluginInfo pointers of a replaced plugin stay valid for the registry's lifetime.
  void scan_named(const std::vector<std::filesystem::path>& dirs, const std::string& origin);

  // Loads one plugin file. Throws PluginError naming the file and the offending field. A
  // plugin whose kind and name (or alias) is already registered is refused the same way.
  const PluginInfo& load_file(const std::filesystem::path& file);

  // Every loaded plugin, optionally of one kind, sorted by kind then name.
  [[nodiscard]] std::vector<const PluginInfo*> plugins(std::optional<PluginKind> kind = {}) const;
  [[nodiscard]] const std::vector<PluginLoadFailure>& failures() const noexcept;
  // Every folder scan_directory() or scan_named() was asked to read, in order, whether or not
  // it existed.
  [[nodiscard]] const std::vector<std::filesystem::path>& scanned_directories() const noexcept;

  // Looks a plugin up by name or alias. Throws ConfigError listing the known names and
  // suggesting the nearest one.
  [[nodiscard]] const PluginInfo& find(PluginKind kind, std::string_view name) const;
  [[nodiscard]] const PluginInfo* try_find(PluginKind kind, std::string_view name) const noexcept;

  // Creates an object of plugin `name`. `options` must be resolved against the plugin's schema
  // (Config does that); a default-constructed Options stands for the plugin's defaults, and
  // options of another section are refused with ConfigError. Errors thrown by the plugin's
  // constructor propagate unchanged. The plugin's library stays loaded for good.
  template <class Interface>
  [[nodiscard]] std::shared_ptr<Interface> create(std::string_view name,
                                                  const Options& options) const {
    return std::shared_ptr<Interface>(
        static_cast<Interface*>(create_raw(interface_kind<Interface>::value, name, options)));
  }

  // The store plugin that declared URL scheme `scheme` (ABI 3.0), or null when none did.
  [[nodiscard]] const PluginInfo* find_url_scheme(std::string_view scheme) const noexcept;

  // The reader of store `store`'s URLs (tessera/plugin/store_url_scheme.hpp). Throws
  // ConfigError for an unknown store, PluginError for one that declares no URL scheme.
  [[nodiscard]] std::shared_ptr<const StoreUrlScheme> create_url_scheme(
      std::string_view store) const;

  // The options of plugin `name` with every default filled in and nothing overridden.
  [[nodiscard]] Options default_options(PluginKind kind, std::string_view name) const;

 private:
  struct Loaded;
  // The factory's object, as the kind's interface pointer; never null.
  void* create_raw(PluginKind kind, std::string_view name, const Options& options) const;
  [[nodiscard]] const Loaded& loaded(PluginKind kind, std::string_view name) const;
  void scan_folder(const std::filesystem::path& dir, const std::string* named_origin);
  const PluginInfo& load(const std::filesystem::path& file, const std::string* named_origin);

  std::vector<std::unique_ptr<Loaded>> loaded_;
  // Plugins a named folder's copy replaced: kept (not unloaded) so nothing handed out dangles.
  std::vector<std::unique_ptr<Loaded>> replaced_;
  std::vector<PluginLoadFailure> failures_;
  std::vector<std::filesystem::path> scanned_;
};

// The build id this libtessera was compiled with; plugins must carry the same one.
[[nodiscard]] std::string_view host_build_id() noexcept;

// Closest candidate to `word` by edit distance, if it is close enough to be a likely typo.
[[nodiscard]] std::optional<std::string> nearest_name(std::string_view word,
                                                      const std::vector<std::string>& candidates);

}  // namespace tessera
