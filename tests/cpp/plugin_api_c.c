/* plugin_api_c.c: plugin_api.h compiles as C (this file is built by a C compiler with
 * -std=c99 -Wall -Wextra -Wpedantic -Werror); plugin_test.cpp checks the layout agrees. */
#include "guardpolicy/plugin_api.h"

size_t gp_test_c_table_size(void) { return sizeof(gp_plugin_api); }
size_t gp_test_c_view_size(void) { return sizeof(gp_entry_view); }
size_t gp_test_c_value_size(void) { return sizeof(gp_value); }
