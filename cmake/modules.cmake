# One library target per module, in DESIGN.md's dependency order.
#
#   ptc_module(NAME DIR folder PUBLIC h... [IFACE h...] [DEPS mod...] [LIBS lib...])
#
# builds the OBJECT library ptc_<NAME> from DIR/*.c (feature files by their
# suffix: *_fuse3.c, *_nccl.c, *_cuda.c and *.cu only when that feature is
# on; *_no_fuse3.c, *_no_nccl.c, *_no_cuda.c, which answer
# PTC_E_UNSUPPORTED, only when it is off, so the headers are the same in
# every build). A module sees exactly:
#   - its own public headers (PUBLIC, include/ptc/<h>, as "ptc/<h>") and its
#     library-internal interface headers (IFACE, DIR/<h>, as "DIR/<h>"),
#   - its own private headers (every other DIR/*.h, *.cuh, as "DIR/<h>"),
#   - the PUBLIC and IFACE headers of the modules in DEPS, transitively.
# Each set is a folder of symbolic links under build/stage/<NAME>/, so the
# source tree itself is on no library include path: an include of a module
# above (or beside) this one, or of another module's private header, does
# not compile. tests/cmake/bad_include checks that it does not.
#
# Test hooks: DIR/*_testing.c are compiled into ptc_<NAME>_testing, which
# only the test build links (build/test-hooks/ and the test programs,
# CMakeLists.txt); DIR/*_no_testing.c, what the shipped library links in
# their place (hooks that never fire), into ptc_<NAME>_shipped. So fault
# injection is compiled once and linked where the tests need it, and the
# shipped libptc neither exports nor reads any test knob.
set(PTC_STAGE ${CMAKE_BINARY_DIR}/stage)
set_property(GLOBAL PROPERTY PTC_MODULES "")
set_property(GLOBAL PROPERTY PTC_PUBLIC_HEADERS "")
set_property(GLOBAL PROPERTY PTC_MODULE_LIBS "")
set_property(GLOBAL PROPERTY PTC_SHIPPED_OBJECTS "")
set_property(GLOBAL PROPERTY PTC_TESTING_OBJECTS "")

function(ptc_stage_link from to)
  get_filename_component(_d ${to} DIRECTORY)
  file(MAKE_DIRECTORY ${_d})
  file(CREATE_LINK ${from} ${to} SYMBOLIC)
endfunction()

function(ptc_module name)
  cmake_parse_arguments(M "" "DIR" "PUBLIC;IFACE;DEPS;LIBS" ${ARGN})
  set(src ${PROJECT_SOURCE_DIR})
  set(pub ${PTC_STAGE}/${name}/public)
  set(prv ${PTC_STAGE}/${name}/private)
  file(REMOVE_RECURSE ${PTC_STAGE}/${name})
  file(MAKE_DIRECTORY ${pub} ${prv})
  foreach(h ${M_PUBLIC})
    if(NOT EXISTS ${src}/include/ptc/${h})
      message(FATAL_ERROR "module ${name}: no public header include/ptc/${h}")
    endif()
    ptc_stage_link(${src}/include/ptc/${h} ${pub}/ptc/${h})
    set_property(GLOBAL APPEND PROPERTY PTC_PUBLIC_HEADERS ${h})
  endforeach()
  foreach(h ${M_IFACE})
    ptc_stage_link(${src}/${M_DIR}/${h} ${pub}/${M_DIR}/${h})
  endforeach()
  file(GLOB _hdrs CONFIGURE_DEPENDS ${src}/${M_DIR}/*.h ${src}/${M_DIR}/*.cuh)
  foreach(h ${_hdrs})
    get_filename_component(n ${h} NAME)
    if(NOT n IN_LIST M_IFACE)
      ptc_stage_link(${h} ${prv}/${M_DIR}/${n})
    endif()
  endforeach()

  file(GLOB _c CONFIGURE_DEPENDS ${src}/${M_DIR}/*.c)
  set(_srcs)
  set(_shipped)
  set(_testing)
  foreach(f ${_c})
    # *_no_<feature>.c: what a build without the feature answers instead
    if(f MATCHES "_no_testing\\.c$")
      list(APPEND _shipped ${f})
    elseif(f MATCHES "_testing\\.c$")
      list(APPEND _testing ${f})
    elseif(f MATCHES "_no_fuse3\\.c$")
      if(NOT PTC_WITH_FUSE)
        list(APPEND _srcs ${f})
      endif()
    elseif(f MATCHES "_no_nccl\\.c$")
      if(NOT PTC_WITH_NCCL)
        list(APPEND _srcs ${f})
      endif()
    elseif(f MATCHES "_no_cuda\\.c$")
      if(NOT PTC_WITH_CUDA)
        list(APPEND _srcs ${f})
      endif()
    elseif(f MATCHES "_fuse3\\.c$")
      if(PTC_WITH_FUSE)
        list(APPEND _srcs ${f})
      endif()
    elseif(f MATCHES "_nccl\\.c$")
      if(PTC_WITH_NCCL)
        list(APPEND _srcs ${f})
      endif()
    elseif(f MATCHES "_cuda\\.c$")
      if(PTC_WITH_CUDA)
        list(APPEND _srcs ${f})
      endif()
    else()
      list(APPEND _srcs ${f})
    endif()
  endforeach()
  if(PTC_WITH_CUDA)
    file(GLOB _cu CONFIGURE_DEPENDS ${src}/${M_DIR}/*.cu)
    list(APPEND _srcs ${_cu})
  endif()

  set(t ptc_${name})
  set(_deps)
  foreach(d ${M_DEPS})
    list(APPEND _deps ptc_${d})
  endforeach()
  ptc_module_objects(${t} ${name} "${_srcs}" "${_deps};${M_LIBS}")
  set_property(GLOBAL APPEND PROPERTY PTC_MODULES ${t})
  set_property(GLOBAL APPEND PROPERTY PTC_MODULE_LIBS ${M_LIBS})
  # the test hooks and their shipped stand-ins see what the module sees
  if(_shipped)
    ptc_module_objects(${t}_shipped ${name} "${_shipped}" ${t})
    set_property(GLOBAL APPEND PROPERTY PTC_SHIPPED_OBJECTS $<TARGET_OBJECTS:${t}_shipped>)
  endif()
  if(_testing)
    ptc_module_objects(${t}_testing ${name} "${_testing}" ${t})
    set_property(GLOBAL APPEND PROPERTY PTC_TESTING_OBJECTS $<TARGET_OBJECTS:${t}_testing>)
  endif()
endfunction()

# The OBJECT library TARGET of module NAME from SRCS, linked to LINK.
function(ptc_module_objects t name srcs link)
  add_library(${t} OBJECT ${srcs})
  target_include_directories(${t} PUBLIC ${PTC_STAGE}/${name}/public
    PRIVATE ${PTC_STAGE}/${name}/private ${CMAKE_BINARY_DIR}/include)
  target_compile_definitions(${t} PRIVATE PTC_BUILDING _GNU_SOURCE)
  target_compile_options(${t} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:${PTC_C_WARN} -fvisibility=hidden -Werror=implicit-function-declaration>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fvisibility=hidden>)
  if(PTC_FUZZ)
    target_compile_options(${t} PRIVATE
      $<$<COMPILE_LANGUAGE:C>:-fsanitize=fuzzer-no-link,address,undefined>
      $<$<COMPILE_LANGUAGE:C>:-fno-sanitize-recover=undefined>)
  endif()
  target_link_libraries(${t} PUBLIC ${link})
endfunction()
