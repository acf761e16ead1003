# Install rules: headers (with the generated version.hpp), libtessera, the plugins (each
# plugin's own tessera_add_plugin() installs it into lib/tessera/plugins), the CLI, a CMake
# package exporting tessera::core and tessera::sdk with same-major compatibility, pkg-config
# files (tessera.pc for hosts, tessera-plugin.pc for plugins), and the documentation with the
# sample configs and sources under share/doc/tessera. Everything is found relative to the prefix, so an installed tree can be moved.

include(CMakePackageConfigHelpers)

set(TESSERA_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/tessera")

install(TARGETS tessera_core tessera_sdk
  EXPORT tesseraTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(DIRECTORY core/base/include/ core/transport_kit/include/ core/strategy_kit/include/
  core/runtime/include/ core/elastic/include/ core/launch/include/ sdk/include/ DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(FILES "${PROJECT_BINARY_DIR}/generated/include/tessera/base/version.hpp"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/tessera/base")
install(EXPORT tesseraTargets NAMESPACE tessera:: DESTINATION "${TESSERA_CMAKE_INSTALL_DIR}")

configure_package_config_file(cmake/tesseraConfig.cmake.in
  "${PROJECT_BINARY_DIR}/tesseraConfig.cmake"
  INSTALL_DESTINATION "${TESSERA_CMAKE_INSTALL_DIR}"
  PATH_VARS TESSERA_INSTALL_PLUGINDIR)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/tesseraConfigVersion.cmake"
  COMPATIBILITY SameMajorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/tesseraConfig.cmake"
  "${PROJECT_BINARY_DIR}/tesseraConfigVersion.cmake"
  sdk/cmake/TesseraPlugin.cmake
  sdk/cmake/tessera_plugin.map
  DESTINATION "${TESSERA_CMAKE_INSTALL_DIR}")

# pkg-config: relative to ${pcfiledir}, so a moved prefix still resolves.
file(RELATIVE_PATH tessera_pc_to_prefix
  "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" tessera_pc_to_prefix "${tessera_pc_to_prefix}")
configure_file(cmake/tessera.pc.in "${PROJECT_BINARY_DIR}/tessera.pc" @ONLY)
configure_file(cmake/tessera-plugin.pc.in "${PROJECT_BINARY_DIR}/tessera-plugin.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/tessera.pc" "${PROJECT_BINARY_DIR}/tessera-plugin.pc"
  DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")

# The plugin skeletons (an optimizer, a strategy, a model on the installed layers), for authors who have the installed package
# but not the sources.
install(DIRECTORY sdk/template/ DESTINATION "${CMAKE_INSTALL_DATADIR}/tessera/template")
install(DIRECTORY sdk/strategy_template/
  DESTINATION "${CMAKE_INSTALL_DATADIR}/tessera/strategy_template")
install(DIRECTORY sdk/model_template/ DESTINATION "${CMAKE_INSTALL_DATADIR}/tessera/model_template")

# The documentation and samples, laid out as in the sources (README.md, docs/, samples/) so
# their relative links hold in the installed copy too.
install(FILES README.md LICENSE DESTINATION "${CMAKE_INSTALL_DOCDIR}")
install(DIRECTORY docs/ DESTINATION "${CMAKE_INSTALL_DOCDIR}/docs")
# Only the samples' own files, one level inside each sample's folder: a run in the source tree
# writes its checkpoints, metrics and traces beside the sample configs (and a build folder may
# sit there), and none of that belongs in a package.
file(GLOB sample_files RELATIVE "${PROJECT_SOURCE_DIR}" CONFIGURE_DEPENDS
  samples/*/*.ini samples/*/*.cpp samples/*/*.hpp samples/*/CMakeLists.txt samples/*/README.md)
foreach(sample_file IN LISTS sample_files)
  get_filename_component(sample_dir "${sample_file}" DIRECTORY)
  install(FILES "${sample_file}" DESTINATION "${CMAKE_INSTALL_DOCDIR}/${sample_dir}")
endforeach()
