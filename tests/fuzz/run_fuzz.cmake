# ctest driver: build the fuzz target FUZZ_TARGET with clang (a separate CMake project in SRC)
# and fuzz for SECONDS seconds from its seed corpus. Fails on any crash, leak, sanitizer
# report or broken invariant; the failing input is left in BIN/crashes/.
#   fuzz_protocol: seeds in SRC/corpus (message bodies).
#   fuzz_tar: seeds made here with CMake's own tar writer (a small GNU tar and a pax
#   archive with a long name), so no binary seed lives in the repository.
#   fuzz_resp: seeds written here: a mode byte ('3': read and write roles; '7': and a
#   password) and what redis-py and torch send.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${BIN} -G Ninja -DCMAKE_CXX_COMPILER=${CXX}
                        -DCMAKE_BUILD_TYPE=RelWithDebInfo
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the clang fuzz build failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} -j2 --target ${FUZZ_TARGET} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building ${FUZZ_TARGET} failed")
endif()
file(MAKE_DIRECTORY ${BIN}/corpus ${BIN}/crashes)
set(seeds ${SRC}/corpus)
if(FUZZ_TARGET STREQUAL "fuzz_tar")
  set(seeds ${BIN}/seeds)
  set(files ${BIN}/seed-files)
  file(MAKE_DIRECTORY ${seeds} ${files}/blobs/sha256)
  file(WRITE ${files}/oci-layout "{\"imageLayoutVersion\":\"1.0.0\"}")
  file(WRITE ${files}/blobs/sha256/0123456789abcdef "kiln fuzz seed")
  string(REPEAT "n" 120 long)
  file(WRITE ${files}/${long} "a member whose name needs a pax header")
  execute_process(COMMAND ${CMAKE_COMMAND} -E tar cf ${seeds}/gnu.tar --format=gnutar oci-layout blobs
                  WORKING_DIRECTORY ${files} RESULT_VARIABLE rc1)
  execute_process(COMMAND ${CMAKE_COMMAND} -E tar cf ${seeds}/pax.tar --format=pax oci-layout ${long}
                  WORKING_DIRECTORY ${files} RESULT_VARIABLE rc2)
  if(rc1 OR rc2)
    message(FATAL_ERROR "making the tar seeds failed")
  endif()
endif()
if(FUZZ_TARGET STREQUAL "fuzz_resp")
  set(seeds ${BIN}/seeds)
  file(MAKE_DIRECTORY ${seeds})
  file(WRITE ${seeds}/hello3 "3*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$8\r\nLIB-NAME\r\n$8\r\nredis-py\r\n")
  file(WRITE ${seeds}/set_get "3*5\r\n$3\r\nSET\r\n$27\r\npt2:fx-graph-v1::abcdef01:c1\r\n$5\r\nvalue\r\n$2\r\nEX\r\n$2\r\n60\r\n*2\r\n$3\r\nGET\r\n$27\r\npt2:fx-graph-v1::abcdef01:c1\r\n")
  file(WRITE ${seeds}/auth "7*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$6\r\nsecret\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
  file(WRITE ${seeds}/inline "1PING\r\nSELECT 0\r\n\r\nGET k\r\nQUIT\r\n")
endif()
execute_process(COMMAND ${BIN}/${FUZZ_TARGET} -max_total_time=${SECONDS} -rss_limit_mb=2048 -max_len=65536
                        -artifact_prefix=${BIN}/crashes/ ${BIN}/corpus ${seeds}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "${FUZZ_TARGET} found a failure (exit ${rc}); the input is in ${BIN}/crashes/")
endif()
