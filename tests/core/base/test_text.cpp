#include <gtest/gtest.h>

#include "core/base/errors.h"
#include "core/base/text.h"

using namespace batchcheck;

TEST(Text, EditDistance) {
  EXPECT_EQ(edit_distance("batch_size", "batch_size"), 0u);
  EXPECT_EQ(edit_distance("batchsize", "batch_size"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(Text, DidYouMeanFindsTyposAndPrefixes) {
  std::vector<std::string> keys = {"batch_size", "drop_last", "shuffle"};
  EXPECT_EQ(did_you_mean("batchsize", keys), "; did you mean \"batch_size\"?");
  EXPECT_EQ(did_you_mean("batch", keys), "; did you mean \"batch_size\"?");
  EXPECT_EQ(did_you_mean("shufle", keys), "; did you mean \"shuffle\"?");
  EXPECT_EQ(did_you_mean("learning_rate", keys), "");
}

TEST(Text, ParseU64IsStrict) {
  EXPECT_EQ(parse_u64("0"), 0u);
  EXPECT_EQ(parse_u64("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(parse_u64("18446744073709551616"));
  EXPECT_FALSE(parse_u64("-1"));
  EXPECT_FALSE(parse_u64("+1"));
  EXPECT_FALSE(parse_u64("1e3"));
  EXPECT_FALSE(parse_u64(""));
  EXPECT_FALSE(parse_u64(" 1"));
}

TEST(Text, SingleLineFoldsWhitespace) { EXPECT_EQ(single_line("a\n  b\tc\n"), "a b c"); }

TEST(Errors, FormatLeavesOutEmptyParts) {
  EXPECT_EQ(format_error(InputError("cfg.json", "loader.batch_size", "bad")), "batchcheck: error: cfg.json: loader.batch_size: bad");
  EXPECT_EQ(format_error(InputError("", "--samples", "bad")), "batchcheck: error: --samples: bad");
  EXPECT_EQ(format_error(InputError("cfg.json", "", "is a directory")), "batchcheck: error: cfg.json: is a directory");
}
