# tests/extra.cmake: CTest tests that are not CUnit executables (included by tests/CMakeLists.txt).

# libember.so exports only the public ember_ API (hidden visibility + EMBER_API).
add_test(NAME exported_symbols
         COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DLIB=$<TARGET_FILE:ember>
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/check_exports.cmake)
set_tests_properties(exported_symbols PROPERTIES LABELS cpu TIMEOUT 60)

# Install to a temporary prefix, then build a program outside the tree against it with
# find_package(ember) and with pkg-config ember, and run it.
find_program(EMBER_PKG_CONFIG NAMES pkg-config pkgconf)
add_test(NAME install_consumer
         COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR}
                 -DSRC_DIR=${CMAKE_CURRENT_SOURCE_DIR}/install
                 -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install-test
                 -DLIBDIR=${CMAKE_INSTALL_LIBDIR} -DCC=${CMAKE_C_COMPILER}
                 -DPKG_CONFIG=${EMBER_PKG_CONFIG} -DSANITIZE=${EMBER_SANITIZE}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/install_test.cmake)
set_tests_properties(install_consumer PROPERTIES LABELS cpu TIMEOUT 300)

# (examples/CMakeLists.txt registers example_quickstart: the README example builds and runs.)

# README.md shows examples/quickstart.c verbatim (so its example compiles).
add_test(NAME readme_example
         COMMAND ${CMAKE_COMMAND} -DREADME=${PROJECT_SOURCE_DIR}/README.md
                 -DEXAMPLE=${PROJECT_SOURCE_DIR}/examples/quickstart.c
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/check_readme.cmake)
set_tests_properties(readme_example PROPERTIES LABELS cpu TIMEOUT 60)
