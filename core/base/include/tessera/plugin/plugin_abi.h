/* The binary contract between libtessera and a plugin shared object, plugin ABI 3.
 *
 * A plugin exports exactly one symbol, the data object
 *     const tessera_plugin_descriptor tessera_plugin_descriptor_v3;
 * declared through TESSERA_PLUGIN (tessera/sdk/plugin.hpp). The host reads it without calling
 * any plugin function and checks every field before it calls the factory. Plain C, so that
 * the layout is fixed by the platform ABI rather than by a C++ compiler.
 *
 * Versioning: abi_major changes when a field changes meaning or the C++ interfaces change
 * incompatibly, and with it the symbol's name (_v1, _v2, ...): a host finds only descriptors of
 * its own major, and refuses a plugin that exports another major's symbol by saying which
 * major it was built for. abi_minor grows when fields are appended at the end of the descriptor
 * or of tessera_option_desc; a host accepts a plugin whose minor is not newer than its own.
 * struct_size and option_desc_size let a newer host read an older, shorter descriptor and
 * option table of the same major.
 *
 * ABI 2.0 differs from 1.x: the symbol is _v2; the descriptor carries the plugin's
 * capabilities (what the host may ask before creating anything); option_desc_size sits before
 * them and every option entry has its range fields; the C++ interfaces changed (docs/plugins.md,
 * "Porting a plugin from ABI 1"). ABI 2.1 adds what a plugin may call or derive from in
 * libtessera: CheckpointWriter::every_rank_writes_replicated_state and DeviceMemorySource
 * (device_memory_source.hpp). A 2.0 host refuses a 2.1 plugin; a 2.1 host runs both. ABI 2.2
 * adds the strategy flag TESSERA_REPLICATED_STATE; a 2.1 host refuses a 2.2 plugin. ABI 2.3 lets a
 * strategy declare the devices its state may live on (TESSERA_DEVICE_*; none: the host's memory
 * only), so that a host refuses [runtime] device = cuda for a strategy that cannot keep its state
 * on a GPU before any rank starts; a 2.2 host refuses a 2.3 plugin.
 *
 * ABI 3.0 changes the C++ interfaces of models and data sets (docs/plugin-guide.md, "Porting a
 * plugin from ABI 2"): a sample is a SampleLayout (typed inputs, targets of any shape, an ignore
 * index) that the data set and the model declare, and a loss reports its sum and the count of
 * its targets. Its descriptor is 2.3's with url_scheme and create_url_scheme appended: a store
 * names the URL scheme it serves and reads its own URLs (store_url_scheme.hpp), so that the
 * core knows no store's URL or options. The symbol is _v3; an ABI 2 plugin is refused by name.
 * ABI 3.1 adds Megatron's vocabulary-parallel embedding and head: TensorParallelRole::vocabulary,
 * and a model that takes it derives from VocabularyParallelModel (model.hpp), whose loss reads a
 * vocabulary slice of the logits through the kit's TensorGroupReductions. A 3.0 plugin loads and
 * runs as before (no strategy asks a model that does not derive from the class for the role); a
 * 3.0 host refuses a 3.1 plugin.
 */
#ifndef TESSERA_PLUGIN_ABI_H
#define TESSERA_PLUGIN_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_PLUGIN_ABI_MAJOR 3
#define TESSERA_PLUGIN_ABI_MINOR 1

#define TESSERA_PLUGIN_ABI_STR2(x) #x
#define TESSERA_PLUGIN_ABI_STR(x) TESSERA_PLUGIN_ABI_STR2(x)
#define TESSERA_PLUGIN_ABI_CAT2(a, b) a##b
#define TESSERA_PLUGIN_ABI_CAT(a, b) TESSERA_PLUGIN_ABI_CAT2(a, b)
/* The exported name carries the major, so that a plugin of another major is never read as one
 * of this major: tessera_plugin_descriptor_v3. */
#define TESSERA_PLUGIN_DESCRIPTOR_NAME \
  TESSERA_PLUGIN_ABI_CAT(tessera_plugin_descriptor_v, TESSERA_PLUGIN_ABI_MAJOR)
