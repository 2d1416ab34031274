# Test registration by folder, so a new test file needs no CMake edit.
#   tests/unit/test_<module>.c   cmocka, label unit
#   tests/cli/test_*.sh          label cli    (env PTC = the ptc binary)
#   tests/fuse/test_*.sh         label fuse   (mounts for real)
#   tests/mpi/test_*.sh          label mpi    (mpirun for real)
#   tests/net/test_*.sh          label net    (mpirun across network namespaces, root)
#   tests/gpu/test_*.sh          label gpu    (only where a GPU exists)
#   tests/fuzz/fuzz_<parser>.c   libFuzzer target + corpus replay, label unit
#   A line "# labels: slow" at the top of a script adds labels ("jobs": the
#   script runs processes side by side and takes multi-process slots, as
#   mpi, fuse and net scripts do; see "Multi-process slots" below). Exit
#   status 77: skipped (reported as such by ctest, never as a pass).
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

# Multi-process slots. The tests that start processes side by side (mpirun,
# mounts, network namespaces, Python ranks, a CLI script labelled `jobs`)
# share PTC_TEST_PROCS slots of a ctest resource `procs` (RESOURCE_GROUPS;
# the spec file below is named in CTestTestfile.cmake, so every ctest run in
# the build folder keeps to it, whatever its -j). Such a test takes one slot,
# or the number its line "# procs: N" says (at most PTC_TEST_PROCS: N =
# PTC_TEST_PROCS runs it alone). They spend most of their time waiting
# (process starts, barriers, timeouts: test_train_control uses 3 CPU s,
# test_net_elastic 4, test_train_state 32 of the about 400 CPU s of `make
# test`), so four of them side by side, beside the
# CPU-bound unit and CLI tests (which take no slot), keep the 2-core CI
# machine busy where one at a time left it mostly idle. Tests that run side
# by side share no name: every mount point, store, hostfile and gloo
# rendezvous is under the test's own mktemp folder, and network namespaces
# are named after the script's process id.
set(PTC_TEST_PROCS 4 CACHE STRING "multi-process test slots (ctest resource procs)")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/ptc_resources.json
  "{\"version\": {\"major\": 1, \"minor\": 0},\n \"local\": [{\"procs\": [{\"id\": \"0\", \"slots\": ${PTC_TEST_PROCS}}]}]}\n")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/ptc_resources.cmake
  "set(CTEST_RESOURCE_SPEC_FILE \"${CMAKE_CURRENT_BINARY_DIR}/ptc_resources.json\")\n")
set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${CMAKE_CURRENT_BINARY_DIR}/ptc_resources.cmake)
# ptc_test_procs(TEST FILE): TEST takes FILE's "# procs: N" slots (default 1)
function(ptc_test_procs test file)
  file(STRINGS ${file} _p LIMIT_COUNT 1 REGEX "^# procs: *[0-9]+")
  set(_n 1)
  if(_p)
    string(REGEX REPLACE "^# procs: *([0-9]+).*$" "\\1" _n "${_p}")
  endif()
  if(_n GREATER PTC_TEST_PROCS)
    set(_n ${PTC_TEST_PROCS})
  endif()
  set_tests_properties(${test} PROPERTIES RESOURCE_GROUPS "procs:${_n}")
  # under ASan: Open MPI's own allocations are never freed (no leak check);
  # the configuration matrices show each value once (tests/pairwise.py,
  # PTC_TEST_EACH): this pass looks for memory errors, the plain pass covers
  # the pairs
  if(PTC_SANITIZE)
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0;PTC_TEST_EACH=1")
  endif()
