# tests/reliability.cmake: the parts of the reliability work that are not plain CUnit suites,
# included by the top CMakeLists.txt inside its EMBER_BUILD_TESTS block, after add_subdirectory(tests):
#   include(${PROJECT_SOURCE_DIR}/tests/reliability.cmake OPTIONAL)
# - fuzz/: the fuzz harnesses, each run for a few seconds on its seed corpus (fuzz/CMakeLists.txt);
# - test_opencl_faults (tests/test_opencl_faults.c, built by tests/CMakeLists.txt like every
#   test_*.c): linked here with -Wl,--wrap for every OpenCL call it fails, and told so with
#   EMBER_CL_WRAP (without this file it builds as a stub that skips with 77).
add_subdirectory(${PROJECT_SOURCE_DIR}/fuzz ${PROJECT_BINARY_DIR}/fuzz)

if(EMBER_WITH_OPENCL AND TARGET test_opencl_faults)
  set(EMBER_CL_WRAPPED clCreateBuffer clReleaseMemObject clEnqueueWriteBuffer clEnqueueReadBuffer
      clEnqueueCopyBuffer clEnqueueFillBuffer clEnqueueNDRangeKernel clFinish clBuildProgram
      clCreateProgramWithSource clCreateProgramWithBinary clReleaseProgram clCreateKernel
      clReleaseKernel clSetKernelArg clCreateContext clCreateCommandQueueWithProperties)
  set(wrap_opts "")
  foreach(fn IN LISTS EMBER_CL_WRAPPED)
    list(APPEND wrap_opts "LINKER:--wrap=${fn}")
  endforeach()
  target_compile_definitions(test_opencl_faults PRIVATE EMBER_CL_WRAP)
  target_link_options(test_opencl_faults PRIVATE ${wrap_opts})
endif()
