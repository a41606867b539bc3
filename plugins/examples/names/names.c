/* names.c: an example plugin with a function and a named filter over guard names.
 *
 *   names.depth(name) -> int   how deep a guard's source is nested: the number of `.`
 *                              attribute steps and `[` index steps in a Dynamo source name
 *                              ("L['self'].layers[0].attn.weight" has depth 5 counting the
 *                              local's own `[`)
 *   filter names.drop_deep(max_depth: int = 4)
 *                              drops every guard whose name is deeper than max_depth
 *                              (reads the core field `name`)
 *
 * Configuration (the text given at load time, e.g. guardpolicy.load_plugin(path,
 * config="strict")): "" or "strict". With "strict", depth() fails on an empty name, which
 * shows how a function reports an error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guardpolicy/plugin_api.h"

typedef struct {
  int strict;
  char last_error[128];
} names_state;

static char init_error[192];

static void* init(const char* config, gp_rc* rc) {
  if (strcmp(config, "") != 0 && strcmp(config, "strict") != 0) {
    snprintf(init_error, sizeof init_error, "unknown configuration `%.60s` (expected \"\" or \"strict\")", config);
    *rc = GP_ERROR;
    return NULL;
  }
  names_state* s = calloc(1, sizeof *s);
  if (s == NULL) {
    snprintf(init_error, sizeof init_error, "out of memory");
    *rc = GP_ERROR;
    return NULL;
  }
  s->strict = strcmp(config, "strict") == 0;
  *rc = GP_OK;
  return s;
}

static void destroy(void* state) { free(state); }

static const char* get_last_error(void* state) {
  return state ? ((names_state*)state)->last_error : init_error;
}

static int64_t name_depth(const char* s, size_t len) {
  int64_t depth = 0;
  for (size_t i = 0; i < len; ++i) depth += s[i] == '.' || s[i] == '[';
  return depth;
}

static gp_rc depth(void* state, const gp_value* args, uint32_t num_args, gp_value* out) {
  names_state* s = state;
  if (num_args != 1) return GP_ERROR;
  if (s->strict && args[0].len == 0) {
    snprintf(s->last_error, sizeof s->last_error, "depth() of an empty name (strict mode)");
    return GP_ERROR;
  }
  out->i = name_depth(args[0].str, args[0].len);
  return GP_OK;
}

static gp_rc drop_deep(void* state, const gp_value* params, const gp_entry_view* entries, uint32_t n,
                       uint8_t* keep) {
  (void)state;
  const int64_t max_depth = params[0].i;
  for (uint32_t i = 0; i < n; ++i) {
    const gp_value* name = &entries[i].fields[0];
    keep[i] = name_depth(name->str, name->len) <= max_depth;
  }
  return GP_OK;
}

static const char* const kDepthArgs[] = {"string"};
static const gp_function_decl kFunctions[] = {
    {"depth", "int", kDepthArgs, 1, "attribute and index steps in a guard name", depth},
};

static const char* const kReadsName[] = {"name", NULL};
static const gp_param_decl kDropDeepParams[] = {{"max_depth", "int", 1, {4, 0, NULL, 0}}};
static const gp_filter_decl kFilters[] = {
    {"drop_deep", "drop guards on names nested deeper than max_depth", kDropDeepParams, 1, kReadsName, 0,
     drop_deep},
};

static const gp_plugin_api kApi = {
    sizeof(gp_plugin_api),
    GP_PLUGIN_API_VERSION_MAJOR,
    GP_PLUGIN_API_VERSION_MINOR,
    "names",
    "1.0.0",
    "guard-name depth: a function and a filter",
    init,
    destroy,
    get_last_error,
    NULL,
    0,
    kFunctions,
    sizeof(kFunctions) / sizeof(kFunctions[0]),
    kFilters,
    sizeof(kFilters) / sizeof(kFilters[0]),
};

GP_PLUGIN_EXPORT const gp_plugin_api* gp_plugin_get_api(void) { return &kApi; }
