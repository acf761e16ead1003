// The store URLs `tessera launch --store` takes and hands its workers, as the store plugins read
// them: the forms, each job's namespace, the options they set, what a job leaves behind, and
// every malformed URL refused naming where it came from.
#include "tessera/runtime/store_url.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "memory_store.hpp"
#include "tessera/base/error.hpp"

namespace tessera {
namespace {

// The build's store plugins, loaded once: every URL is read by the plugin that serves it.
const PluginRegistry& stores() {
  static const auto* registry = [] {
    auto* loaded = new PluginRegistry();
    loaded->scan_directory(TESSERA_PLUGIN_DIR);
    return loaded;
  }();
  return *registry;
}

StoreUrl parse_store_url(const std::string& text, const std::string& what) {
  return tessera::parse_store_url(stores(), text, what);
}

std::string parse_error(const std::string& text) {
  try {
    (void)parse_store_url(text, "--store");
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "'" << text << "' was accepted";
  return {};
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

using Values = std::map<std::string, std::string>;

TEST(StoreUrl, HostAndPortAloneIsTheTcpStore) {
  const auto url = parse_store_url("10.0.0.1:29500", "--store");
  EXPECT_EQ(url.scheme, "tcp");
  EXPECT_EQ(url.store, "tcp");
  EXPECT_EQ(url.text(), "tcp://10.0.0.1:29500");
  EXPECT_EQ(url.plugin_options(), (Values{{"host", "10.0.0.1"}, {"port", "29500"}}));
  EXPECT_EQ(parse_store_url("tcp://[::1]:29500", "--store").plugin_options(),
            (Values{{"host", "::1"}, {"port", "29500"}}));
  // A tcp store holds one job: for_job leaves it as it is.
  EXPECT_EQ(url.for_job("j1").text(), "tcp://10.0.0.1:29500");
}

TEST(StoreUrl, EtcdTakesSeveralEndpointsAndNamespacesEachJobUnderItsPrefix) {
  const auto url = parse_store_url("etcd://a:2379,[fd00::1]:2380,b", "--store");
  EXPECT_EQ(url.scheme, "etcd");
  EXPECT_EQ(url.store, "etcd");
  EXPECT_EQ(url.location, "a:2379,[fd00::1]:2380,b:2379");
  const auto job = url.for_job("job-7");
  EXPECT_EQ(job.text(), "etcd://a:2379,[fd00::1]:2380,b:2379/tessera/job-7/");
  EXPECT_EQ(job.plugin_options(),
            (Values{{"endpoints", "a:2379,[fd00::1]:2380,b:2379"}, {"prefix", "tessera/job-7/"}}));
  EXPECT_EQ(
      parse_store_url("etcd://a:1/team/x", "--store").for_job("j").plugin_options().at("prefix"),
      "team/x/j/");
}

TEST(StoreUrl, AWorkersUrlReadsBackAsTheSameStore) {
  for (const std::string text :
       {"etcd://h:1,g:2/tessera/abc/", "file:///shared/rdzv/abc", "tcp://h:29500"}) {
    EXPECT_EQ(parse_store_url(text, "TESSERA_STORE_URL").text(), text);
  }
}

TEST(StoreUrl, AFileStoreNamespacesEachJobInASubfolder) {
  const auto url = parse_store_url("file:///shared//rdzv/", "--store");
  EXPECT_EQ(url.location, "/shared/rdzv");
  EXPECT_EQ(url.for_job("j1").plugin_options(), (Values{{"path", "/shared/rdzv/j1"}}));
}

TEST(StoreUrl, MalformedUrlsAreRefusedNamingWhereTheyCameFrom) {
  EXPECT_TRUE(contains(parse_error("redis://h:1"), "--store redis://h:1: unknown scheme 'redis'"));
  EXPECT_TRUE(contains(parse_error("file://relative/path"), "takes an absolute path"));
  EXPECT_TRUE(contains(parse_error("file://"), "takes an absolute path"));
  EXPECT_TRUE(contains(parse_error("etcd://h:99999"), "'h:99999' has no port 1-65535"));
  EXPECT_TRUE(contains(parse_error("etcd://h:"), "'h:' has no port"));
  EXPECT_TRUE(contains(parse_error("etcd://:2379"), "has no host"));
  EXPECT_TRUE(contains(parse_error("etcd://a:1,,b:2"), "has no host"));
  EXPECT_TRUE(contains(parse_error("tcp://h"), "has no port"));
  EXPECT_TRUE(contains(parse_error("tcp://h:1/x"), "a tcp store URL has no path"));
  EXPECT_TRUE(contains(parse_error("fe80::1:29500"), "IPv6 address without [ ]"));
  EXPECT_TRUE(contains(parse_error("https://h:2379"), "unknown scheme 'https'"));
  EXPECT_TRUE(contains(parse_error("https://h:2379"), "speaks neither TLS"));
  EXPECT_TRUE(contains(parse_error(""), "--store: empty"));
}

TEST(StoreUrl, AnUnknownSchemeListsTheFormOfEveryStoreThatServesUrls) {
  const auto error = parse_error("redis://h:1");
  EXPECT_TRUE(contains(error,
                       "; write HOST:PORT or tcp://HOST:PORT (tessera's tcp store), "
                       "etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (an etcd v3 server"));
  EXPECT_TRUE(contains(error, ", or file:///ABSOLUTE/PATH (a folder every host sees)"));
  // `memory` keeps its keys in one process: no URL names it.
  EXPECT_EQ(stores().find_url_scheme("memory"), nullptr);
}

TEST(StoreUrl, ForgettingAFileStoresJobRemovesItsFolder) {
  const auto root =
      std::filesystem::temp_directory_path() / ("tessera-store-url-" + std::to_string(::getpid()));
  const auto job = parse_store_url("file://" + root.string(), "--store").for_job("j1");
  const auto defaults = stores().default_options(PluginKind::store, job.store);
  auto values = defaults.values();
  for (const auto& [key, value] : job.plugin_options()) values[key] = value;
  const auto store =
      stores().create<Store>(job.store, Options(defaults.section(), defaults.specs(), values));
  store->set("nodes/0", "here");
  ASSERT_TRUE(std::filesystem::exists(root / "j1"));
  job.forget_job(*store);
  EXPECT_FALSE(std::filesystem::exists(root / "j1"));
  EXPECT_TRUE(std::filesystem::exists(root));  // other jobs' folders are not its to remove
  std::filesystem::remove_all(root);
}

TEST(StoreUrl, ForgettingAJobByDefaultRemovesEveryKeyOfItsNamespace) {
  // etcd keeps the default: every key the job's store lists, and no other job's.
  const auto job = parse_store_url("etcd://h:1", "--store").for_job("j1");
  const auto server = memory::make_memory_store();
  PrefixStore this_job("tessera/j1", server);
  PrefixStore other_job("tessera/j2", server);
  this_job.set("nodes/0", "here");
  this_job.set("world/1", "a,b");
  other_job.set("nodes/0", "there");
  job.forget_job(this_job);
  EXPECT_TRUE(this_job.list("").empty());
  EXPECT_EQ(other_job.list(""),
            (std::vector<std::pair<std::string, std::string>>{{"nodes/0", "there"}}));
}

TEST(StoreUrl, JobIdsAreNamesOfOneSegment) {
  EXPECT_NO_THROW(check_job_id("run_7.b-2", "--job-id"));
  for (const std::string& bad :
       std::vector<std::string>{"", ".", "..", "a/b", "a b", std::string(65, 'x')})
    EXPECT_THROW(check_job_id(bad, "--job-id"), ConfigError) << bad;
  EXPECT_THROW((void)parse_store_url("etcd://h:1", "--store").for_job("../x"), ConfigError);
}

TEST(StoreUrl, AJobIdFromATokenIsStableAndDistinct) {
  const auto id = job_id_from_token("0123456789abcdef0123456789abcdef");
  EXPECT_EQ(id, job_id_from_token("0123456789abcdef0123456789abcdef"));
  EXPECT_NE(id, job_id_from_token("0123456789abcdef0123456789abcdee"));
  EXPECT_EQ(id.size(), 16U);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NO_THROW(check_job_id(id, "derived"));
}

}  // namespace
}  // namespace tessera
