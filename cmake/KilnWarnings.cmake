# Warnings and sanitizers as INTERFACE targets, linked PRIVATE so they never leak
# to users of the installed client library.
add_library(kiln_warnings INTERFACE)
target_compile_options(kiln_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
  -Wunused -Woverloaded-virtual -Wnull-dereference -Wformat=2 -Wimplicit-fallthrough)
if(KILN_DEVELOPER_MODE)
  target_compile_options(kiln_warnings INTERFACE -Werror)
endif()

add_library(kiln_sanitizers INTERFACE)
if(KILN_SANITIZE)
  # e.g. -DKILN_SANITIZE=address,undefined
  target_compile_options(kiln_sanitizers INTERFACE -fsanitize=${KILN_SANITIZE} -fno-omit-frame-pointer)
  target_link_options(kiln_sanitizers INTERFACE -fsanitize=${KILN_SANITIZE})
endif()

# kiln_internal: what every target inside the project links PRIVATE.
add_library(kiln_internal INTERFACE)
target_link_libraries(kiln_internal INTERFACE kiln_warnings kiln_sanitizers)
