# tessera_add_plugin(<target> SOURCES <files>... [LIBRARIES <libs>...])
#
# Builds a tessera plugin: a MODULE library with hidden visibility (only the descriptor that
# TESSERA_PLUGIN exports is visible), linked to tessera::sdk, placed in the plugin folder of the
# build tree when built in-tree, and installed into <prefix>/lib/tessera/plugins.

include_guard(GLOBAL)

function(tessera_add_plugin target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;LIBRARIES")
  add_library(${target} MODULE ${arg_SOURCES})
  if(TARGET tessera_sdk)
    target_link_libraries(${target} PRIVATE tessera_sdk tessera_warnings ${arg_LIBRARIES})
  else()
    target_link_libraries(${target} PRIVATE tessera::sdk ${arg_LIBRARIES})
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(DEFINED TESSERA_PLUGIN_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${TESSERA_PLUGIN_OUTPUT_DIRECTORY}")
  endif()
  if(NOT DEFINED TESSERA_INSTALL_PLUGINDIR)
    set(TESSERA_INSTALL_PLUGINDIR "lib/tessera/plugins")
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION "${TESSERA_INSTALL_PLUGINDIR}")
endfunction()
