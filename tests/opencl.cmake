# tests/opencl.cmake: CTest properties of the OpenCL suites (every tests/test_opencl*.c), to be
# included from tests/CMakeLists.txt after the tests are defined:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/opencl.cmake OPTIONAL)
# - LSan suppressions for memory the OpenCL runtime itself leaks (tests/lsan.supp explains each);
#   harmless without a sanitizer.
# - EMBER_OPENCL_CACHE_DIR: ember's on-disk program cache in the build tree, so that the second
#   run (the ASan one, or a rerun) skips PoCL's slow compiles.
file(GLOB EMBER_OPENCL_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/test_opencl*.c)
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/ember-cl-cache)
foreach(src IN LISTS EMBER_OPENCL_TESTS)
  get_filename_component(name ${src} NAME_WE)
  if(TEST ${name})
    set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT
      "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan.supp:print_suppressions=0"
      "EMBER_OPENCL_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/ember-cl-cache")
  endif()
endforeach()
