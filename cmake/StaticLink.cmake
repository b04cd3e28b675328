# TRAINLET_STATIC: the release binary `trainlet` linked fully static from
# Debian 12's archives (glibc, libstdc++, gRPC with TLS, protobuf, abseil,
# OpenSSL, c-ares, re2, zlib, libssh, SQLite), so it runs in any training image.
#
# How: every imported library target the tree uses is pointed at the `.a`
# beside its `.so` (an archive that is missing is a configure error that
# names the package), and the one executable is linked with -static.
# IMPORTED_NO_SONAME must not be set: CMake would then wrap the archive in
# -Wl,-Bdynamic. Other executables (tests, benchmarks) link the same archives
# but glibc dynamically. Sanitizer builds must turn the option off.
#
# trainlet_static_link(target): the executable fully static.
# trainlet_protobuf_shared: libprotobuf.so, for the tree's own shared
# libraries (they cannot link the non-PIC archive).

# The imported targets find_package created, with their `.so` swapped for
# the `.a` in the same folder.
function(trainlet_use_static_archives)
  get_directory_property(_targets DIRECTORY ${CMAKE_SOURCE_DIR} IMPORTED_TARGETS)
  set(_swapped 0)
  foreach(_t IN LISTS _targets)
    get_target_property(_type ${_t} TYPE)
    if(NOT _type STREQUAL "SHARED_LIBRARY" AND NOT _type STREQUAL "UNKNOWN_LIBRARY")
      continue()
    endif()
    foreach(_prop IMPORTED_LOCATION IMPORTED_LOCATION_NONE IMPORTED_LOCATION_RELEASE
                  IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_DEBUG)
      get_target_property(_loc ${_t} ${_prop})
      if(NOT _loc OR NOT _loc MATCHES "\\.so(\\.[0-9.]+)?$")
        continue()
      endif()
      get_filename_component(_dir "${_loc}" DIRECTORY)
      get_filename_component(_name "${_loc}" NAME)
      string(REGEX REPLACE "\\.so(\\.[0-9.]+)?$" ".a" _archive "${_name}")
      if(NOT EXISTS "${_dir}/${_archive}")
        message(FATAL_ERROR "TRAINLET_STATIC: ${_t} has no static archive ${_dir}/${_archive}; "
                            "install the -dev package that ships it, or configure with "
                            "-DTRAINLET_STATIC=OFF")
      endif()
      # Shared libraries of the tree (the fake libnvidia-ml.so.1) cannot
      # take a non-PIC archive: protobuf stays available shared to them.
      if(_t STREQUAL "protobuf::libprotobuf" AND NOT TARGET trainlet_protobuf_shared)
        add_library(trainlet_protobuf_shared SHARED IMPORTED GLOBAL)
        set_target_properties(trainlet_protobuf_shared PROPERTIES IMPORTED_LOCATION "${_loc}")
        get_target_property(_inc ${_t} INTERFACE_INCLUDE_DIRECTORIES)
        if(_inc)
          set_target_properties(trainlet_protobuf_shared PROPERTIES
                                INTERFACE_INCLUDE_DIRECTORIES "${_inc}")
        endif()
      endif()
      set_target_properties(${_t} PROPERTIES ${_prop} "${_dir}/${_archive}")
      math(EXPR _swapped "${_swapped} + 1")
    endforeach()
  endforeach()
  # A shared library brought its own dependencies; its archive needs them on
  # the link line. libssh's: OpenSSL's libcrypto, zlib, and GSSAPI, which
  # Debian ships only shared (cmake/no_gssapi.c stands in for it).
  if(TARGET ssh)
    add_library(trainlet_no_gssapi STATIC ${CMAKE_SOURCE_DIR}/cmake/no_gssapi.c)
    set_property(TARGET ssh APPEND PROPERTY INTERFACE_LINK_LIBRARIES
                 trainlet_no_gssapi OpenSSL::Crypto ZLIB::ZLIB)
  endif()
  # libsqlite3.a (the controller's history) calls libm and libdl.
  if(TARGET SQLite::SQLite3)
    set_property(TARGET SQLite::SQLite3 APPEND PROPERTY INTERFACE_LINK_LIBRARIES
                 m ${CMAKE_DL_LIBS} Threads::Threads)
  endif()
  message(STATUS "TRAINLET_STATIC: ${_swapped} imported libraries linked from their .a archives")
endfunction()

# The executable fully static: -static, and archives searched from the first
# library to the last (LINK_SEARCH_*_STATIC keeps CMake from switching back to
# -Bdynamic for the plain names gRPC lists: dl, m, rt, re2). --gc-sections
# drops the sections nothing references (3% of the text): the code that runs
# sits closer together, so the 64 KiB windows the kernel maps around each
# touched page hold less dead code (about 0.4 MB less resident in an agent).
function(trainlet_static_link target)
  target_link_options(${target} PRIVATE -static -Wl,--gc-sections)
  set_target_properties(${target} PROPERTIES LINK_SEARCH_START_STATIC ON
                                             LINK_SEARCH_END_STATIC ON)
endfunction()
