# Test registration by folder, so a new test file needs no CMake edit.
#   tests/unit/test_<module>.c   cmocka, label unit
#   tests/cli/test_*.sh          label cli    (env PTC = the ptc binary)
#   tests/fuse/test_*.sh         label fuse   (mounts for real)
#   tests/mpi/test_*.sh          label mpi    (mpirun for real)
#   tests/net/test_*.sh          label net    (mpirun across network namespaces, root)
#   tests/gpu/test_*.sh          label gpu    (only where a GPU exists)
#   tests/fuzz/fuzz_<parser>.c   libFuzzer target + corpus replay, label unit
#   A line "# labels: slow" at the top of a script adds labels ("jobs": the
#   script runs processes side by side and takes the multi-process lock, as
#   mpi, fuse and net scripts do). Exit status 77:
#   skipped (reported as such by ctest, never as a pass).
# Tiers: `make test` runs everything but the labels gpu and slow; the slow
# label holds the full configuration matrices (tests/*/test_*_all.sh run
# their script with PTC_TEST_FULL=1, which tests/pairwise.py and the scripts
# read; unit tests that read PTC_TEST_FULL run again as unit.<name>_all).
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
# A unit test's time limit: sanitizer builds run several times slower (under
# ASan unit.test_ckpt's fault loops spend 43 CPU s, mostly in the kernel, and
# took 300 s on a loaded 2-core machine).
if(PTC_SANITIZE)
  set(PTC_UNIT_TIMEOUT 900)
else()
  set(PTC_UNIT_TIMEOUT 300)
endif()

file(GLOB _unit CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/unit/test_*.c)
foreach(f ${_unit})
  get_filename_component(n ${f} NAME_WE)
  add_executable(${n} ${f})
  target_link_libraries(${n} PRIVATE ptc_testing PkgConfig::CMOCKA)
  target_compile_options(${n} PRIVATE ${PTC_C_WARN})
  set(_env "PTC_TEST_DATA=${CMAKE_CURRENT_SOURCE_DIR}/tests/data;PTC=$<TARGET_FILE:ptc_cli_test>")
  add_test(NAME unit.${n} COMMAND ${n})
  set_tests_properties(unit.${n} PROPERTIES LABELS unit TIMEOUT ${PTC_UNIT_TIMEOUT} SKIP_RETURN_CODE 77
    ENVIRONMENT "${_env}")
  # a test that reads PTC_TEST_FULL runs a subset of its cases; with
  # PTC_TEST_FULL=1 all of them, as unit.<name>_all (label slow)
  file(STRINGS ${f} _full REGEX "PTC_TEST_FULL" LIMIT_COUNT 1)
  if(_full)
    add_test(NAME unit.${n}_all COMMAND ${n})
    set_tests_properties(unit.${n}_all PROPERTIES LABELS "unit;slow" TIMEOUT 900
      SKIP_RETURN_CODE 77 ENVIRONMENT "${_env};PTC_TEST_FULL=1")
  endif()
endforeach()

