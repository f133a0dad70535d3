#include <gtest/gtest.h>

#include "util/check.h"

TEST(Check, CarriesFileAndLine) {
  try {
    MXDP_CHECK(1 + 1 == 3, "arithmetic, got ", 2);
    FAIL() << "no throw";
  } catch (const mxdp::Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("test_check.cpp:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("arithmetic, got 2"), std::string::npos) << msg;
  }
}
