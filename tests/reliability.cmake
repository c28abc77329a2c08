# tests/reliability.cmake: the reliability tests that are not plain CUnit executables, included by
# the top CMakeLists.txt inside its EMBER_BUILD_TESTS block:
#   include(${PROJECT_SOURCE_DIR}/tests/reliability.cmake OPTIONAL)
# - fuzz/: the fuzz harnesses, each run for a few seconds on its seed corpus (fuzz/CMakeLists.txt);
# - test_cl_faults: OpenCL fault injection (tests/cl_faults.c), linked with -Wl,--wrap for every
#   OpenCL call ember makes (needs GNU ld / lld and the static library).
add_subdirectory(${PROJECT_SOURCE_DIR}/fuzz ${PROJECT_BINARY_DIR}/fuzz)

if(EMBER_WITH_OPENCL AND EXISTS ${PROJECT_SOURCE_DIR}/tests/cl_faults.c)
  set(EMBER_CL_WRAPPED clCreateBuffer clEnqueueWriteBuffer clEnqueueReadBuffer
      clEnqueueCopyBuffer clEnqueueFillBuffer clEnqueueNDRangeKernel clFinish clBuildProgram
      clCreateProgramWithSource clCreateProgramWithBinary clCreateKernel clSetKernelArg
      clCreateContext clCreateCommandQueueWithProperties clCreateCommandQueue)
  set(wrap_opts "")
  foreach(fn IN LISTS EMBER_CL_WRAPPED)
    list(APPEND wrap_opts "LINKER:--wrap=${fn}")
  endforeach()
  add_executable(test_cl_faults ${PROJECT_SOURCE_DIR}/tests/cl_faults.c)
  target_link_libraries(test_cl_faults PRIVATE ember_test_util)
  target_compile_options(test_cl_faults PRIVATE ${EMBER_WARNINGS})
  target_link_options(test_cl_faults PRIVATE ${wrap_opts})
  add_test(NAME test_cl_faults COMMAND test_cl_faults)
  set_tests_properties(test_cl_faults PROPERTIES LABELS opencl SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()
