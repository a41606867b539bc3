/* plugin_api.h: the guardpolicy plugin ABI, plain C (C99 or later; also valid C++).
 *
 * A plugin is a shared library that exports one function, gp_plugin_get_api(), returning a
 * table (gp_plugin_api) that declares what the plugin adds to the policy language:
 *
 *   - fields:    values read from each guard entry, named <plugin>.<field>, usable in any
 *                condition (`drop when modinfo.class_name == "Dropout"`);
 *   - functions: pure functions over typed arguments, usable in conditions
 *                (`drop when names.depth(name) > 3`);
 *   - filters:   whole guard filters over a list of entries, used like a policy
 *                (`use names.drop_deep(max_depth = 4)`) or from Python through
 *                guardpolicy.filter("names.drop_deep", max_depth=4).
 *
 * Versioning (see docs/plugins.md). The table begins with its own size and the ABI version
 * (major.minor) the plugin was built against. The host accepts a plugin when the majors
 * are equal and the plugin's minor is not newer than the host's. Within one major:
 *   - gp_plugin_api only grows at its end (the host reads a member only when struct_size
 *     covers it, so an older plugin's shorter table stays valid);
 *   - gp_field_decl, gp_function_decl, gp_filter_decl and gp_param_decl never change;
 *   - gp_entry_view is built by the host and only grows at its end (check struct_size
 *     before reading a member added after 1.0).
 *
 * Errors. No C++ exception and no longjmp may cross this boundary in either direction.
 * A callback that fails returns GP_ERROR; the host then calls get_last_error(state) and
 * reports "<plugin file>: plugin `<name>`: <what>: <message>". Inside torch.compile that
 * error follows the policy's `on_error` (keep every guard and warn, by default).
 *
 * Threads. The host never makes two calls into one plugin state at the same time (it
 * holds a lock per loaded plugin, and the Python GIL when entries come from Python).
 *
 * Ownership. Every pointer in the table and its declarations is owned by the plugin and
 * must stay valid until the library is unloaded (static storage is the usual choice).
 * Every pointer the host passes in is borrowed and valid only during the call.
 */
#ifndef GUARDPOLICY_PLUGIN_API_H_
#define GUARDPOLICY_PLUGIN_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GP_PLUGIN_API_VERSION_MAJOR 1
#define GP_PLUGIN_API_VERSION_MINOR 0

/* The symbol every plugin exports (see gp_plugin_get_api below). */
#define GP_PLUGIN_ENTRY_POINT "gp_plugin_get_api"

/* Marks the entry point as exported when the rest of the library is built with
 * -fvisibility=hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define GP_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define GP_PLUGIN_EXPORT
#endif

/* Result of every callback. */
typedef int32_t gp_rc;
#define GP_OK 0
#define GP_ERROR 1

/* One value of the policy language's type system (docs/language.md, "Types"). Which
 * members are meaningful depends on the declared type:
 *   "bool":   i is 0 or 1;
 *   "int":    i (a signed 64-bit integer);
 *   "string": str/len (UTF-8 bytes, not NUL-terminated, len may be 0);
 *   "<Enum>" (GuardType, GuardSource): str/len is the member's name; i is its ordinal in
 *             the schema, or -1 for a name the schema does not list (open enums);
 *   "set:<Enum>": bits, bit k set when member k is present (names outside the schema are
 *             not passed to plugins).
 * Strings handed to a plugin are borrowed for the call. Strings a plugin returns must
 * stay valid until the host's current call ends: return static storage, or copy with
 * gp_entry_view.keep_string. */
typedef struct gp_value {
  int64_t i;
  uint64_t bits;
  const char* str;
  size_t len;
} gp_value;

/* What the host shows a plugin of one guard entry (a torch._dynamo.types.GuardFilterEntry,
 * torch >= 2.8). Built by the host; valid only during the call it is passed to. */
typedef struct gp_entry_view {
  /* sizeof(gp_entry_view) as the host was built. */
  uint32_t struct_size;
  /* The core schema fields the declaration listed in `reads`, in that order, already
   * extracted (names like "guard_source.is_local"; see docs/schema.md). */
  const gp_value* fields;
  uint32_t num_fields;
  /* The Python GuardFilterEntry object (a borrowed PyObject*), or NULL when the entry does
   * not come from Python (a guard snapshot in `guardpolicy check`, a `test` block). Only
   * declarations with needs_py_entry = 1 may use it, with the GIL held by the host, and
   * must not keep a reference after the call. A plugin that needs it and finds NULL
   * returns GP_ERROR. A Python exception that is not an Exception (KeyboardInterrupt,
   * SystemExit) must be left set, with GP_ERROR: the host raises any Python exception a
   * callback leaves set. */
  void* py_entry;
  /* Host context for keep_string. */
  void* host;
  /* Copies `len` bytes into storage the host frees when its current call ends and returns
   * the copy (NULL only when memory runs out). */
  const char* (*keep_string)(void* host, const char* str, size_t len);
} gp_entry_view;

