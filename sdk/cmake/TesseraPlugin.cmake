# tessera_add_plugin(<target> SOURCES <files>... [LIBRARIES <libs>...] [OUTPUT_DIRECTORY <dir>]
#                    [NO_INSTALL])
#
# Builds a tessera plugin the one way every plugin, in-tree or third-party, is built:
#  - a MODULE library (dlopen'ed, never linked against) named lib<target>.so;
#  - hidden visibility and a linker version script, so that the descriptor TESSERA_PLUGIN
#    defines is the only dynamic symbol (check with `nm -D --defined-only`);
#  - linked to tessera::sdk (libtessera and the SDK headers);
#  - placed in OUTPUT_DIRECTORY, else TESSERA_PLUGIN_OUTPUT_DIRECTORY when set (in-tree: the
#    build tree's lib/tessera/plugins), else the current binary folder;
#  - installed into TESSERA_INSTALL_PLUGINDIR (<prefix>/lib/tessera/plugins by default, the
#    folder libtessera searches first) unless NO_INSTALL is given.
# Works both inside tessera's own build and after find_package(tessera).

include_guard(GLOBAL)

set(TESSERA_PLUGIN_VERSION_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/tessera_plugin.map"
  CACHE INTERNAL "linker version script exporting only the plugin descriptor")

function(tessera_add_plugin target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "NO_INSTALL" "OUTPUT_DIRECTORY" "SOURCES;LIBRARIES")
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "tessera_add_plugin(${target}): SOURCES is empty")
  endif()
  add_library(${target} MODULE ${arg_SOURCES})
  if(TARGET tessera_sdk)
    # Inside tessera's own build the in-tree warning set applies as well.
    target_link_libraries(${target} PRIVATE tessera_sdk tessera_warnings ${arg_LIBRARIES})
  else()
    target_link_libraries(${target} PRIVATE tessera::sdk ${arg_LIBRARIES})
  endif()
  target_compile_features(${target} PRIVATE cxx_std_20)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS "${TESSERA_PLUGIN_VERSION_SCRIPT}")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${TESSERA_PLUGIN_VERSION_SCRIPT}")

  if(arg_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${arg_OUTPUT_DIRECTORY}")
  elseif(DEFINED TESSERA_PLUGIN_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${TESSERA_PLUGIN_OUTPUT_DIRECTORY}")
  else()
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}")
  endif()

  if(NOT arg_NO_INSTALL)
    set(plugin_dir "${TESSERA_INSTALL_PLUGINDIR}")
    if(NOT plugin_dir)
      set(plugin_dir "lib/tessera/plugins")
    endif()
    install(TARGETS ${target} LIBRARY DESTINATION "${plugin_dir}")
  endif()
endfunction()