endfunction()

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
  # a test whose main reads PTC_TEST_SKIP / PTC_TEST_FILTER (cmocka's filters):
  # each of its test_fault_* cases (a loop that fails every fault point in
  # turn; minutes under ASan) is a ctest entry of its own, unit.<name>.<case>,
  # and unit.<name> runs the rest, so they spread over the run. A comment
  # "ctest-parts: CASE N" in the source splits CASE into N entries
  # unit.<name>.<case>.<k> (PTC_TEST_PART=k/N: every N-th fault point from k).
  file(STRINGS ${f} _split REGEX "getenv\\(\"PTC_TEST_SKIP\"\\)" LIMIT_COUNT 1)
  if(_split)
    file(STRINGS ${f} _cases REGEX "^static void test_fault_[a-z0-9_]+\\(void \\*\\*state\\)")
    set_property(TEST unit.${n} APPEND PROPERTY ENVIRONMENT "PTC_TEST_SKIP=test_fault_*")
    foreach(c ${_cases})
      string(REGEX REPLACE "^static void (test_fault_[a-z0-9_]+).*" "\\1" c "${c}")
      file(STRINGS ${f} _parts REGEX "ctest-parts: ${c} [0-9]+" LIMIT_COUNT 1)
      if(_parts)
        string(REGEX REPLACE ".*ctest-parts: ${c} ([0-9]+).*" "\\1" _np "${_parts}")
        foreach(k RANGE 1 ${_np})
          add_test(NAME unit.${n}.${c}.${k} COMMAND ${n})
          set_tests_properties(unit.${n}.${c}.${k} PROPERTIES LABELS unit
            TIMEOUT ${PTC_UNIT_TIMEOUT} SKIP_RETURN_CODE 77
            ENVIRONMENT "${_env};PTC_TEST_FILTER=${c};PTC_TEST_PART=${k}/${_np}")
        endforeach()
      else()
        add_test(NAME unit.${n}.${c} COMMAND ${n})
        set_tests_properties(unit.${n}.${c} PROPERTIES LABELS unit TIMEOUT ${PTC_UNIT_TIMEOUT}
          SKIP_RETURN_CODE 77 ENVIRONMENT "${_env};PTC_TEST_FILTER=${c}")
      endif()
    endforeach()
  endif()
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
    if(kind STREQUAL "mpi" OR kind STREQUAL "fuse" OR kind STREQUAL "net" OR "jobs" IN_LIST _labels)
      ptc_test_procs(${kind}.${n} ${f})
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
    # undefined behaviour stops the fuzzer as a crash does (as under make test-asan)
    target_compile_options(${n}_lf PRIVATE -fsanitize=fuzzer,address,undefined
                           -fno-sanitize-recover=undefined)
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

# The Python package (label python), not under the sanitizers (a Python
# process cannot load an ASan libptc). python.install (tests/python/run.sh
# --install) installs python/ into the virtual environment of `make deps`
# with this build's libptc, once: the setup of the fixture ptc_python. Then
# each tests/python/test_<name>.py is a test of its own, python.test_<name>
# (run.sh --installed: pytest on that file, its fast tier), so the files
# spread over the run beside the other suites; a file that starts rank
# processes says how many multi-process slots it takes ("# procs: N", as the
# scripts do; none otherwise). python.pytest_slow (label slow) runs the tests
# marked @pytest.mark.slow of every file (tests/python/conftest.py).
# All skip (77) without the environment.
if(NOT PTC_SANITIZE)
  set(_pyenv "PTC=$<TARGET_FILE:ptc_cli_test>;PTC_SRC=${CMAKE_CURRENT_SOURCE_DIR};PTC_BUILD=${CMAKE_CURRENT_BINARY_DIR};PTC_LIBRARY=$<TARGET_FILE:ptc_test>")
  set(_pyrun ${CMAKE_CURRENT_SOURCE_DIR}/tests/python/run.sh)
  add_test(NAME python.install COMMAND bash ${_pyrun} --install)
  set_tests_properties(python.install PROPERTIES LABELS python TIMEOUT 600
    SKIP_RETURN_CODE 77 FIXTURES_SETUP ptc_python ENVIRONMENT "${_pyenv}")
  file(GLOB _py CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/python/test_*.py)
  foreach(f ${_py})
    get_filename_component(n ${f} NAME_WE)
    get_filename_component(b ${f} NAME)
    add_test(NAME python.${n} COMMAND bash ${_pyrun} --installed ${b})
    set_tests_properties(python.${n} PROPERTIES LABELS python TIMEOUT 900
      SKIP_RETURN_CODE 77 FIXTURES_REQUIRED ptc_python ENVIRONMENT "${_pyenv}")
    file(STRINGS ${f} _p LIMIT_COUNT 1 REGEX "^# procs: *[0-9]+")
    if(_p)
      ptc_test_procs(python.${n} ${f})
    endif()
  endforeach()
  add_test(NAME python.pytest_slow COMMAND bash ${_pyrun} --installed -m slow)
  set_tests_properties(python.pytest_slow PROPERTIES LABELS "python;slow" TIMEOUT 1800
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED ptc_python ENVIRONMENT "${_pyenv}"
    RESOURCE_GROUPS "procs:${PTC_TEST_PROCS}")
endif()

# Start order: ctest runs the longest tests first (COST), from the times of
# its last run in this build folder (Testing/Temporary/CTestCostData.txt), or
# on a fresh build from tests/costs.txt ("NAME SECONDS", relative figures of
# a whole run on the 2-core machine; refresh it from a CTestCostData.txt
# after adding a long test). Without it a fresh CI run starts the tests in
# name order and the longest multi-process ones could start last.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/costs.txt)
file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/tests/costs.txt _costs REGEX "^[a-z]")
get_property(_tests DIRECTORY PROPERTY TESTS)
foreach(line ${_costs})
  string(REGEX MATCH "^([^ ]+) +([0-9.]+)" _m "${line}")
  if(_m AND CMAKE_MATCH_1 IN_LIST _tests)
    set_tests_properties(${CMAKE_MATCH_1} PROPERTIES COST ${CMAKE_MATCH_2})
  endif()
endforeach()
