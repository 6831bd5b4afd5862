# Man pages generated from the programs' own --help and --version by help2man (Debian
# package help2man; ops/install-deps.sh installs it), so a page never says other than the
# binary it documents. Made each time the program is linked, into the build tree (never
# committed), so that wherever the program is built its page is there to install.
#
# kiln_man_page(TARGET SECTION DESCRIPTION COMPONENT), in the folder that defines TARGET:
# writes <that binary dir>/TARGET.SECTION after TARGET links and installs it under
# <mandir>/manSECTION with COMPONENT. Without help2man: no page, and a note at configure.
find_program(KILN_HELP2MAN help2man)
if(NOT KILN_HELP2MAN)
  message(STATUS "kiln: help2man not found: no man pages for kilnd and kilnctl (apt-get install help2man)")
endif()

function(kiln_man_page target section description component)
  if(NOT KILN_HELP2MAN)
    return()
  endif()
  set(page "${CMAKE_CURRENT_BINARY_DIR}/${target}.${section}")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND "${KILN_HELP2MAN}" --no-info --no-discard-stderr --section=${section} --name=${description}
            --output=${page} $<TARGET_FILE:${target}>
    BYPRODUCTS "${page}"
    VERBATIM)
  install(FILES "${page}" DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section} COMPONENT ${component})
endfunction()
