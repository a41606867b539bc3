/* bad_plugin.c: one source, many broken plugins. Each build defines one BAD_* macro and
 * gets exactly one defect; tests/cpp/plugin_test.cpp loads each and checks the error.
 *   BAD_NO_ENTRY        no gp_plugin_get_api symbol
 *   BAD_NULL_TABLE      gp_plugin_get_api returns NULL
 *   BAD_MAJOR           ABI 2.0
 *   BAD_MINOR           ABI 1.99 (newer than the host)
 *   BAD_SMALL_TABLE     struct_size smaller than a 1.0 table
 *   BAD_NAME            plugin name "Bad-Name"
 *   BAD_TYPE            a field of type "float"
 *   BAD_DUPLICATE       two declarations named "twice"
 *   BAD_CLASH           plugin name "guard_source" (a schema namespace)
 *   BAD_READS           a field that reads "nosuch.field"
 *   BAD_INIT            init fails with a message
 *   BAD_EXTRACT         a field whose extractor reports an error
 *   BAD_CALL            a function that reports an error
 *   BAD_FILTER          a filter that reports an error
 *   BAD_KEYWORD         plugin name "when" (a keyword of the language)
 *   BAD_TEXT            a field doc that is not UTF-8
 *   BAD_ARGS            a function with 17 arguments (over the limit of 16)
 * Without a macro it is a valid plugin named "good".
 */
#include <stddef.h>

#include "guardpolicy/plugin_api.h"

static const char* last_error(void* state) {
  (void)state;
  return "the bad plugin failed on purpose";
}

static void* init(const char* config, gp_rc* rc) {
  (void)config;
#ifdef BAD_INIT
  *rc = GP_ERROR;
#else
  *rc = GP_OK;
#endif
  return NULL;
}

static gp_rc extract(void* state, const gp_entry_view* e, gp_value* out) {
  (void)state;
  (void)e;
  out->i = 1;
#ifdef BAD_EXTRACT
  return GP_ERROR;
#else
  return GP_OK;
#endif
}

static gp_rc call(void* state, const gp_value* args, uint32_t n, gp_value* out) {
  (void)state;
  (void)args;
  (void)n;
  out->i = 1;
#ifdef BAD_CALL
  return GP_ERROR;
#else
  return GP_OK;
#endif
}

static gp_rc run(void* state, const gp_value* params, const gp_entry_view* e, uint32_t n, uint8_t* keep) {
  (void)state;
  (void)params;
  (void)e;
  for (uint32_t i = 0; i < n; ++i) keep[i] = 0;
#ifdef BAD_FILTER
  return GP_ERROR;
#else
  return GP_OK;
#endif
}

#if defined(BAD_TYPE)
#define FIELD_TYPE "float"
#else
#define FIELD_TYPE "bool"
#endif
#if defined(BAD_READS)
static const char* const kReads[] = {"nosuch.field", NULL};
#else
static const char* const kReads[] = {"is_global", NULL};
#endif
#if defined(BAD_DUPLICATE)
#define FUNCTION_NAME "twice"
#define FIELD_NAME "twice"
#else
#define FUNCTION_NAME "one"
#define FIELD_NAME "flag"
#endif

#if defined(BAD_TEXT)
#define FIELD_DOC "a \xc3\x28 flag"
#else
#define FIELD_DOC "a flag"
#endif
static const gp_field_decl kFields[] = {{FIELD_NAME, FIELD_TYPE, FIELD_DOC, kReads, 0, extract}};
static const char* const kArgs[] = {"int", "int", "int", "int", "int", "int", "int", "int", "int",
                                    "int", "int", "int", "int", "int", "int", "int", "int"};
#if defined(BAD_ARGS)
#define NUM_ARGS 17
#else
#define NUM_ARGS 1
#endif
static const gp_function_decl kFunctions[] = {{FUNCTION_NAME, "int", kArgs, NUM_ARGS, "one", call}};
static const gp_filter_decl kFilters[] = {{"drop_all", "drops everything", NULL, 0, NULL, 0, run}};

#if defined(BAD_NAME)
#define PLUGIN_NAME "Bad-Name"
#elif defined(BAD_CLASH)
#define PLUGIN_NAME "guard_source"
#elif defined(BAD_KEYWORD)
#define PLUGIN_NAME "when"
#else
#define PLUGIN_NAME "good"
#endif

static const gp_plugin_api kApi = {
#ifdef BAD_SMALL_TABLE
    16,
#else
    sizeof(gp_plugin_api),
#endif
#if defined(BAD_MAJOR)
    2, 0,
#elif defined(BAD_MINOR)
    1, 99,
#else
    GP_PLUGIN_API_VERSION_MAJOR, GP_PLUGIN_API_VERSION_MINOR,
#endif
    PLUGIN_NAME, "0.1", "a plugin for the loader's tests", init, NULL, last_error,
    kFields, 1, kFunctions, 1, kFilters, 1,
};

#ifndef BAD_NO_ENTRY
GP_PLUGIN_EXPORT const gp_plugin_api* gp_plugin_get_api(void) {
#ifdef BAD_NULL_TABLE
  return NULL;
#else
  return &kApi;
#endif
}
#else
GP_PLUGIN_EXPORT int some_other_symbol(void) { return 0; }
#endif
