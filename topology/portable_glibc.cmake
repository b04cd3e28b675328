# trainlet_portable_glibc(TARGET [EXECUTABLE]): TARGET, built here against
# Debian 12's glibc 2.36, runs against any glibc from 2.17 on (Debian 11's
# 2.31 included), for the NVML reader and the fake libnvidia-ml.so.1 the
# roots tests load. portable_glibc.cc says how; check_glibc_versions.py
# (ctest nvml_reader_glibc_versions) proves it on the result.
#
#  - libstdc++ and libgcc linked in: an image's libstdc++ may be older than
#    the one built against (Debian 11's lacks GLIBCXX_3.4.29), or absent;
#  - --gc-sections over per-function sections: only what is called is kept
#    (--exclude-libs: the archives' symbols are not exported, so that a
#    shared library keeps only what it calls too);
#  - --wrap for each glibc symbol whose default version is newer than 2.17
#    (portable_glibc.cc pins each to its oldest version);
#  - libdl.so.2 and libpthread.so.0 needed ahead of libc.so.6, where those
#    old versions live in glibc before 2.34.
# EXECUTABLE also pins __libc_start_main (portable_glibc_start.cc).
function(trainlet_portable_glibc target)
  cmake_parse_arguments(P "EXECUTABLE" "" "" ${ARGN})
  set(_dir ${CMAKE_CURRENT_FUNCTION_LIST_DIR})
  target_sources(${target} PRIVATE ${_dir}/portable_glibc.cc)
  set(_wrapped dlopen dlsym dlerror pthread_once __pthread_key_create pthread_key_create
      pthread_getspecific pthread_setspecific __libc_single_threaded _dl_find_object)
  if(P_EXECUTABLE)
    target_sources(${target} PRIVATE ${_dir}/portable_glibc_start.cc)
    list(APPEND _wrapped __libc_start_main)
  endif()
  foreach(_symbol IN LISTS _wrapped)
    target_link_options(${target} PRIVATE "LINKER:--wrap=${_symbol}")
  endforeach()
  target_compile_options(${target} PRIVATE -ffunction-sections -fdata-sections)
  target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc "LINKER:--gc-sections"
    "LINKER:--exclude-libs,ALL"
    "LINKER:--push-state,--no-as-needed" "-l:libdl.so.2" "-l:libpthread.so.0"
    "LINKER:--pop-state")
endfunction()
