#include <gtest/gtest.h>

#include "util/check.h"

// The user reads the sentence alone; where it came from travels beside it
// (printed with --verbose), with the condition of a failed check.
TEST(Check, SentenceAloneLocationBeside) {
  try {
    MXDP_CHECK(1 + 1 == 3, "arithmetic, got ", 2);
    FAIL() << "no throw";
  } catch (const mxdp::Error& e) {
    EXPECT_STREQ(e.what(), "arithmetic, got 2");
    const int line = __LINE__ - 4;
    EXPECT_EQ(e.where(), "test_check.cpp:" + std::to_string(line) + " (check failed: 1 + 1 == 3)");
    EXPECT_FALSE(e.every_rank());
  }
  try {
    MXDP_FAIL("unknown format '", "x", "'");
  } catch (const mxdp::Error& e) {
    EXPECT_STREQ(e.what(), "unknown format 'x'");
    EXPECT_EQ(e.where(), "test_check.cpp:" + std::to_string(__LINE__ - 3));
  }
  try {  // a check without a message still says something
    MXDP_CHECK(2 < 1);
  } catch (const mxdp::Error& e) {
    EXPECT_STREQ(e.what(), "internal check failed: 2 < 1");
  }
}
