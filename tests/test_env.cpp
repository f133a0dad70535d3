#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "util/check.h"
#include "util/env.h"

namespace mxdp {
namespace {

// The environment switches (util/env.h): unset or empty gives the
// default, a listed value itself, anything else an error naming the variable
// and what it takes.
TEST(EnvOptions, FlagsAndChoicesTakeOnlyTheirValues) {
  const char* name = "MXDP_TEST_ENV_SWITCH";
  ::unsetenv(name);
  EXPECT_TRUE(env_flag(name, true));
  EXPECT_EQ(env_choice(name, {"cublaslt", "own"}, "cublaslt"), "cublaslt");
  ::setenv(name, "", 1);
  EXPECT_FALSE(env_flag(name, false));
  EXPECT_EQ(env_choice(name, {"cublaslt", "own"}, "cublaslt"), "cublaslt");
  ::setenv(name, "own", 1);
  EXPECT_EQ(env_choice(name, {"cublaslt", "own"}, "cublaslt"), "own");
  ::setenv(name, "0", 1);
  EXPECT_FALSE(env_flag(name, true));
  ::setenv(name, "1", 1);
  EXPECT_TRUE(env_flag(name, false));
  ::setenv(name, "Own", 1);
  try {
    env_choice(name, {"cublaslt", "own"}, "cublaslt");
    ADD_FAILURE() << "a value outside the choices was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MXDP_TEST_ENV_SWITCH must be one of 'cublaslt', 'own', got 'Own'"),
              std::string::npos)
        << e.what();
  }
  ::setenv(name, "yes", 1);
  EXPECT_THROW(env_flag(name, false), Error);
  ::unsetenv(name);
}

}  // namespace
}  // namespace mxdp
