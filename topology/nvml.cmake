# NVML and NCCL through dlopen (nvml.h): library trainlet_nvml. Included from
# topology/CMakeLists.txt.
add_library(trainlet_nvml STATIC nvml.cc)
target_link_libraries(trainlet_nvml
  PUBLIC trainlet_proto trainlet_common
  PRIVATE absl::strings absl::str_format absl::synchronization ${CMAKE_DL_LIBS})

if(TRAINLET_BUILD_TESTS)
  # The fake libnvidia-ml.so.1 (testing/fake_nvml.cc), test-only and never
  # installed: each flavour is a file named exactly libnvidia-ml.so.1 in a
  # folder of its own under the build tree.
  function(trainlet_fake_nvml target folder)
    add_library(${target} SHARED testing/fake_nvml.cc)
    # A shared library takes protobuf shared (TRAINLET_STATIC swaps
    # protobuf::libprotobuf for its non-PIC archive).
    target_link_libraries(${target} PRIVATE
      $<IF:$<TARGET_EXISTS:trainlet_protobuf_shared>,trainlet_protobuf_shared,protobuf::libprotobuf>)
    target_compile_definitions(${target} PRIVATE ${ARGN})
    set_target_properties(${target} PROPERTIES
      PREFIX "lib" OUTPUT_NAME "nvidia-ml" SUFFIX ".so.1" NO_SONAME ON
      CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/${folder})
  endfunction()
  trainlet_fake_nvml(trainlet_fake_nvml fake_nvml)
  trainlet_fake_nvml(trainlet_fake_nvml_legacy fake_nvml_legacy FAKE_NVML_LEGACY)
  trainlet_fake_nvml(trainlet_fake_nvml_overflow fake_nvml_overflow FAKE_NVML_OVERFLOW_PCI_INFO)

  trainlet_test(nvml_test SRCS nvml_test.cc LIBS trainlet_nvml)
  add_dependencies(nvml_test trainlet_fake_nvml trainlet_fake_nvml_legacy
    trainlet_fake_nvml_overflow)
  target_compile_definitions(nvml_test PRIVATE
    FAKE_NVML_PATH="$<TARGET_FILE:trainlet_fake_nvml>"
    FAKE_NVML_LEGACY_PATH="$<TARGET_FILE:trainlet_fake_nvml_legacy>"
    FAKE_NVML_OVERFLOW_PATH="$<TARGET_FILE:trainlet_fake_nvml_overflow>"
    TOPOLOGY_TESTDATA="${CMAKE_CURRENT_SOURCE_DIR}/testdata")
endif()
