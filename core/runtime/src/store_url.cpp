#include "tessera/runtime/store_url.hpp"

#include <boost/uuid/name_generator_sha1.hpp>
#include <boost/uuid/uuid.hpp>
#include <vector>

#include "tessera/base/error.hpp"

namespace tessera {

namespace {

// "write tcp://... (...), etcd://... (...), or ...": every form a loaded store serves, and the
// stores that no URL can name because they predate URL schemes.
std::string served_forms(const PluginRegistry& registry) {
  std::vector<std::string> forms;
  std::string unnamed;
  for (const auto* store : registry.plugins(PluginKind::store)) {
    if (!store->url_scheme.empty()) {
      // The launcher's own store first: its form is the one without a scheme.
      const auto at = store->url_scheme == kLauncherStoreScheme ? forms.begin() : forms.end();
      forms.insert(at, registry.create_url_scheme(store->name)->forms());
    } else if (store->capabilities.spans_processes) {
      unnamed += (unnamed.empty() ? "" : ", ") + store->name + " (" + store->file.string() + ")";
    }
  }
  std::string text = forms.empty() ? "no loaded store plugin is named by a URL" : "write ";
  for (std::size_t i = 0; i < forms.size(); ++i)
    text += (i == 0 ? "" : i + 1 == forms.size() ? ", or " : ", ") + forms[i];
  if (!unnamed.empty())
    text += "; the stores " + unnamed +
            " declare no URL scheme, so no URL names them (a store plugin declares url_scheme "
            "and create_url_scheme: docs/plugin-guide.md, \"Writing a store\")";
  return text;
}

}  // namespace

StoreUrl parse_store_url(const PluginRegistry& registry, const std::string& text,
                         const std::string& what) {
  if (text.empty()) throw ConfigError(what + ": empty; " + served_forms(registry));
  const std::string lead = what + " " + text + ": ";
  const auto separator = text.find("://");
  StoreUrl url;
  url.scheme = separator == std::string::npos ? kLauncherStoreScheme : text.substr(0, separator);
  const std::string location = separator == std::string::npos ? text : text.substr(separator + 3);
  const auto* plugin = registry.find_url_scheme(url.scheme);
  if (plugin == nullptr)
    throw ConfigError(lead + "unknown scheme '" + url.scheme + "'; " + served_forms(registry));
  url.store = plugin->name;
  url.reader = registry.create_url_scheme(plugin->name);
  try {
    url.location = url.reader->canonical(location);
  } catch (const ConfigError& e) {
    throw ConfigError(lead + e.what());
  }
  return url;
}

StoreUrl StoreUrl::for_job(const std::string& job_id) const {
  check_job_id(job_id, "the job id");
  StoreUrl job = *this;
  job.location = reader->for_job(location, job_id);
  return job;
}

std::map<std::string, std::string> StoreUrl::plugin_options() const {
  return reader->options(location);
}

void StoreUrl::forget_job(Store& opened) const {
  reader->forget_job(location, opened);
}

std::string job_id_from_token(const std::string& token) {
  // A fixed namespace: the ids are tessera's own, distinct from any other v5 UUIDs of tokens.
  constexpr boost::uuids::uuid kNamespace = {{0x6b, 0x1f, 0x3a, 0x52, 0x0c, 0x7e, 0x4d, 0x9a, 0x8e,
                                              0x21, 0x5b, 0x64, 0xf0, 0x13, 0xa7, 0xc9}};
  const auto uuid = boost::uuids::name_generator_sha1(kNamespace)(token);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (std::size_t i = 0; i < 8; ++i) {
    id.push_back(kHex[uuid.data[i] >> 4]);
    id.push_back(kHex[uuid.data[i] & 15]);
  }
  return id;
}

void check_job_id(const std::string& id, const std::string& what) {
  const bool valid =
      !id.empty() && id.size() <= 64 && id != "." && id != ".." &&
      id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
          std::string::npos;
  if (!valid)
    throw ConfigError(what + " '" + id +
                      "' must be 1-64 letters, digits, '.', '_' or '-': it names the job's keys "
                      "or folder in the job's store");
}

}  // namespace tessera