#define TESSERA_PLUGIN_DESCRIPTOR_SYMBOL \
  "tessera_plugin_descriptor_v" TESSERA_PLUGIN_ABI_STR(TESSERA_PLUGIN_ABI_MAJOR)

/* One option of a plugin's schema. All strings are static, owned by the plugin. */
typedef struct tessera_option_desc {
  const char* name;          /* lower_snake_case key within the plugin's section */
  const char* type;          /* "bool", "int", "float", "string", "size", "duration" */
  const char* default_value; /* text in the type's syntax; NULL means required */
  const char* help;          /* one line */
  const char* choices;       /* "a|b|c" for a string from a fixed set, else NULL */
  /* Inclusive bounds in the type's syntax ("1", "0.999", "4KiB", "10ms") for int, float, size
   * and duration options; NULL: unbounded on that side. The host refuses a value outside them
   * before the plugin is created, naming where the value came from. */
  const char* minimum;
  const char* maximum;
} tessera_option_desc;

/* Capability flags (tessera_plugin_capabilities.flags). A transport's flags describe its ranks, a
 * store's its clients, a strategy's its state; every other kind declares none. */
#define TESSERA_SPANS_PROCESSES 0x1u /* ranks (clients) may be separate processes */
#define TESSERA_SPANS_HOSTS 0x2u     /* ... on different hosts; implies SPANS_PROCESSES */
/* A strategy's promise (ABI 2.2), which lets the elastic runtime keep no copies of its state:
 * between steps every rank holds the whole state (parameters and optimizer state); train_step
 * changes it only after all of the step's communication completed, so a step that throws leaves
 * it as the last completed step did; and save() into a writer whose
 * every_rank_writes_replicated_state() is true writes all of it without communicating. */
#define TESSERA_REPLICATED_STATE 0x4u

/* Device flags (tessera_plugin_capabilities.devices): where a transport's buffers may live (a
 * transport declares at least one), or where a strategy may keep its state (ABI 2.3; none: host
 * memory only). Every other kind declares none. */
#define TESSERA_DEVICE_CPU 0x1u
#define TESSERA_DEVICE_CUDA 0x2u

/* What the host may know about a plugin without creating its object: `tessera train` picks
 * threads or processes, and refuses a store that cannot join the processes of a job, from these
 * alone. A plugin's objects must live up to what it declares. */
typedef struct tessera_plugin_capabilities {
  uint32_t flags;   /* TESSERA_SPANS_* */
  uint32_t devices; /* TESSERA_DEVICE_* */
} tessera_plugin_capabilities;

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
  uint16_t abi_major;   /* TESSERA_PLUGIN_ABI_MAJOR; must match the symbol's _vN */
  uint16_t abi_minor;
  const char* build_id; /* compiler, C++ library ABI and tessera major; must equal the host's */
  const char* kind;     /* "transport", "store", "strategy", "optimizer", "model", "dataset" */
  const char* name;     /* unique within its kind */
  const char* const* aliases; /* NULL-terminated list, may be NULL */
  const char* version;        /* the plugin's own version, free text such as "1.2.0" */
  const char* description;    /* one line */
  const tessera_option_desc* options;
  uint32_t option_count;
  uint32_t option_desc_size; /* sizeof(tessera_option_desc) as the plugin saw it: the stride */
  tessera_plugin_capabilities capabilities;
  /* Creates the plugin object: returns a pointer to the kind's interface (tessera::Transport*
   * for "transport", ...) that the host owns, or NULL with *error set. */
  void* (*create)(const tessera_factory_args* args);
  /* ABI 3.0, stores only. The scheme of the URLs that name this store ("etcd" for
   * etcd://HOST:PORT, as `tessera launch --store` and TESSERA_STORE_URL write it): lower-case
   * letters, digits, '+', '-', '.'; NULL for a store no URL names. Unique among loaded stores. */
  const char* url_scheme;
  /* ABI 3.0: creates the tessera::StoreUrlScheme* that reads this store's URLs, owned by the
   * host; args->options is NULL. NULL exactly when url_scheme is. Errors as for create. */
  void* (*create_url_scheme)(const tessera_factory_args* args);
} tessera_plugin_descriptor;

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_PLUGIN_ABI_H */
