#include "registry/descriptor_check.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

#include "tessera/base/error.hpp"

namespace tessera::detail {

namespace {

// Bounds on lists the host walks by trusting the plugin; past them the table is corrupt
// (a missing NULL terminator, a garbage count) and reading on would crash the host.
constexpr std::size_t kMaxAliases = 64;
constexpr std::uint32_t kMaxOptions = 1024;

// The sizes of this major's first descriptor and option entry (ABI 3.0's): a plugin of this
// major has at least these; a later minor appends fields, which this host does not read.
constexpr std::size_t kMajorBaseSize = sizeof(tessera_plugin_descriptor);
constexpr std::size_t kMajorBaseOptionSize = sizeof(tessera_option_desc);

std::string quoted(const char* text) {
  return "'" + std::string(text) + "'";
}

std::string hex(std::uint32_t value) {
  char text[16];
  (void)std::snprintf(text, sizeof(text), "0x%x", static_cast<unsigned>(value));
  return text;
}

bool is_valid_option_name(std::string_view name) noexcept {
  if (name.empty() || name.front() < 'a' || name.front() > 'z') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

class DescriptorCheck {
 public:
  DescriptorCheck(const std::filesystem::path& file, const tessera_plugin_descriptor& d)
      : file_(file), d_(d) {}

  PluginInfo run() {
    check_abi();
    PluginInfo info;
    info.file = file_;
    info.kind = check_kind();
    info.name = check_name(d_.name, "name");
    info.aliases = check_aliases(info.name);
    info.version = check_text(d_.version, "version");
    info.description = check_text(d_.description, "description");
    info.options = check_options();
    info.capabilities = check_capabilities(info.kind);
    if (d_.create == nullptr) refuse("create is NULL: the plugin has no factory");
    info.url_scheme = check_url_scheme(info.kind);
    return info;
  }

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    throw PluginError(file_.string() + ": " + why);
  }

  void check_abi() const {
    // The first three fields keep their place in every ABI version, so they are safe to read
    // before struct_size is trusted. The symbol's name already says the major (the registry
    // looks up only this host's); a field that disagrees is a hand-made, broken descriptor.
    const std::string host =
        std::to_string(TESSERA_PLUGIN_ABI_MAJOR) + "." + std::to_string(TESSERA_PLUGIN_ABI_MINOR);
    if (d_.abi_major != TESSERA_PLUGIN_ABI_MAJOR) {
      refuse("abi_major is " + std::to_string(d_.abi_major) +
             " but the descriptor is exported as " + TESSERA_PLUGIN_DESCRIPTOR_SYMBOL + " (ABI " +
             std::to_string(TESSERA_PLUGIN_ABI_MAJOR) + "); declare the plugin with " +
             "TESSERA_PLUGIN and rebuild it against this tessera");
    }
    if (d_.abi_minor > TESSERA_PLUGIN_ABI_MINOR) {
      refuse("abi_minor is " + std::to_string(d_.abi_minor) + ", newer than this libtessera's " +
             host + "; use a newer tessera, or rebuild the plugin against this one");
    }
    if (d_.struct_size < kMajorBaseSize) {
      refuse("struct_size is " + std::to_string(d_.struct_size) + ", smaller than the " +
             std::to_string(kMajorBaseSize) +
             " bytes of an ABI " TESSERA_PLUGIN_ABI_STR(TESSERA_PLUGIN_ABI_MAJOR) ".0 descriptor");
    }
    if (d_.build_id == nullptr) refuse("build_id is NULL");
    if (host_build_id() != d_.build_id) {
      refuse("build_id is " + quoted(d_.build_id) + ", this libtessera was built as '" +
             std::string(host_build_id()) + "' (rebuild the plugin with the same compiler, " +
             "C++ library and tessera major)");
    }
  }

  PluginCapabilities check_capabilities(PluginKind kind) const {
    const auto& c = d_.capabilities;
    const std::string kind_name(plugin_kind_name(kind));
    constexpr std::uint32_t kSpans = TESSERA_SPANS_PROCESSES | TESSERA_SPANS_HOSTS;
    constexpr std::uint32_t kDevices = TESSERA_DEVICE_CPU | TESSERA_DEVICE_CUDA;
    const bool spanning_kind = kind == PluginKind::transport || kind == PluginKind::store;
    const std::uint32_t allowed = spanning_kind                  ? kSpans
                                  : kind == PluginKind::strategy ? TESSERA_REPLICATED_STATE
                                                                 : 0U;
    if ((c.flags & ~allowed) != 0) {
      refuse("capabilities.flags is " + hex(c.flags) + ", but a plugin of kind " + kind_name +
             (spanning_kind ? " declares only TESSERA_SPANS_PROCESSES and TESSERA_SPANS_HOSTS (0x3)"
              : kind == PluginKind::strategy ? " declares only TESSERA_REPLICATED_STATE (0x4)"
                                             : " declares none (TESSERA_NO_CAPABILITIES)"));
    }
    if ((c.flags & TESSERA_SPANS_HOSTS) != 0 && (c.flags & TESSERA_SPANS_PROCESSES) == 0) {
      refuse("capabilities.flags is " + hex(c.flags) +
             ": TESSERA_SPANS_HOSTS without TESSERA_SPANS_PROCESSES (ranks on two hosts are two "
             "processes)");
    }
    if (kind == PluginKind::transport && (c.devices == 0 || (c.devices & ~kDevices) != 0)) {
      refuse("capabilities.devices is " + hex(c.devices) +
             ": a transport declares where its buffers may live, TESSERA_DEVICE_CPU (0x1) and/or "
             "TESSERA_DEVICE_CUDA (0x2)");
    }
    if (kind == PluginKind::strategy && (c.devices & ~kDevices) != 0) {
      refuse("capabilities.devices is " + hex(c.devices) +
             ": a strategy declares where its state may live, TESSERA_DEVICE_CPU (0x1) and/or "
             "TESSERA_DEVICE_CUDA (0x2), or none for host memory only");
    }
    if (kind != PluginKind::transport && kind != PluginKind::strategy && c.devices != 0) {
      refuse("capabilities.devices is " + hex(c.devices) + ", but a plugin of kind " + kind_name +
             " declares none: only a transport or a strategy declares devices");
    }
    PluginCapabilities out;
    out.spans_processes = (c.flags & TESSERA_SPANS_PROCESSES) != 0;
    out.spans_hosts = (c.flags & TESSERA_SPANS_HOSTS) != 0;
    out.replicated_state = (c.flags & TESSERA_REPLICATED_STATE) != 0;  // a strategy's alone
    if ((c.devices & TESSERA_DEVICE_CPU) != 0) out.devices.push_back(DeviceType::cpu);
    if ((c.devices & TESSERA_DEVICE_CUDA) != 0) out.devices.push_back(DeviceType::cuda);
    return out;
  }

  // "" for a plugin that declares no scheme (every kind but a store, or a store no URL names).
  std::string check_url_scheme(PluginKind kind) const {
    if ((d_.url_scheme == nullptr) != (d_.create_url_scheme == nullptr)) {
      refuse(d_.url_scheme == nullptr
                 ? std::string("url_scheme is NULL but create_url_scheme is set; declare both")
                 : "url_scheme is " + quoted(d_.url_scheme) +
                       " but create_url_scheme is NULL: nothing can read its URLs");
    }
    if (d_.url_scheme == nullptr) return {};
    if (kind != PluginKind::store) {
      refuse("url_scheme is " + quoted(d_.url_scheme) + ", but only a store is named by URL");
    }
    const std::string scheme(d_.url_scheme);
    const bool valid =
        !scheme.empty() && scheme.front() >= 'a' && scheme.front() <= 'z' &&
        scheme.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789+-.") == std::string::npos;
    if (!valid) {
      refuse("url_scheme is " + quoted(d_.url_scheme) +
             ": a scheme is a lower-case letter, then lower-case letters, digits, '+', '-', '.'");
    }
    return scheme;
  }

  PluginKind check_kind() const {
    if (d_.kind == nullptr) refuse("kind is NULL");
    if (auto kind = parse_plugin_kind(d_.kind)) return *kind;
    std::vector<std::string> known;
    for (PluginKind k : kAllPluginKinds) known.emplace_back(plugin_kind_name(k));
    std::string why = "kind is " + quoted(d_.kind) + ", not a known kind (";
    for (std::size_t i = 0; i < known.size(); ++i) why += (i ? ", " : "") + known[i];
    why += ")";
    if (auto near = nearest_name(d_.kind, known)) why += "; did you mean '" + *near + "'?";
    refuse(why);
  }

  std::string check_name(const char* name, const std::string& field) const {
    if (name == nullptr) refuse(field + " is NULL");
    if (!is_valid_plugin_name(name)) {
      refuse(field + " " + quoted(name) +
             " is not a valid plugin name (a lower-case letter, then a-z, 0-9, '_' or '-')");
    }
    return name;
  }

  std::vector<std::string> check_aliases(const std::string& name) const {
    std::vector<std::string> aliases;
    if (d_.aliases == nullptr) return aliases;
    for (std::size_t i = 0; d_.aliases[i] != nullptr; ++i) {
      if (i == kMaxAliases) {
        refuse("aliases has no NULL terminator within " + std::to_string(kMaxAliases) + " entries");
      }
      std::string alias = check_name(d_.aliases[i], "aliases[" + std::to_string(i) + "]");
      if (alias == name || std::find(aliases.begin(), aliases.end(), alias) != aliases.end()) {
        refuse("aliases[" + std::to_string(i) + "] '" + alias + "' repeats the plugin's name " +
               "or another alias");
      }
      aliases.push_back(std::move(alias));
    }
    return aliases;
  }

  std::string check_text(const char* text, const std::string& field) const {
    if (text == nullptr) refuse(field + " is NULL");
    return text;
  }

  std::vector<OptionSpec> check_options() const {
    if (d_.option_count > kMaxOptions) {
      refuse("option_count is " + std::to_string(d_.option_count) + ", more than the " +
             std::to_string(kMaxOptions) + " a sane table holds");
    }
    if (d_.option_count > 0 && d_.options == nullptr) {
      refuse("options is NULL but option_count is " + std::to_string(d_.option_count));
    }
    // Walked with the plugin's own stride: a later minor's entries are longer, and this host
    // reads the fields it knows.
    const std::size_t stride = d_.option_desc_size;
    if (stride < kMajorBaseOptionSize || stride % alignof(tessera_option_desc) != 0) {
      refuse("option_desc_size is " + std::to_string(stride) + ", not the size of an option " +
             "entry (" + std::to_string(kMajorBaseOptionSize) +
             " in ABI " TESSERA_PLUGIN_ABI_STR(TESSERA_PLUGIN_ABI_MAJOR) ".0)");
    }
    const auto* table = reinterpret_cast<const unsigned char*>(d_.options);
    std::vector<OptionSpec> specs;
    for (std::uint32_t i = 0; i < d_.option_count; ++i) {
      tessera_option_desc entry{};
      std::memcpy(&entry, table + i * stride, sizeof(entry));
      specs.push_back(check_option(entry, "options[" + std::to_string(i) + "]"));
      const auto& name = specs.back().name;
      if (std::count_if(specs.begin(), specs.end(),
                        [&](const OptionSpec& s) { return s.name == name; }) > 1) {
        refuse("options[" + std::to_string(i) + "] '" + name + "' is declared twice");
      }
    }
    return specs;
  }

  OptionSpec check_option(const tessera_option_desc& o, const std::string& field) const {
    OptionSpec spec;
    if (o.name == nullptr) refuse(field + ".name is NULL");
    if (!is_valid_option_name(o.name)) {
      refuse(field + ".name " + quoted(o.name) +
             " is not a valid option name (a lower-case letter, then a-z, 0-9 or '_')");
    }
    spec.name = o.name;
    const std::string where = field + " '" + spec.name + "'";
    if (o.type == nullptr) refuse(where + ": type is NULL");
    auto type = parse_option_type(o.type);
    if (!type) {
      refuse(where + ": type " + quoted(o.type) +
             " is not one of bool, int, float, string, size, duration");
    }
    spec.type = *type;
    spec.help = check_text(o.help, where + ": help");
    if (o.choices != nullptr) {
      std::string_view rest(o.choices);
      while (true) {
        const auto bar = rest.find('|');
        const std::string choice(rest.substr(0, bar));
        if (choice.empty())
          refuse(where + ": choices " + quoted(o.choices) + " has an empty entry");
        if (std::find(spec.choices.begin(), spec.choices.end(), choice) != spec.choices.end()) {
          refuse(where + ": choices " + quoted(o.choices) + " lists '" + choice + "' twice");
        }
        if (auto error =
                validate_option_value(OptionSpec{spec.name, spec.type, {}, {}, {}}, choice)) {
          refuse(where + ": choice " + *error);
        }
        spec.choices.push_back(choice);
        if (bar == std::string_view::npos) break;
        rest.remove_prefix(bar + 1);
      }
    }
    if (o.minimum != nullptr) spec.minimum = o.minimum;
    if (o.maximum != nullptr) spec.maximum = o.maximum;
    if (auto error = option_range_error(spec)) refuse(where + ": " + *error);
    if (o.default_value != nullptr) {
      if (auto error = validate_option_value(spec, o.default_value)) {
        refuse(where + ": default_value is invalid: " + *error);
      }
      spec.default_value = o.default_value;
    }
    return spec;
  }

  const std::filesystem::path& file_;
  const tessera_plugin_descriptor& d_;
};

}  // namespace

bool is_valid_plugin_name(std::string_view name) noexcept {
  if (name.empty() || name.front() < 'a' || name.front() > 'z') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

PluginInfo check_descriptor(const std::filesystem::path& file,
                            const tessera_plugin_descriptor& descriptor) {
  return DescriptorCheck(file, descriptor).run();
}

}  // namespace tessera::detail
