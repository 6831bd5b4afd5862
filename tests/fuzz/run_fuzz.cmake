# ctest driver: build fuzz_protocol with clang (a separate CMake project in SRC) and
# fuzz for SECONDS seconds, starting from the seed corpus. Fails on any crash, leak,
# sanitizer report or round-trip mismatch; the crashing input is left in BIN/crashes/.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${BIN} -G Ninja -DCMAKE_CXX_COMPILER=${CXX}
                        -DCMAKE_BUILD_TYPE=RelWithDebInfo
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the clang fuzz build failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} -j2 RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building fuzz_protocol failed")
endif()
file(MAKE_DIRECTORY ${BIN}/corpus ${BIN}/crashes)
execute_process(COMMAND ${BIN}/fuzz_protocol -max_total_time=${SECONDS} -rss_limit_mb=2048 -max_len=65536
                        -artifact_prefix=${BIN}/crashes/ ${BIN}/corpus ${SRC}/corpus
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "fuzz_protocol found a failure (exit ${rc}); the input is in ${BIN}/crashes/")
endif()
