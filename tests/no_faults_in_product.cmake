# ctest product_has_no_fault_switches (tests/CMakeLists.txt): cmake -P script.
# Fails when the product library or the mxdp binary defines or uses anything of
# mxdp::faults (src/engine/faults.h), or when the test library does not (then this
# check would prove nothing).
function(fault_symbols file out)
  execute_process(COMMAND ${NM} -C ${file} OUTPUT_VARIABLE syms ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} -C ${file} failed (${rc}): ${err}")
  endif()
  string(REGEX MATCHALL "[^\n]*mxdp::faults::[^\n]*" hits "${syms}")
  set(${out} "${hits}" PARENT_SCOPE)
endfunction()

foreach(f ${PRODUCT} ${BINARY})
  fault_symbols(${f} hits)
  if(hits)
    message(FATAL_ERROR "${f} holds fault-switch code (it must be built without MXDP_FAULTS):\n${hits}")
  endif()
endforeach()
fault_symbols(${TESTING} hits)
if(NOT hits)
  message(FATAL_ERROR "${TESTING} holds no mxdp::faults symbol: the test library lost its fault switches, "
                      "or this check no longer sees them")
endif()
message(STATUS "no fault code in ${PRODUCT} and ${BINARY}; ${TESTING} has it")
