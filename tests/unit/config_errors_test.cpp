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

TEST_F(ConfigErrors, UnknownSectionNamesTheLineOfItsHeaderAndSuggests) {
  EXPECT_TRUE(contains(file_error("[runtime]\nworld_size = 2\n\n[runtme]\ntransport = local\n"),
                       at(4) + "unknown section [runtme]; did you mean [runtime]?"));
}

TEST_F(ConfigErrors, UnknownSectionWithoutKeysIsStillAnError) {
  EXPECT_TRUE(contains(file_error("[runtime]\nworld_size = 2\n[runtme]\n"),
                       at(3) + "unknown section [runtme]"));
}

TEST_F(ConfigErrors, CrOnlyAndCrLfLineEndingsEndLines) {
  for (const char* eol : {"\r", "\r\n"}) {
    SCOPED_TRACE(eol == std::string("\r") ? "CR" : "CRLF");
    file_ = dir_.write("run.ini", std::string("[runtime]") + eol + "# comment" + eol +
                                      "world_size = 3" + eol + "timeout = 2s" + eol);
    PluginRegistry registry;
    registry.scan({kPluginDir});
    const Config config = Config::load(sources(file_), registry);
    EXPECT_EQ(config.section("runtime").get_int("world_size"), 3);
    EXPECT_EQ(config.origin("runtime", "world_size").text, file_.string() + ":3");
    EXPECT_EQ(config.origin("runtime", "timeout").text, file_.string() + ":4");
  }
  EXPECT_TRUE(contains(file_error("[runtime]\rworld_size = 3\rworld_size = 4\r"),
                       at(3) + "[runtime] world_size is already set on line 2"));
}

TEST_F(ConfigErrors, IntegersOutsideTheirRangeAreRefusedNotWrapped) {
  for (const char* value : {"0", "-1", "2147483648", "4294967296", "4294967299"}) {
    EXPECT_TRUE(contains(
        file_error(std::string("[runtime]\nworld_size = ") + value + "\n"),
        at(2) + "[runtime] world_size: '" + value + "' is out of range: must be in [1, 65536]"));
  }
  EXPECT_TRUE(contains(file_error("[runtime]\nworld_size = 18446744073709551615\n"),
                       at(2) + "[runtime] world_size: '18446744073709551615' is not an int"));
}

TEST_F(ConfigErrors, APluginsDeclaredRangeIsEnforcedForEveryType) {
  EXPECT_TRUE(contains(file_error("[optimizer.cfg_sgd]\nsteps = 0\n"),
                       at(2) + "[optimizer.cfg_sgd] steps: '0' is out of range: must be in [1, "
                               "1000]"));
  EXPECT_TRUE(contains(file_error("[optimizer.cfg_sgd]\nlr = 10.5\n"),
                       at(2) + "[optimizer.cfg_sgd] lr: '10.5' is out of range"));
  EXPECT_TRUE(contains(file_error("[optimizer.cfg_sgd]\nbucket = 512\n"),
                       at(2) + "[optimizer.cfg_sgd] bucket: '512' is out of range: must be in "
                               "[1KiB, 1GiB]"));
  EXPECT_TRUE(contains(file_error("[optimizer.cfg_sgd]\nwarmup = 2h\n"),
                       at(2) + "[optimizer.cfg_sgd] warmup: '2h' is out of range"));
}

TEST_F(ConfigErrors, UnknownPluginSectionSuggestsTheLoadedPlugin) {
  const std::string message = file_error("[optimizer.cfg_sdg]\nlr = 0.1\n");
  EXPECT_TRUE(contains(message, at(1) + "unknown section [optimizer.cfg_sdg]; did you mean "
                                        "[optimizer.cfg_sgd]?"));
  EXPECT_TRUE(contains(message, "no optimizer plugin named 'cfg_sdg' is loaded"));
}

TEST_F(ConfigErrors, AliasSectionPointsToThePluginsOwnSection) {
  EXPECT_TRUE(contains(file_error("[optimizer.cfgsgd]\nlr = 0.1\n"),
                       at(1) + "[optimizer.cfgsgd] names the alias 'cfgsgd'; options go under the "
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
  EXPECT_TRUE(
      contains(file_error("[runtime]\nworld_size = -2\n"),
               at(2) + "[runtime] world_size: '-2' is out of range: must be in [1, 65536]"));
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

TEST(ConfigFlags, AnEmptyValueClearsAStringOption) {
  PluginRegistry registry;
  registry.scan({kPluginDir});
  const Config config = Config::load(
      sources({}, {}, {"--train.checkpoint_dir=", "--train.metrics_file", ""}), registry);
  EXPECT_EQ(config.section("train").get_string("checkpoint_dir"), "");
  EXPECT_EQ(config.origin("train", "checkpoint_dir").text, "flag --train.checkpoint_dir");
  EXPECT_EQ(config.origin("train", "metrics_file").text, "flag --train.metrics_file");
  EXPECT_TRUE(contains(load_error(sources({}, {}, {"--runtime.world_size="})),
                       "flag --runtime.world_size: [runtime] world_size: '' is not an int"));
}

TEST_F(ConfigErrors, RelativePathsInAFileAreRelativeToTheFileAndInFlagsToTheWorkingDirectory) {
  file_ = dir_.write("run.ini", "[train]\ncheckpoint_dir = ckpt\nmetrics_file = /abs/m.jsonl\n");
  PluginRegistry registry;
  registry.scan({kPluginDir});
  const Config from_file = Config::load(sources(file_), registry);
  EXPECT_EQ(from_file.section("train").get_string("checkpoint_dir"),
            (dir_.path() / "ckpt").string());
  EXPECT_EQ(from_file.section("train").get_string("metrics_file"), "/abs/m.jsonl");
  const Config from_flag = Config::load(
      sources(file_, {{"TESSERA_TRAIN_METRICS_FILE", "m.jsonl"}}, {"--train.checkpoint_dir=ckpt"}),
      registry);
  EXPECT_EQ(from_flag.section("train").get_string("checkpoint_dir"), "ckpt");
  EXPECT_EQ(from_flag.section("train").get_string("metrics_file"), "m.jsonl");
}

TEST(ConfigFlagErrors, StrayWordsAndMissingValuesAreRefused) {
  EXPECT_TRUE(contains(load_error(sources({}, {}, {"runtime.world_size=2"})),
                       "argument 'runtime.world_size=2' is not a --section.key=value flag"));
  EXPECT_TRUE(contains(load_error(sources({}, {}, {"--runtime.world_size"})),
                       "flag --runtime.world_size has no value"));
}

}  // namespace
}  // namespace tessera