/* A field the plugin adds. Required: name, type, extract. */
typedef struct gp_field_decl {
  /* Name under the plugin's namespace: [a-z_][a-z0-9_]*; policies write <plugin>.<name>. */
  const char* name;
  /* A type name of the schema: "bool", "int", "string", "GuardType", "GuardSource",
   * "set:GuardType". */
  const char* type;
  /* One line for `guardpolicy lint` and the docs. Optional (NULL). */
  const char* doc;
  /* NULL-terminated list of the core fields `extract` reads from entry->fields, or NULL. */
  const char* const* reads;
  /* 1 when `extract` reads entry->py_entry; the host then always passes the Python entry
   * when there is one. */
  uint32_t needs_py_entry;
  /* Writes the field's value for one entry into *out. GP_ERROR: see get_last_error. */
  gp_rc (*extract)(void* state, const gp_entry_view* entry, gp_value* out);
} gp_field_decl;

/* A pure function usable in conditions. Required: name, result_type, call. */
typedef struct gp_function_decl {
  /* Name under the plugin's namespace: [a-z_][a-z0-9_]*. */
  const char* name;
  /* "bool" or "int" (ABI 1.0). */
  const char* result_type;
  /* Argument types (schema type names), num_args of them; NULL when num_args is 0. */
  const char* const* arg_types;
  uint32_t num_args;
  /* One line for the docs. Optional (NULL). */
  const char* doc;
  /* Computes the result from args[0..num_args). Must not depend on anything but its
   * arguments and the plugin's configuration (the optimizer may rely on that). */
  gp_rc (*call)(void* state, const gp_value* args, uint32_t num_args, gp_value* out);
} gp_function_decl;

/* A parameter of a filter, bound when the filter is used. Required: name, type. */
typedef struct gp_param_decl {
  /* [a-z_][a-z0-9_]* */
  const char* name;
  /* "bool", "int" or "string". */
  const char* type;
  /* 1 when default_value holds the value used when the parameter is not given. */
  uint32_t has_default;
  gp_value default_value;
} gp_param_decl;

/* A whole guard filter, like torch.compiler.skip_guard_on_globals_unsafe. Required: name,
 * run. */
typedef struct gp_filter_decl {
  /* Name under the plugin's namespace: [a-z_][a-z0-9_]*. */
  const char* name;
  /* One line for the docs and guardpolicy.filters(). Optional (NULL). */
  const char* doc;
  /* Parameters, num_params of them; NULL when num_params is 0. */
  const gp_param_decl* params;
  uint32_t num_params;
  /* NULL-terminated list of core fields each entry view carries, or NULL. */
  const char* const* reads;
  /* 1 when run() reads entries[i].py_entry. */
  uint32_t needs_py_entry;
  /* Decides every entry: keep[i] = 1 keeps entries[i]'s guard, 0 drops it. params holds
   * one value per declared parameter, defaults filled in. */
  gp_rc (*run)(void* state, const gp_value* params, const gp_entry_view* entries,
               uint32_t num_entries, uint8_t* keep);
} gp_filter_decl;

/* The table a plugin returns. Members after api_version_minor are read only when
 * struct_size covers them. */
typedef struct gp_plugin_api {
  /* sizeof(gp_plugin_api) as the plugin was built. Required. */
  uint32_t struct_size;
  /* GP_PLUGIN_API_VERSION_MAJOR/MINOR as the plugin was built. Required. */
  uint32_t api_version_major;
  uint32_t api_version_minor;
  /* The plugin's namespace: [a-z_][a-z0-9_]*, unique among loaded plugins and not a name
   * the schema uses ("guard_source", "source", "value", "user_frame") nor "builtin".
   * Required. */
  const char* name;
  /* The plugin's own version, free text (e.g. "1.2.0"). Required. */
  const char* version;
  /* One line. Optional (NULL). */
  const char* description;
  /* Creates the plugin state. `config` is the text given at load time ("" when none).
   * Sets *rc to GP_OK, or to GP_ERROR and returns a state (or NULL) from which
   * get_last_error explains the failure; the host then calls destroy on a non-NULL state.
   * Optional (NULL: the state is NULL). */
  void* (*init)(const char* config, gp_rc* rc);
  /* Frees the state. Optional. */
  void (*destroy)(void* state);
  /* The message of the last failed call on `state` (which may be NULL after a failed
   * init); owned by the plugin, valid until the next call on the state. Required. */
  const char* (*get_last_error)(void* state);
  /* Declarations; each array may be NULL when its count is 0. */
  const gp_field_decl* fields;
  uint32_t num_fields;
  const gp_function_decl* functions;
  uint32_t num_functions;
  const gp_filter_decl* filters;
  uint32_t num_filters;
} gp_plugin_api;

/* The entry point (named GP_PLUGIN_ENTRY_POINT). Returns the plugin's table, which must
 * stay valid until the library is unloaded; NULL refuses to load. Must not fail otherwise
 * and must be callable more than once. */
typedef const gp_plugin_api* (*gp_plugin_get_api_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* GUARDPOLICY_PLUGIN_API_H_ */
