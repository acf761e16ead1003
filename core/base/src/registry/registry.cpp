#include "tessera/registry/registry.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <exception>

#include "registry/descriptor_check.hpp"
#include "tessera/base/error.hpp"
#include "tessera/plugin/plugin_abi.h"
#include "tessera/plugin/store_url_scheme.hpp"

namespace tessera {

struct PluginRegistry::Loaded {
  PluginInfo info;
  std::filesystem::path canonical_file;
  // Opened RTLD_NODELETE: destroying it leaves the plugin mapped (see open_library).
  std::unique_ptr<const boost::dll::shared_library> library;
  const tessera_plugin_descriptor* descriptor = nullptr;
  // Found in a folder the user named (scan_named): wins over copies on the default path.
  bool named = false;

  [[nodiscard]] bool answers_to(PluginKind kind, std::string_view name) const {
    if (info.kind != kind) return false;
    return info.name == name ||
           std::find(info.aliases.begin(), info.aliases.end(), name) != info.aliases.end();
  }
};

namespace {

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& why) {
  throw PluginError(file.string() + ": " + why);
}

// Thrown by load_file for a second plugin of the same kind and name, so that scan_directory
// can record it as shadowed rather than broken.
class ShadowedPlugin : public PluginError {
 public:
  using PluginError::PluginError;
};

boost::dll::shared_library open_library(const std::filesystem::path& file) {
  std::error_code ec;
  // RTLD_NOW: a plugin with an unresolved symbol is refused here, with the symbol named,
  // rather than crashing in the middle of a run.
  // RTLD_NODELETE: once loaded, a plugin's code and data stay mapped until the process exits.
  // Unloading cannot be made safe by counting the objects a plugin created, because not
  // everything that points into its code is such an object: an exception it threw (its
  // destructor, vtable and type_info, or std::make_exception_ptr's destructor thunk, are
  // emitted in the plugin) may be held as an exception_ptr by any caller; so may a callback,
  // a thread_local's destructor, or a thread of a library the plugin itself loaded (UCX).
  // Each of those ran into unmapped memory after its library was closed.
  constexpr auto mode = static_cast<boost::dll::load_mode::type>(
      static_cast<unsigned>(boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local) |
      RTLD_NODELETE);
  boost::dll::shared_library library(file, ec, mode);
  if (!ec) return library;
  // The loader's own words ("file too short", "undefined symbol: ...") say more than the
  // error code; they start with the path, which the refusal already names.
  const char* loader_error = dlerror();
  std::string why = loader_error != nullptr ? loader_error : ec.message();
  const std::string path_prefix = file.string() + ": ";
  if (why.starts_with(path_prefix)) why.erase(0, path_prefix.size());
  refuse(file, "not a loadable shared object: " + why);
}

// A plugin built for another ABI major exports its descriptor under that major's name
// (plugin_abi.h); saying which major, and what to do, beats "symbol missing".
[[noreturn]] void refuse_missing_descriptor(const std::filesystem::path& file,
                                            const boost::dll::shared_library& library) {
  constexpr int kMaxMajor = 16;
  const std::string host = std::to_string(TESSERA_PLUGIN_ABI_MAJOR);
  for (int major = 1; major <= kMaxMajor; ++major) {
    const std::string other = "tessera_plugin_descriptor_v" + std::to_string(major);
    if (major == TESSERA_PLUGIN_ABI_MAJOR || !library.has(other)) continue;
    const std::string theirs = std::to_string(major);
    if (major < TESSERA_PLUGIN_ABI_MAJOR) {
      refuse(file, "exports " + other + ": it was built for plugin ABI " + theirs +
                       ", this libtessera speaks ABI " + host +
                       "; rebuild the plugin against this tessera's SDK (docs/plugin-guide.md, " +
                       "\"Porting a plugin from ABI " + theirs + "\")");
    }
    refuse(file, "exports " + other + ": it was built for plugin ABI " + theirs +
                     ", newer than this libtessera's ABI " + host +
                     "; run it with a tessera whose plugin ABI is " + theirs +
                     ", or rebuild it against this tessera's SDK");
  }
  refuse(file, std::string("no ") + TESSERA_PLUGIN_DESCRIPTOR_SYMBOL +
                   " symbol: not a tessera plugin (declare it with TESSERA_PLUGIN)");
}

std::string section_name(const PluginInfo& info) {
  return std::string(plugin_kind_name(info.kind)) + "." + info.name;
}

}  // namespace

PluginRegistry::PluginRegistry() = default;
PluginRegistry::~PluginRegistry() = default;

void PluginRegistry::scan_directory(const std::filesystem::path& dir) {
  scan_folder(dir, nullptr);
}

