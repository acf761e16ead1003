/* The binary contract between libtessera and a plugin shared object.
 *
 * A plugin exports exactly one symbol, the data object
 *     const tessera_plugin_descriptor tessera_plugin_descriptor_v1;
 * declared through TESSERA_PLUGIN (tessera/sdk/plugin.hpp). The host reads it without calling
 * any plugin function and checks every field before it calls the factory. Plain C, so that
 * the layout is fixed by the platform ABI rather than by a C++ compiler.
 *
 * Versioning: abi_major changes when a field changes meaning or the C++ interfaces change
 * incompatibly; the host refuses any other major. abi_minor grows when fields are appended;
 * a host accepts a plugin whose minor is not newer than its own. struct_size lets a newer
 * host read an older, shorter descriptor.
 *
 * 1.1 appended `minimum` and `maximum` to tessera_option_desc and `option_desc_size` to the
 * descriptor: the host walks `options` with that stride, and with the 1.0 size (five pointers,
 * no ranges) for a descriptor that predates the field.
 */
#ifndef TESSERA_PLUGIN_ABI_H
#define TESSERA_PLUGIN_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_PLUGIN_ABI_MAJOR 1
#define TESSERA_PLUGIN_ABI_MINOR 1
#define TESSERA_PLUGIN_DESCRIPTOR_SYMBOL "tessera_plugin_descriptor_v1"

/* One option of a plugin's schema. All strings are static, owned by the plugin. */
typedef struct tessera_option_desc {
  const char* name;          /* lower_snake_case key within the plugin's section */
  const char* type;          /* "bool", "int", "float", "string", "size", "duration" */
  const char* default_value; /* text in the type's syntax; NULL means required */
  const char* help;          /* one line */
  const char* choices;       /* "a|b|c" for a string from a fixed set, else NULL */
  /* Since 1.1. Inclusive bounds in the type's syntax ("1", "0.999", "4KiB", "10ms") for int,
   * float, size and duration options; NULL: unbounded on that side. The host refuses a value
   * outside them before the plugin is created, naming where the value came from. */
  const char* minimum;
  const char* maximum;
} tessera_option_desc;

/* Arguments of the factory. `options` points to a const tessera::Options; `error` receives a
 * std::exception_ptr* slot the factory fills instead of letting an exception cross the C
 * boundary. Owned by the host for the duration of the call. */
typedef struct tessera_factory_args {
  uint32_t struct_size;
  const void* options;
  void* error;
} tessera_factory_args;

typedef struct tessera_plugin_descriptor {
  uint32_t struct_size; /* sizeof(tessera_plugin_descriptor) as the plugin saw it */
  uint16_t abi_major;
  uint16_t abi_minor;
  const char* build_id; /* compiler, C++ library ABI and tessera major; must equal the host's */
  const char* kind;     /* "transport", "store", "strategy", "optimizer", "model", "dataset" */
  const char* name;     /* unique within its kind */
  const char* const* aliases; /* NULL-terminated list, may be NULL */
  const char* version;        /* the plugin's own version, free text such as "1.2.0" */
  const char* description;    /* one line */
  const tessera_option_desc* options;
  uint32_t option_count;
  /* Creates the plugin object: returns a pointer to the kind's interface (tessera::Transport*
   * for "transport", ...) that the host owns, or NULL with *error set. */
  void* (*create)(const tessera_factory_args* args);
  /* Since 1.1: sizeof(tessera_option_desc) as the plugin saw it, the stride of `options`. */
  uint32_t option_desc_size;
} tessera_plugin_descriptor;

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_PLUGIN_ABI_H */
