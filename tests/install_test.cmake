# tests/install_test.cmake: install ember into a fresh prefix, then build and run the program in
# tests/install/ against it twice: with CMake's find_package(ember) and with `pkg-config ember`.
# Run by CTest (tests/extra.cmake) as cmake -D... -P install_test.cmake.
# Inputs: BUILD_DIR, SRC_DIR (tests/install), WORK_DIR, LIBDIR, CC, PKG_CONFIG, SANITIZE.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  set(last_out "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/ember/ember.h include/ember/version.h ${LIBDIR}/pkgconfig/ember.pc
          ${LIBDIR}/cmake/ember/emberConfig.cmake ${LIBDIR}/cmake/ember/emberTargets.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

set(san_flags "")
if(SANITIZE)
  set(san_flags "-fsanitize=${SANITIZE}")
endif()
set(ENV{LD_LIBRARY_PATH} "${prefix}/${LIBDIR}:$ENV{LD_LIBRARY_PATH}")

# 1. find_package(ember)
run(${CMAKE_COMMAND} -S ${SRC_DIR} -B ${WORK_DIR}/cmake-build -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_C_COMPILER=${CC} "-DCMAKE_C_FLAGS=${san_flags}" "-DCMAKE_EXE_LINKER_FLAGS=${san_flags}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake-build)
run(${WORK_DIR}/cmake-build/consumer)
message(STATUS "find_package(ember): ${last_out}")

# 2. pkg-config ember
set(ENV{PKG_CONFIG_PATH} "${prefix}/${LIBDIR}/pkgconfig")
run(${PKG_CONFIG} --cflags --libs ember)
string(STRIP "${last_out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
separate_arguments(san UNIX_COMMAND "${san_flags}")
run(${CC} -std=c11 ${san} ${SRC_DIR}/consumer.c ${flags} -o ${WORK_DIR}/consumer_pc)
run(${WORK_DIR}/consumer_pc)
message(STATUS "pkg-config ember: ${last_out}")
