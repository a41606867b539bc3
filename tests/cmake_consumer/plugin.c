/* plugin.c: the smallest useful plugin, one function `consumer.double_it(int) -> int`. */
#include <guardpolicy/plugin_api.h>

static gp_rc double_it(void* state, const gp_value* args, uint32_t num_args, gp_value* out) {
  (void)state;
  (void)num_args;
  out->i = 2 * args[0].i;
  return GP_OK;
}

static const char* get_last_error(void* state) {
  (void)state;
  return "no error";
}

static const char* const kIntArg[] = {"int"};

static const gp_function_decl kFunctions[] = {
    {"double_it", "int", kIntArg, 1, "Twice its argument.", double_it},
};

static const gp_plugin_api kApi = {
    sizeof(gp_plugin_api),
    GP_PLUGIN_API_VERSION_MAJOR,
    GP_PLUGIN_API_VERSION_MINOR,
    "consumer",
    "1.0.0",
    "The CMake consumer test's plugin.",
    NULL, /* init */
    NULL, /* destroy */
    get_last_error,
    NULL, 0, /* fields */
    kFunctions, 1,
    NULL, 0, /* filters */
};

GP_PLUGIN_EXPORT const gp_plugin_api* gp_plugin_get_api(void) { return &kApi; }
