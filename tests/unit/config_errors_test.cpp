// Every config mistake is a ConfigError that says where (file:line, variable, flag) and, where a
// valid name is close, suggests it.
#include "config_test_support.hpp"

namespace tessera {
namespace {

using namespace config_test;

class ConfigErrors : public ::testing::Test {
 protected:
  std::string file_error(const std::string& text) {
    file_ = dir_.write("run.ini", text);
    return load_error(sources(file_));
  }
  std::string at(int line) const { return file_.string() + ":" + std::to_string(line) + ": "; }

  ScratchDir dir_;
  std::filesystem::path file_;
};

TEST_F(ConfigErrors, UnknownSectionNamesTheLineAndSuggests) {
  EXPECT_TRUE(contains(file_error("[runtime]\nworld_size = 2\n\n[runtme]\ntransport = local\n"),
                       at(5) + "unknown section [runtme]; did you mean [runtime]?"));
}

TEST_F(ConfigErrors, UnknownPluginSectionSuggestsTheLoadedPlugin) {
  const std::string message = file_error("[optimizer.cfg_sdg]\nlr = 0.1\n");
  EXPECT_TRUE(contains(message, at(2) + "unknown section [optimizer.cfg_sdg]; did you mean "
                                        "[optimizer.cfg_sgd]?"));
  EXPECT_TRUE(contains(message, "no optimizer plugin named 'cfg_sdg' is loaded"));
}

TEST_F(ConfigErrors, AliasSectionPointsToThePluginsOwnSection) {
  EXPECT_TRUE(contains(file_error("[optimizer.cfgsgd]\nlr = 0.1\n"),
                       at(2) + "[optimizer.cfgsgd] names the alias 'cfgsgd'; options go under the "
                               "plugin's own name, [optimizer.cfg_sgd]"));
}

TEST_F(ConfigErrors, UnknownKeyNamesTheLineAndSuggests) {
  EXPECT_TRUE(contains(file_error("# header\n[runtime]\n\ntransprt = local  # typo\n"),
                       at(4) + "[runtime] has no option 'transprt'; did you mean 'transport'?"));
}

TEST_F(ConfigErrors, WrongTypeSaysWhatTheTypeAccepts) {
  EXPECT_TRUE(contains(file_error("[runtime]\nworld_size = many\n"),
                       at(2) + "[runtime] world_size: 'many' is not an int"));
  EXPECT_TRUE(contains(file_error("[optimizer.cfg_sgd]\nbucket = 1.5M\n"),
                       at(2) + "[optimizer.cfg_sgd] bucket: '1.5M' is not a size"));
  EXPECT_TRUE(contains(file_error("[runtime]\ntimeout = soon\n"),
                       at(2) + "[runtime] timeout: 'soon' is not a duration"));
}

TEST_F(ConfigErrors, ValueOutsideTheChoicesListsThem) {
  EXPECT_TRUE(contains(file_error("[optimizer.cfg_sgd]\nmode = slow\n"),
                       at(2) + "[optimizer.cfg_sgd] mode: 'slow' is not one of fast|exact"));
}

TEST_F(ConfigErrors, UnknownPluginNameSuggestsTheNearest) {
  EXPECT_TRUE(contains(file_error("[runtime]\nstore = cfg_stor\n"),
                       at(2) + "[runtime] store: no store plugin named 'cfg_stor'; did you mean "
                               "'cfg_store'?"));
}

TEST_F(ConfigErrors, WorldSizeBelowOneIsRefused) {
  EXPECT_TRUE(contains(file_error("[runtime]\nworld_size = -2\n"),
                       at(2) + "[runtime] world_size: must be at least 1"));
}

TEST_F(ConfigErrors, MalformedLinesKeyBeforeSectionAndRepeatsNameTheLine) {
  EXPECT_TRUE(contains(file_error("[runtime]\njust some words\n"),
                       at(2) + "expected '[section]' or 'key = value', got 'just some words'"));
  EXPECT_TRUE(contains(file_error("world_size = 2\n[runtime]\n"),
                       at(1) + "'world_size' comes before any [section] header"));
  EXPECT_TRUE(contains(file_error("[runtime]\nworld_size = 2\nworld_size = 3\n"),
                       at(3) + "[runtime] world_size is already set on line 2"));
}

TEST_F(ConfigErrors, MissingFileIsNamed) {
  EXPECT_TRUE(contains(load_error(sources(dir_.path() / "absent.ini")),
                       (dir_.path() / "absent.ini").string() + ": cannot open"));
}

TEST(ConfigEnvironmentErrors, UnknownVariableIsAnErrorWithTheNearestName) {
  EXPECT_TRUE(contains(load_error(sources({}, {{"TESSERA_RUNTIME_TRANSPROT", "local"}})),
                       "environment variable TESSERA_RUNTIME_TRANSPROT is not a tessera option; "
                       "did you mean TESSERA_RUNTIME_TRANSPORT?"));
}

TEST(ConfigEnvironmentErrors, BadValueNamesTheVariable) {
  EXPECT_TRUE(contains(load_error(sources({}, {{"TESSERA_OPTIMIZER_CFG_SGD_STEPS", "ten"}})),
                       "environment TESSERA_OPTIMIZER_CFG_SGD_STEPS: [optimizer.cfg_sgd] steps: "
                       "'ten' is not an int"));
}

TEST(ConfigFlagErrors, UnknownFlagSuggestsTheNearestKey) {
  EXPECT_TRUE(contains(load_error(sources({}, {}, {"--runtime.worldsize=2"})),
                       "flag --runtime.worldsize: [runtime] has no option 'worldsize'; did you "
                       "mean 'world_size'?"));
}

TEST(ConfigFlagErrors, AbbreviatedFlagIsNotGuessed) {
  EXPECT_TRUE(contains(load_error(sources({}, {}, {"--runtime.trans=local"})),
                       "flag --runtime.trans: [runtime] has no option 'trans'"));
}

TEST(ConfigFlagErrors, UnknownPluginNameInAFlagSuggests) {
  EXPECT_TRUE(contains(load_error(sources({}, {}, {"--runtime.store=cfgstore"})),
                       "flag --runtime.store: [runtime] store: no store plugin named 'cfgstore'; "
                       "did you mean 'cfg_store'?"));
}

TEST(ConfigFlagErrors, StrayWordsAndMissingValuesAreRefused) {
  EXPECT_TRUE(contains(load_error(sources({}, {}, {"runtime.world_size=2"})),
                       "argument 'runtime.world_size=2' is not a --section.key=value flag"));
  EXPECT_TRUE(contains(load_error(sources({}, {}, {"--runtime.world_size"})),
                       "flag --runtime.world_size has no value"));
}

}  // namespace
}  // namespace tessera
