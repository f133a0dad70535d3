// Environment switches: mxdp's MXDP_* variables that turn something on or off
// or pick one of a few values. An unset or empty variable gives the default; a
// value outside the ones listed is an error that names the variable and what
// it takes (a typo never silently means the default).
#pragma once

#include <initializer_list>
#include <string>

namespace mxdp {

// On/off: unset or empty gives `unset`, "1" true, "0" false.
bool env_flag(const char* name, bool unset);
// One of `choices`: unset or empty gives `unset`, a listed value itself.
std::string env_choice(const char* name, std::initializer_list<const char*> choices, const char* unset);

}  // namespace mxdp
