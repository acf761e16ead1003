// The value syntax of every option type, and the typed getters of Options.
#include <gtest/gtest.h>

#include "tessera/base/error.hpp"
#include "tessera/plugin/options.hpp"

namespace tessera {
namespace {

using namespace std::chrono_literals;

TEST(OptionParsing, BoolAcceptsEveryDocumentedSpelling) {
  for (const char* yes : {"true", "yes", "on", "1", "TRUE", "Yes"}) EXPECT_TRUE(parse_bool(yes));
  for (const char* no : {"false", "no", "off", "0", "Off"}) EXPECT_FALSE(parse_bool(no));
  EXPECT_THROW((void)parse_bool("maybe"), ConfigError);
  EXPECT_THROW((void)parse_bool(""), ConfigError);
}

TEST(OptionParsing, SizeUnitsArePowersOf1024) {
  EXPECT_EQ(parse_size("10"), 10U);
  EXPECT_EQ(parse_size("3B"), 3U);
  EXPECT_EQ(parse_size("1K"), 1024U);
  EXPECT_EQ(parse_size("64MiB"), 64U << 20);
  EXPECT_EQ(parse_size("2g"), 2ULL << 30);
  EXPECT_EQ(parse_size("1TiB"), 1ULL << 40);
}

TEST(OptionParsing, SizeRefusesFractionsNegativesUnknownUnitsAndOverflow) {
  for (const char* bad : {"1.5M", "-1", "12X", "", "MiB", "99999999999T", "1 K"}) {
    EXPECT_THROW((void)parse_size(bad), ConfigError) << bad;
  }
}

TEST(OptionParsing, DurationBareNumbersAreSeconds) {
  EXPECT_EQ(parse_duration("7"), 7s);
  EXPECT_EQ(parse_duration("300s"), 300s);
  EXPECT_EQ(parse_duration("250ms"), 250ms);
  EXPECT_EQ(parse_duration("1.5m"), 90s);
  EXPECT_EQ(parse_duration("2h"), 7200s);
  EXPECT_EQ(parse_duration("0.25s"), 250ms);
}

TEST(OptionParsing, DurationRefusesSubMillisecondNegativeAndUnknownUnits) {
  for (const char* bad : {"0.4ms", "-1s", "5 s", "3d", "", "s"}) {
    EXPECT_THROW((void)parse_duration(bad), ConfigError) << bad;
  }
}

TEST(OptionValidation, MessagesQuoteTheValueAndTheExpectedSyntax) {
  const OptionSpec count{"count", OptionType::integer, "1", "", {}};
  EXPECT_EQ(validate_option_value(count, "12"), std::nullopt);
  EXPECT_EQ(validate_option_value(count, "-3"), std::nullopt);
  EXPECT_EQ(validate_option_value(count, "12x"),
            "'12x' is not an int (a whole number such as 42 or -1)");
  const OptionSpec rate{"rate", OptionType::floating, "1", "", {}};
  EXPECT_EQ(validate_option_value(rate, "1e-3"), std::nullopt);
  EXPECT_NE(validate_option_value(rate, "nan"), std::nullopt);
  EXPECT_NE(validate_option_value(rate, "inf"), std::nullopt);
  const OptionSpec mode{"mode", OptionType::string, "a", "", {"a", "b"}};
  EXPECT_EQ(validate_option_value(mode, "c"), "'c' is not one of a|b");
}

TEST(OptionTypes, NamesRoundTrip) {
  for (auto type : {OptionType::boolean, OptionType::integer, OptionType::floating,
                    OptionType::string, OptionType::size, OptionType::duration}) {
    EXPECT_EQ(parse_option_type(option_type_name(type)), type);
  }
  EXPECT_EQ(parse_option_type("double"), std::nullopt);
}

class OptionsGetters : public ::testing::Test {
 protected:
  const std::vector<OptionSpec> specs_{
      {"on", OptionType::boolean, "off", "", {}},
      {"n", OptionType::integer, "-4", "", {}},
      {"x", OptionType::floating, "0.5", "", {}},
      {"s", OptionType::string, "hi", "", {}},
      {"b", OptionType::size, "2K", "", {}},
      {"t", OptionType::duration, "20ms", "", {}},
      {"need", OptionType::string, std::nullopt, "", {}},
  };
};

TEST_F(OptionsGetters, DefaultsAreFilledAndTyped) {
  const Options options("demo", specs_, {{"n", "7"}});
  EXPECT_FALSE(options.get_bool("on"));
  EXPECT_EQ(options.get_int("n"), 7);
  EXPECT_DOUBLE_EQ(options.get_float("x"), 0.5);
  EXPECT_EQ(options.get_string("s"), "hi");
  EXPECT_EQ(options.get_size("b"), 2048U);
  EXPECT_EQ(options.get_duration("t"), 20ms);
}

TEST_F(OptionsGetters, WrongTypeUnknownKeyAndMissingRequiredValueAreConfigErrors) {
  const Options options("demo", specs_, {});
  try {
    (void)options.get_int("s");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "[demo] s is a string option, read as a int");
  }
  EXPECT_THROW((void)options.get_string("nope"), ConfigError);
  try {
    (void)options.get_string("need");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "[demo] need is required and was not set");
  }
}

TEST_F(OptionsGetters, ConstructionRefusesInvalidAndUnknownValues) {
  EXPECT_THROW(Options("demo", specs_, {{"n", "seven"}}), ConfigError);
  EXPECT_THROW(Options("demo", specs_, {{"zzz", "1"}}), ConfigError);
}

}  // namespace
}  // namespace tessera
