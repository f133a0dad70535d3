// MXDP_FAULT(name) and MXDP_FAULT_FIRED() for the sources of the freshness
// chain (bucket_sync*.cpp, src/CMakeLists.txt's MXDP_FAULT_SOURCES). Fault
// switches exist only in the test library (faults.h); in the product build
// every MXDP_FAULT(...) is the constant false and no fault code remains.
#pragma once

#ifdef MXDP_FAULTS
#include "engine/faults.h"
#define MXDP_FAULT(name) (::mxdp::faults::active().name)
#define MXDP_FAULT_FIRED() (void)(++::mxdp::faults::fired())
#else
#define MXDP_FAULT(name) false
#define MXDP_FAULT_FIRED() (void)0
#endif
