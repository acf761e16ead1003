# Install rules: headers, libtessera, plugins, the CLI, and a package config that exports
# tessera::core and tessera::sdk for find_package(tessera) with same-major compatibility.

include(CMakePackageConfigHelpers)

set(TESSERA_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/tessera")

install(TARGETS tessera_core tessera_sdk
  EXPORT tesseraTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(DIRECTORY core/include/ sdk/include/ DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(FILES "${PROJECT_BINARY_DIR}/generated/include/tessera/version.hpp"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/tessera")
install(EXPORT tesseraTargets NAMESPACE tessera:: DESTINATION "${TESSERA_CMAKE_INSTALL_DIR}")

configure_package_config_file(cmake/tesseraConfig.cmake.in
  "${PROJECT_BINARY_DIR}/tesseraConfig.cmake"
  INSTALL_DESTINATION "${TESSERA_CMAKE_INSTALL_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/tesseraConfigVersion.cmake"
  COMPATIBILITY SameMajorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/tesseraConfig.cmake"
  "${PROJECT_BINARY_DIR}/tesseraConfigVersion.cmake"
  sdk/cmake/TesseraPlugin.cmake
  DESTINATION "${TESSERA_CMAKE_INSTALL_DIR}")