void PluginRegistry::scan(const std::vector<std::filesystem::path>& dirs) {
  for (const auto& dir : dirs) scan_directory(dir);
}

void PluginRegistry::scan(const PluginSearchPath& path) {
  scan(path.defaults);
  if (!path.named.empty()) scan_named(path.named, path.named_origin);
}

void PluginRegistry::scan_named(const std::vector<std::filesystem::path>& dirs,
                                const std::string& origin) {
  // Every folder is checked before any is loaded: a typo fails the whole path, not half of it.
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec)) continue;
    throw ConfigError(origin + ": plugin folder '" + dir.string() + "' " +
                      (std::filesystem::exists(dir, ec) ? "is not a folder" : "does not exist") +
                      "; correct the path or create the folder");
  }
  for (const auto& dir : dirs) scan_folder(dir, &origin);
}

void PluginRegistry::scan_folder(const std::filesystem::path& dir,
                                 const std::string* named_origin) {
  scanned_.push_back(dir);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return;
  std::vector<std::filesystem::path> files;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code file_ec;
    if (it->path().extension() == ".so" && it->is_regular_file(file_ec))
      files.push_back(it->path());
  }
  if (ec) {
    failures_.push_back({dir, "cannot list the folder: " + ec.message()});
    return;
  }
  // Sorted, so that which of two clashing plugins wins does not depend on the file system.
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    try {
      (void)load(file, named_origin);
    } catch (const ShadowedPlugin& e) {
      failures_.push_back({file, e.what(), true});
    } catch (const PluginError& e) {
      failures_.push_back({file, e.what()});
    }
  }
}

const PluginInfo& PluginRegistry::load_file(const std::filesystem::path& file) {
  return load(file, nullptr);
}

const PluginInfo& PluginRegistry::load(const std::filesystem::path& file,
                                       const std::string* named_origin) {
  std::error_code ec;
  auto canonical = std::filesystem::canonical(file, ec);
  if (ec) refuse(file, "cannot open: " + ec.message());
  // The same file reached through two search folders is one plugin, not a clash.
  for (const auto& loaded : loaded_) {
    if (loaded->canonical_file != canonical) continue;
    if (named_origin != nullptr) loaded->named = true;
    return loaded->info;
  }

  auto library = std::make_unique<const boost::dll::shared_library>(open_library(file));
  if (!library->has(TESSERA_PLUGIN_DESCRIPTOR_SYMBOL)) refuse_missing_descriptor(file, *library);
  const auto& descriptor =
      library->get<const tessera_plugin_descriptor>(TESSERA_PLUGIN_DESCRIPTOR_SYMBOL);
  PluginInfo info = detail::check_descriptor(file, descriptor);

  std::vector<std::string> names = info.aliases;
  names.insert(names.begin(), info.name);
  for (const auto& loaded : loaded_) {
    if (info.url_scheme.empty() || loaded->info.url_scheme != info.url_scheme ||
        loaded->info.name == info.name)
      continue;
    refuse(file, "url_scheme '" + info.url_scheme + "' is already served by the store '" +
                     loaded->info.name + "' of " + loaded->info.file.string() +
                     "; a URL must name one store");
  }
  // The copy of this same plugin found earlier on the default search path, which a named
  // folder's copy replaces.
  auto superseded = loaded_.end();
  for (auto it = loaded_.begin(); it != loaded_.end(); ++it) {
    const auto& loaded = *it;
    for (const auto& name : names) {
      if (!loaded->answers_to(info.kind, name)) continue;
      const std::string why = std::string(plugin_kind_name(info.kind)) + " name '" + name +
                              "' is already taken by " + loaded->info.file.string();
      if (loaded->info.name != info.name) refuse(file, why);
      if (named_origin != nullptr && !loaded->named) {
        superseded = it;
        break;
      }
      throw ShadowedPlugin(file.string() + ": " + why +
                           "; this copy is ignored (the first found on the search path wins)");
    }
  }
  if (superseded != loaded_.end()) {
    const auto& old = (*superseded)->info;
    failures_.push_back(
        {old.file,
         old.file.string() + ": " + std::string(plugin_kind_name(old.kind)) + " '" + old.name +
             "' is replaced by " + file.string() + " from a folder named at " + *named_origin +
             "; this copy is ignored (a named folder wins over the default search path)",
         true});
    replaced_.push_back(std::move(*superseded));
    loaded_.erase(superseded);
  }

  auto entry = std::make_unique<Loaded>();
  entry->info = std::move(info);
  entry->canonical_file = std::move(canonical);
  entry->library = std::move(library);
  entry->descriptor = &descriptor;
  entry->named = named_origin != nullptr;
  loaded_.push_back(std::move(entry));
  return loaded_.back()->info;
}

