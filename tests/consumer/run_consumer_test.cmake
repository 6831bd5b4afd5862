# Installs kiln's client component into a temporary prefix, then builds and runs the
# consumer project against it twice: with find_package(kiln), and with pkg-config only.
# Both programs must print the same key digest.
#   cmake -DKILN_BUILD_DIR=... -DCONSUMER_SOURCE_DIR=... -DWORK_DIR=... [-DKILND=... -DKILNCTL=...
#         -DTEST_WORKER=...: also the get-and-load example against a real kilnd] -P run_consumer_test.cmake
foreach(v KILN_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "${v} is required")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix} --component client)

# 1. CMake package.
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build -G Ninja
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer_cpp)
string(REGEX MATCH "[0-9a-f]+\n$" digest_cmake_cpp "${last_output}")
run(${WORK_DIR}/build/consumer_c)
string(REGEX MATCH "[0-9a-f]+\n$" digest_cmake_c "${last_output}")
# The get-and-load example against a real kilnd (when the test names one).
if(DEFINED KILND)
  run(sh ${CONSUMER_SOURCE_DIR}/run_get_and_load.sh ${KILND} ${KILNCTL} ${TEST_WORKER}
      ${WORK_DIR}/build/get_and_load ${WORK_DIR}/get_and_load)
  message(STATUS "${last_output}")
endif()

# 2. pkg-config, with the compilers called directly.
file(GLOB_RECURSE pc_files ${prefix}/kiln.pc)
if(NOT pc_files)
  message(FATAL_ERROR "no kiln.pc installed under ${prefix}")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir ${pc_file} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
run(pkg-config --cflags kiln)
string(STRIP "${last_output}" cflags)
separate_arguments(cflags UNIX_COMMAND "${cflags}")
# C++ API: the static libraries (kiln-cpp, --static).
run(pkg-config --libs --static kiln-cpp)
string(STRIP "${last_output}" libs)
separate_arguments(libs UNIX_COMMAND "${libs}")
run(c++ -std=c++20 ${cflags} ${CONSUMER_SOURCE_DIR}/consumer.cpp -o ${WORK_DIR}/pc_consumer_cpp ${libs})
run(${WORK_DIR}/pc_consumer_cpp)
string(REGEX MATCH "[0-9a-f]+\n$" digest_pc_cpp "${last_output}")
# C API: the shared libkiln.so, with plain `pkg-config --libs kiln` (no --static).
run(pkg-config --libs kiln)
string(STRIP "${last_output}" libs)
separate_arguments(libs UNIX_COMMAND "${libs}")
run(cc -std=c99 -Wall -Werror ${cflags} ${CONSUMER_SOURCE_DIR}/consumer.c -o ${WORK_DIR}/pc_consumer_c ${libs})
file(GLOB_RECURSE so_files ${prefix}/libkiln.so)
list(GET so_files 0 so_file)
get_filename_component(so_dir ${so_file} DIRECTORY)
run(${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${so_dir} ${WORK_DIR}/pc_consumer_c)
string(REGEX MATCH "[0-9a-f]+\n$" digest_pc_c "${last_output}")
# libkiln.so exports the C API and nothing else.
run(nm -D --defined-only ${so_file})
string(REGEX MATCHALL "[^\n]+" symbols "${last_output}")
foreach(line IN LISTS symbols)
  if(NOT line MATCHES " kiln_[a-z_0-9]+$" AND NOT line MATCHES " A ")
    message(FATAL_ERROR "libkiln.so exports more than the C API: ${line}")
  endif()
endforeach()

if(NOT digest_cmake_cpp OR NOT digest_cmake_cpp STREQUAL digest_cmake_c OR NOT digest_cmake_c STREQUAL digest_pc_cpp
   OR NOT digest_pc_cpp STREQUAL digest_pc_c)
  message(FATAL_ERROR "digests differ: ${digest_cmake_cpp} ${digest_cmake_c} ${digest_pc_cpp} ${digest_pc_c}")
endif()
message(STATUS "consumer test passed: find_package and pkg-config builds agree on ${digest_pc_c}")
file(REMOVE_RECURSE ${WORK_DIR})
