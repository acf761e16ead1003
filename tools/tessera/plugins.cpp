#include "plugins.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "tessera/registry/registry.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

namespace {

namespace po = boost::program_options;

constexpr const char* kUsage = R"(usage: tessera plugins [--kind KIND] [--json] [--path DIR ...]

Lists every plugin found beside libtessera (lib/tessera/plugins), in TESSERA_PLUGIN_PATH and in
each --path folder: kind, name, aliases, version, description, file and every option with its
type, default, choices and help. Files that fail to load are reported on stderr as warnings.
Where one plugin is found twice, the copy in a --path folder wins over TESSERA_PLUGIN_PATH's,
and that one over the installed one (a note names the other); every --path folder and
TESSERA_PLUGIN_PATH folder must exist.
)";

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

const char* device_name(DeviceType device) {
  return device == DeviceType::cuda ? "cuda" : "cpu";
}

// What the descriptor says the plugin can do, for the kinds that declare capabilities:
// "spans processes, spans hosts, devices cpu", "one process only".
std::vector<std::string> capability_words(const PluginInfo& p) {
  std::vector<std::string> words;
  const auto device_words = [&] {
    std::vector<std::string> devices;
    for (DeviceType d : p.capabilities.devices) devices.emplace_back(device_name(d));
    return "devices " + (devices.empty() ? std::string("cpu") : join(devices, " "));
  };
  if (p.kind == PluginKind::strategy) {
    if (p.capabilities.replicated_state) words.emplace_back("replicated state");
    words.push_back(device_words());
    return words;
  }
  if (p.kind != PluginKind::transport && p.kind != PluginKind::store) return words;
  if (p.capabilities.spans_processes) words.emplace_back("spans processes");
  if (p.capabilities.spans_hosts) words.emplace_back("spans hosts");
  if (words.empty()) words.emplace_back("one process only");
  if (p.kind == PluginKind::transport) words.push_back(device_words());
  return words;
}

void print_text(const std::vector<const PluginInfo*>& plugins) {
  for (const auto* p : plugins) {
    const std::string section = std::string(plugin_kind_name(p->kind)) + "." + p->name;
    std::cout << section << " " << p->version;
    if (!p->aliases.empty()) std::cout << " (aliases: " << join(p->aliases, ", ") << ")";
    std::cout << "\n  " << p->description << "\n  file: " << p->file.string() << "\n";
    if (const auto words = capability_words(*p); !words.empty()) {
      std::cout << "  capabilities: " << join(words, ", ") << "\n";
    }
    if (!p->url_scheme.empty()) std::cout << "  named by URL: " << p->url_scheme << "://\n";
    if (p->options.empty()) std::cout << "  no options\n";
    std::size_t width = 0;
    for (const auto& o : p->options) width = std::max(width, o.name.size());
    for (const auto& o : p->options) {
      std::cout << "  " << o.name << std::string(width + 2 - o.name.size(), ' ')
                << option_type_name(o.type) << ", "
                << (o.default_value ? "default '" + *o.default_value + "'" : "required");
      if (!o.choices.empty()) std::cout << ", one of " << join(o.choices, "|");
      if (o.minimum && o.maximum) {
        std::cout << ", range [" << *o.minimum << ", " << *o.maximum << "]";
      } else if (o.minimum) {
        std::cout << ", at least " << *o.minimum;
      } else if (o.maximum) {
        std::cout << ", at most " << *o.maximum;
      }
      std::cout << ": " << o.help << "\n";
    }
    std::cout << "\n";
  }
}

void print_json(const std::vector<const PluginInfo*>& plugins,
                const std::vector<PluginLoadFailure>& failures) {
  using Json = nlohmann::ordered_json;
  const auto optional = [](const std::optional<std::string>& value) {
    return value ? Json(*value) : Json(nullptr);
  };
  Json out;
  out["plugins"] = Json::array();
  for (const auto* p : plugins) {
    Json devices = Json::array();
    for (DeviceType d : p->capabilities.devices) devices.push_back(device_name(d));
    Json capabilities = {{"spans_processes", p->capabilities.spans_processes},
                         {"spans_hosts", p->capabilities.spans_hosts},
                         {"replicated_state", p->capabilities.replicated_state},
                         {"devices", std::move(devices)}};
    Json options = Json::array();
    for (const auto& o : p->options) {
      options.push_back({{"name", o.name},
                         {"type", option_type_name(o.type)},
                         {"default", optional(o.default_value)},
                         {"help", o.help},
                         {"choices", o.choices},
                         {"minimum", optional(o.minimum)},
                         {"maximum", optional(o.maximum)}});
    }
    out["plugins"].push_back(
        {{"kind", plugin_kind_name(p->kind)},
         {"name", p->name},
         {"aliases", p->aliases},
         {"version", p->version},
         {"description", p->description},
         {"file", p->file.string()},
         {"capabilities", std::move(capabilities)},
         {"url_scheme", p->url_scheme.empty() ? Json(nullptr) : Json(p->url_scheme)},
         {"options", std::move(options)}});
  }
  out["failures"] = Json::array();
  for (const auto& f : failures) {
    out["failures"].push_back(
        {{"file", f.file.string()}, {"reason", f.reason}, {"shadowed", f.shadowed}});
  }
  std::cout << out.dump(1, ' ', false, Json::error_handler_t::replace) << "\n";
}

}  // namespace

int run_plugins(const std::vector<std::string>& args) {
  po::options_description description("options");
  description.add_options()("kind", po::value<std::string>(), "only plugins of this kind")(
      "json", "machine-readable output")("path", po::value<std::vector<std::string>>()->composing(),
                                         "also scan this folder")("help,h", "this text");
  po::variables_map vm;
  try {
    po::store(
        po::command_line_parser(args)
            .options(description)
            .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
            .run(),
        vm);
  } catch (const po::error& e) {
    throw UsageError("plugins: " + std::string(e.what()));
  }
  if (vm.count("help")) {
    std::cout << kUsage << "\n" << description;
    return 0;
  }
  std::optional<PluginKind> kind;
  if (vm.count("kind")) {
    const auto& name = vm["kind"].as<std::string>();
    kind = parse_plugin_kind(name);
    if (!kind) {
      std::vector<std::string> kinds;
      for (PluginKind k : kAllPluginKinds) kinds.emplace_back(plugin_kind_name(k));
      std::string message = "plugins: unknown kind '" + name + "'";
      if (auto near = nearest_name(name, kinds)) message += "; did you mean '" + *near + "'?";
      throw UsageError(message + " (kinds: " + join(kinds, ", ") + ")");
    }
  }

  PluginSearchPath search{PluginRegistry::default_search_path(), {}, "flag --path"};
  if (vm.count("path")) {
    for (const auto& list : vm["path"].as<std::vector<std::string>>()) {
      for (auto& dir : PluginRegistry::split_folder_list(list)) search.named.push_back(dir);
    }
  }
  PluginRegistry registry;
  registry.scan(search);
  for (const auto& failure : registry.failures()) {
    std::cerr << (failure.shadowed ? "tessera: note: " : "tessera: warning: ") << failure.reason
              << "\n";
  }
  const auto plugins = registry.plugins(kind);
  if (vm.count("json")) {
    print_json(plugins, registry.failures());
  } else if (plugins.empty()) {
    std::cout << "no plugins found; searched:";
    for (const auto& dir : registry.scanned_directories()) std::cout << " " << dir.string();
    std::cout << "\n";
  } else {
    print_text(plugins);
  }
  return 0;
}

}  // namespace tessera::cli
