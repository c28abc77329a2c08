# tests/check_readme.cmake: the C example in README.md is examples/quickstart.c (from its first
# #include on), so the README's code is code that compiles and runs (example_quickstart).
# Run as: cmake -DREADME=<README.md> -DEXAMPLE=<quickstart.c> -P check_readme.cmake
file(READ ${README} readme)
file(READ ${EXAMPLE} example)
string(FIND "${readme}" "```c\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "README.md has no ```c block")
endif()
math(EXPR start "${start} + 5")
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "```" stop)
string(SUBSTRING "${rest}" 0 ${stop} block)
string(FIND "${example}" "#include" inc)
string(SUBSTRING "${example}" ${inc} -1 code)
if(NOT block STREQUAL code)
  message(FATAL_ERROR "README.md's C example differs from ${EXAMPLE}: copy the file into it")
endif()
message(STATUS "README example = examples/quickstart.c")
