# Run by `cmake --install` (ops/CMakeLists.txt), not at configure time: the paths a node's
# files name are those of the prefix the install writes to, so `cmake --install build
# --prefix X` gives a unit that runs X/sbin/kilnd with X/etc/kiln/kilnd.toml and writes
# nothing outside X (and DESTDIR). The rules are GNUInstallDirs' own (its "special cases"):
# the prefix /usr keeps its configuration in /etc, /opt/P in /etc/opt/P.
#
# In: CMAKE_INSTALL_PREFIX (the install's), KILN_SBINDIR, KILN_SYSCONFDIR, KILN_DOCDIR,
# KILN_UNIT_DIR (as configured: relative to the prefix, or absolute), KILN_UNIT_TEMPLATE,
# KILN_SAMPLE_CONFIG, KILN_UNIT_OUT (a scratch file in the build tree).

function(kiln_full_dir out relative)
  if(IS_ABSOLUTE "${relative}")
    set(${out} "${relative}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${relative}" PARENT_SCOPE)
  endif()
endfunction()

# A function, so that the names the template uses stay out of the install script's scope.
function(kiln_install_node)
  kiln_full_dir(CMAKE_INSTALL_FULL_SBINDIR "${KILN_SBINDIR}")
  kiln_full_dir(CMAKE_INSTALL_FULL_DOCDIR "${KILN_DOCDIR}")
  kiln_full_dir(kiln_unit_dir "${KILN_UNIT_DIR}")
  if(IS_ABSOLUTE "${KILN_SYSCONFDIR}")
    set(CMAKE_INSTALL_FULL_SYSCONFDIR "${KILN_SYSCONFDIR}")
  elseif(CMAKE_INSTALL_PREFIX MATCHES "^/(usr/?)?$" AND KILN_SYSCONFDIR STREQUAL "etc")
    set(CMAKE_INSTALL_FULL_SYSCONFDIR "/etc")
  elseif(CMAKE_INSTALL_PREFIX MATCHES "^/opt/" AND KILN_SYSCONFDIR STREQUAL "etc")
    set(CMAKE_INSTALL_FULL_SYSCONFDIR "/etc${CMAKE_INSTALL_PREFIX}")
  else()
    set(CMAKE_INSTALL_FULL_SYSCONFDIR "${CMAKE_INSTALL_PREFIX}/${KILN_SYSCONFDIR}")
  endif()
  set(KILN_CONFIG_FILE "${CMAKE_INSTALL_FULL_SYSCONFDIR}/kiln/kilnd.toml")

  configure_file("${KILN_UNIT_TEMPLATE}" "${KILN_UNIT_OUT}" @ONLY)
  # file(INSTALL) puts DESTDIR in front of an absolute destination itself and lists the
  # file in install_manifest.txt.
  file(INSTALL "${KILN_UNIT_OUT}" DESTINATION "${kiln_unit_dir}" RENAME kilnd.service)

  # The configuration is the operator's: a reinstall never replaces an edited one.
  set(kiln_conf "$ENV{DESTDIR}${KILN_CONFIG_FILE}")
  if(EXISTS "${kiln_conf}")
    message(STATUS "Kept: ${kiln_conf} (the shipped sample is in ${CMAKE_INSTALL_FULL_DOCDIR})")
  else()
    file(INSTALL "${KILN_SAMPLE_CONFIG}" DESTINATION "${CMAKE_INSTALL_FULL_SYSCONFDIR}/kiln")
  endif()
endfunction()
kiln_install_node()
