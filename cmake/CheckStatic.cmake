# ctest static_binary (TRAINLET_STATIC): fails when BINARY has a program
# interpreter or needs any shared library, i.e. when the release binary came
# out dynamic. Run as: cmake -DBINARY=path -P CheckStatic.cmake
if(NOT EXISTS "${BINARY}")
  message(FATAL_ERROR "static_binary: ${BINARY} does not exist; build the trainlet target")
endif()
execute_process(COMMAND readelf --program-headers --dynamic "${BINARY}"
                OUTPUT_VARIABLE _elf RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "static_binary: readelf failed on ${BINARY} (binutils installed?)")
endif()
if(_elf MATCHES "INTERP" OR _elf MATCHES "\\(NEEDED\\)")
  string(REGEX MATCHALL "Shared library: \\[[^]]*\\]" _needed "${_elf}")
  message(FATAL_ERROR "static_binary: ${BINARY} is dynamic (a program interpreter; needs: "
                      "${_needed}); TRAINLET_STATIC=ON must link it fully static "
                      "(cmake/StaticLink.cmake)")
endif()
execute_process(COMMAND "${BINARY}" version OUTPUT_VARIABLE _version RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT _version MATCHES "linkage: static")
  message(FATAL_ERROR "static_binary: '${BINARY} version' exited ${_rc} and printed:\n"
                      "${_version}\n(expected a line 'linkage: static')")
endif()
message(STATUS "static_binary: ${BINARY} is fully static")