std::vector<const PluginInfo*> PluginRegistry::plugins(std::optional<PluginKind> kind) const {
  std::vector<const PluginInfo*> out;
  for (const auto& loaded : loaded_) {
    if (!kind || loaded->info.kind == *kind) out.push_back(&loaded->info);
  }
  std::sort(out.begin(), out.end(), [](const PluginInfo* a, const PluginInfo* b) {
    return std::tie(a->kind, a->name) < std::tie(b->kind, b->name);
  });
  return out;
}

const std::vector<PluginLoadFailure>& PluginRegistry::failures() const noexcept {
  return failures_;
}

const std::vector<std::filesystem::path>& PluginRegistry::scanned_directories() const noexcept {
  return scanned_;
}

const PluginInfo* PluginRegistry::try_find(PluginKind kind, std::string_view name) const noexcept {
  for (const auto& loaded : loaded_) {
    if (loaded->answers_to(kind, name)) return &loaded->info;
  }
  return nullptr;
}

const PluginInfo& PluginRegistry::find(PluginKind kind, std::string_view name) const {
  if (const auto* info = try_find(kind, name)) return *info;
  const std::string kind_name(plugin_kind_name(kind));
  std::string message = "no " + kind_name + " plugin named '" + std::string(name) + "'";
  std::vector<std::string> candidates;
  std::string known;
  for (const auto* info : plugins(kind)) {
    known += (known.empty() ? "" : ", ") + info->name;
    candidates.push_back(info->name);
    candidates.insert(candidates.end(), info->aliases.begin(), info->aliases.end());
  }
  if (auto near = nearest_name(name, candidates)) message += "; did you mean '" + *near + "'?";
  if (known.empty()) {
    message += " (no " + kind_name + " plugins are loaded; searched:";
    for (const auto& dir : scanned_) message += " " + dir.string();
    message += scanned_.empty() ? " nothing)" : ")";
  } else {
    message += " (known: " + known + ")";
  }
  throw ConfigError(message);
}

Options PluginRegistry::default_options(PluginKind kind, std::string_view name) const {
  const auto& info = find(kind, name);
  return Options(section_name(info), info.options, {});
}

const PluginRegistry::Loaded& PluginRegistry::loaded(PluginKind kind, std::string_view name) const {
  for (const auto& entry : loaded_) {
    if (entry->answers_to(kind, name)) return *entry;
  }
  (void)find(kind, name);  // throws the error with suggestions
  throw PluginError("no " + std::string(plugin_kind_name(kind)) + " plugin '" + std::string(name) +
                    "'");
}

const PluginInfo* PluginRegistry::find_url_scheme(std::string_view scheme) const noexcept {
  for (const auto& entry : loaded_) {
    if (entry->info.kind == PluginKind::store && !scheme.empty() &&
        entry->info.url_scheme == scheme)
      return &entry->info;
  }
  return nullptr;
}

std::shared_ptr<const StoreUrlScheme> PluginRegistry::create_url_scheme(
    std::string_view store) const {
  const Loaded& entry = loaded(PluginKind::store, store);
  if (entry.info.url_scheme.empty()) {
    throw PluginError(entry.info.file.string() + ": the store '" + entry.info.name +
                      "' declares no URL scheme (ABI 3.0), so no URL can name it");
  }
  std::exception_ptr error;
  const tessera_factory_args args{sizeof(tessera_factory_args), nullptr, &error};
  void* object = entry.descriptor->create_url_scheme(&args);
  if (object == nullptr) {
    if (error) std::rethrow_exception(error);
    throw PluginError(entry.info.file.string() +
                      ": create_url_scheme returned no object and no error");
  }
  return std::shared_ptr<const StoreUrlScheme>(static_cast<StoreUrlScheme*>(object));
}

void* PluginRegistry::create_raw(PluginKind kind, std::string_view name,
                                 const Options& options) const {
  const Loaded* loaded = &this->loaded(kind, name);

  const std::string section = section_name(loaded->info);
  const bool unresolved = options.section().empty() && options.specs().empty();
  const Options defaults = unresolved ? Options(section, loaded->info.options, {}) : Options();
  const Options& resolved = unresolved ? defaults : options;
  if (resolved.section() != section) {
    throw ConfigError("options of [" + resolved.section() + "] given to the " + section +
                      " plugin; resolve them against its own section");
  }

  std::exception_ptr error;
  const tessera_factory_args args{sizeof(tessera_factory_args), &resolved, &error};
  void* object = loaded->descriptor->create(&args);
  if (object == nullptr) {
    if (error) std::rethrow_exception(error);
    throw PluginError(loaded->info.file.string() + ": create returned no object and no error");
  }
  return object;
}

}  // namespace tessera