foreach(kind cli fuse mpi net gpu)
  file(GLOB _scripts CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/${kind}/test_*.sh)
  foreach(f ${_scripts})
    get_filename_component(n ${f} NAME_WE)
    file(STRINGS ${f} _first LIMIT_COUNT 2 REGEX "^# labels:")
    set(_labels ${kind})
    if(_first)
      string(REGEX REPLACE "^# labels:[ ]*" "" _extra "${_first}")
      string(REPLACE " " ";" _extra "${_extra}")
      list(APPEND _labels ${_extra})
    endif()
    add_test(NAME ${kind}.${n} COMMAND bash ${f})
    set_tests_properties(${kind}.${n} PROPERTIES LABELS "${_labels}" TIMEOUT 900
      SKIP_RETURN_CODE 77
      ENVIRONMENT "PTC=$<TARGET_FILE:ptc_cli_test>;PTC_SRC=${CMAKE_CURRENT_SOURCE_DIR};PTC_BUILD=${CMAKE_CURRENT_BINARY_DIR}")
    # one multi-process job at a time (mpirun, mounts, network namespaces,
    # the Python suite's rank processes, a CLI script labelled `jobs` that
    # runs commands side by side); unit and CLI tests run beside it
    if(kind STREQUAL "mpi" OR kind STREQUAL "fuse" OR kind STREQUAL "net" OR "jobs" IN_LIST _labels)
      set_tests_properties(${kind}.${n} PROPERTIES RESOURCE_LOCK ptc_jobs)
      # under ASan: Open MPI's own allocations are never freed (no leak check)
      if(PTC_SANITIZE)
        set_property(TEST ${kind}.${n} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
      endif()
    endif()
  endforeach()
endforeach()

# Fuzz targets: always built as corpus replayers (plain ctest); with
# PTC_FUZZ=ON and clang also as libFuzzer binaries (fuzz_<name>_lf).
# With PTC_FUZZ (a build folder of its own) every module is compiled with
# coverage instrumentation, so libFuzzer sees inside the library.
file(GLOB _fuzz CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
foreach(f ${_fuzz})
  get_filename_component(n ${f} NAME_WE)
  add_executable(${n}_replay ${f} ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/replay_main.c)
  target_link_libraries(${n}_replay PRIVATE ptc_testing)
  target_compile_options(${n}_replay PRIVATE ${PTC_C_WARN})
  string(REGEX REPLACE "^fuzz_" "" _corpus ${n})
  add_test(NAME fuzz.${n} COMMAND ${n}_replay
           ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/corpus/${_corpus})
  set_tests_properties(fuzz.${n} PROPERTIES LABELS "unit;fuzz" TIMEOUT ${PTC_UNIT_TIMEOUT})
  if(PTC_FUZZ)
    add_executable(${n}_lf ${f})
    target_compile_options(${n}_lf PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${n}_lf PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(${n}_lf PRIVATE ptc_testing)
  endif()
endforeach()

# MPI test programs: tests/mpi/<name>.c, always built (MPI is required), run
# under mpirun by the tests/mpi/test_*.sh scripts ($PTC_BUILD/<name>).
file(GLOB _mpi_progs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/mpi/*.c)
foreach(f ${_mpi_progs})
  get_filename_component(n ${f} NAME_WE)
  add_executable(${n} ${f})
  target_link_libraries(${n} PRIVATE ptc_testing)
  target_compile_options(${n} PRIVATE ${PTC_C_WARN})
endforeach()

# GPU test programs: tests/gpu/<name>.c built when CUDA is on, run by the
# tests/gpu/test_*.sh scripts (label gpu; skipped where no GPU exists).
if(PTC_WITH_CUDA)
  file(GLOB _gpu_progs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/gpu/*.c)
  foreach(f ${_gpu_progs})
    get_filename_component(n ${f} NAME_WE)
    add_executable(${n} ${f})
    target_link_libraries(${n} PRIVATE ptc_testing CUDA::cudart CUDA::cublas)
    target_compile_options(${n} PRIVATE ${PTC_C_WARN})
  endforeach()
endif()

# The Python package (label python): tests/python/run.sh installs python/
# into the virtual environment of `make deps` with this build's libptc and
# runs the pytest suite (skipped without the environment). Not under the
# sanitizers: a Python process cannot load an ASan libptc.
# python.pytest runs the fast tier; python.pytest_slow (label slow) the tests
# marked @pytest.mark.slow (tests/python/conftest.py).
if(NOT PTC_SANITIZE)
  add_test(NAME python.pytest COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/python/run.sh)
  add_test(NAME python.pytest_slow
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/python/run.sh -m slow)
  set_tests_properties(python.pytest PROPERTIES LABELS python)
  set_tests_properties(python.pytest_slow PROPERTIES LABELS "python;slow")
  set_tests_properties(python.pytest python.pytest_slow PROPERTIES TIMEOUT 1800
    SKIP_RETURN_CODE 77 RESOURCE_LOCK ptc_jobs
    ENVIRONMENT "PTC=$<TARGET_FILE:ptc_cli_test>;PTC_SRC=${CMAKE_CURRENT_SOURCE_DIR};PTC_BUILD=${CMAKE_CURRENT_BINARY_DIR};PTC_LIBRARY=$<TARGET_FILE:ptc_test>")
endif()
