/* modinfo.c: an example plugin that reads fields from the Python GuardFilterEntry.
 *
 * Fields (namespace `modinfo`):
 *   modinfo.class_name  string  type(entry.value).__name__ ("Linear", "Tensor", "int"),
 *                               "" when the entry has no value (entry.has_value False)
 *   modinfo.dtype       string  str(entry.value.dtype) for tensors ("torch.float32"), else ""
 *   modinfo.numel       int     entry.value.numel() for tensors, else -1
 *
 * The plugin does not link libpython: it finds the Python C API in the host process with
 * dlsym when a field first needs it, so `guardpolicy lint --plugin libmodinfo.so` works in
 * a process without Python, and inside torch.compile it uses the interpreter that runs
 * it. Without a Python entry (a guard snapshot, a `test` block) the fields fail with a
 * clear error, unless the test block gives their values. The host holds the GIL.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "guardpolicy/plugin_api.h"

typedef void PyObject;

static struct {
  int loaded;
  PyObject* (*GetAttrString)(PyObject*, const char*);
  const char* (*AsUTF8AndSize)(PyObject*, ssize_t*);
  PyObject* (*Str)(PyObject*);
  PyObject* (*CallNoArgs)(PyObject*);
  long long (*AsLongLong)(PyObject*);
  void (*DecRef)(PyObject*);
  void (*ErrClear)(void);
  int (*ExceptionMatches)(PyObject*);
  PyObject** Exception; /* &PyExc_Exception */
} py;

static char last_error[256];

static gp_rc fail(const char* what) {
  snprintf(last_error, sizeof last_error, "%s", what);
  return GP_ERROR;
}

static int load_python(void) {
  if (py.loaded) return 1;
  *(void**)&py.GetAttrString = dlsym(RTLD_DEFAULT, "PyObject_GetAttrString");
  *(void**)&py.AsUTF8AndSize = dlsym(RTLD_DEFAULT, "PyUnicode_AsUTF8AndSize");
  *(void**)&py.Str = dlsym(RTLD_DEFAULT, "PyObject_Str");
  *(void**)&py.CallNoArgs = dlsym(RTLD_DEFAULT, "PyObject_CallNoArgs");
  *(void**)&py.AsLongLong = dlsym(RTLD_DEFAULT, "PyLong_AsLongLong");
  *(void**)&py.DecRef = dlsym(RTLD_DEFAULT, "Py_DecRef");
  *(void**)&py.ErrClear = dlsym(RTLD_DEFAULT, "PyErr_Clear");
  *(void**)&py.ExceptionMatches = dlsym(RTLD_DEFAULT, "PyErr_ExceptionMatches");
  py.Exception = (PyObject**)dlsym(RTLD_DEFAULT, "PyExc_Exception");
  py.loaded = py.GetAttrString && py.AsUTF8AndSize && py.Str && py.CallNoArgs && py.AsLongLong && py.DecRef &&
              py.ErrClear && py.ExceptionMatches && py.Exception;
  return py.loaded;
}

/* After a failed Python call: an Exception becomes this plugin's error (cleared); anything
 * else (KeyboardInterrupt, SystemExit) stays set, and the host raises it (plugin_api.h). */
static void clear_error(void) {
  if (py.ExceptionMatches(*py.Exception)) py.ErrClear();
}

/* entry.value, or NULL (error set in last_error, or *absent = 1 when has_value is false). */
static PyObject* entry_value(const gp_entry_view* e, int* absent) {
  *absent = 0;
  if (e->py_entry == NULL) {
    fail("needs the Python GuardFilterEntry (give the field's value in a `test` block)");
    return NULL;
  }
  if (!load_python()) {
    fail("the Python C API is not in this process");
    return NULL;
  }
  if (e->num_fields < 2 || e->fields[0].i == 0) { /* reads[0] = has_value */
    *absent = 1;
    return NULL;
  }
  PyObject* v = py.GetAttrString(e->py_entry, "value");
  if (v == NULL) {
    clear_error();
    fail("GuardFilterEntry has no `value`");
  }
  return v;
}

/* Copies a Python str into host storage. */
static gp_rc set_str(const gp_entry_view* e, PyObject* s, gp_value* out) {
  ssize_t len = 0;
  const char* utf8 = s ? py.AsUTF8AndSize(s, &len) : NULL;
  if (utf8 == NULL) {
    clear_error();
    if (s) py.DecRef(s);
    return fail("a name is not a str");
  }
  out->str = e->keep_string(e->host, utf8, (size_t)len);
  out->len = (size_t)len;
  py.DecRef(s);
  return out->str ? GP_OK : fail("out of memory");
}

static gp_rc class_name(void* state, const gp_entry_view* e, gp_value* out) {
  (void)state;
  int absent = 0;
  PyObject* v = entry_value(e, &absent);
  if (absent) return GP_OK; /* "" */
  if (v == NULL) return GP_ERROR;
  PyObject* cls = py.GetAttrString(v, "__class__");
  py.DecRef(v);
  PyObject* name = cls ? py.GetAttrString(cls, "__name__") : NULL;
  if (cls) py.DecRef(cls);
  return set_str(e, name, out);
}

static gp_rc dtype(void* state, const gp_entry_view* e, gp_value* out) {
  (void)state;
  int absent = 0;
  if (e->num_fields >= 2 && e->fields[1].i == 0 && e->py_entry) return GP_OK; /* not a tensor: "" */
  PyObject* v = entry_value(e, &absent);
  if (absent) return GP_OK;
  if (v == NULL) return GP_ERROR;
  PyObject* d = py.GetAttrString(v, "dtype");
  py.DecRef(v);
  if (d == NULL) {
    clear_error();
    return fail("a tensor value has no dtype");
  }
  PyObject* s = py.Str(d);
  py.DecRef(d);
  return set_str(e, s, out);
}

static gp_rc numel(void* state, const gp_entry_view* e, gp_value* out) {
  (void)state;
  int absent = 0;
  out->i = -1;
  if (e->num_fields >= 2 && e->fields[1].i == 0 && e->py_entry) return GP_OK; /* not a tensor */
  PyObject* v = entry_value(e, &absent);
  if (absent) return GP_OK;
  if (v == NULL) return GP_ERROR;
  PyObject* method = py.GetAttrString(v, "numel");
  py.DecRef(v);
  PyObject* n = method ? py.CallNoArgs(method) : NULL;
  if (method) py.DecRef(method);
  if (n == NULL) {
    clear_error();
    return fail("value.numel() failed");
  }
  out->i = py.AsLongLong(n);
  py.DecRef(n);
  return GP_OK;
}

static const char* get_last_error(void* state) {
  (void)state;
  return last_error;
}

static const char* const kReads[] = {"has_value", "value.is_tensor", NULL};

static const gp_field_decl kFields[] = {
    {"class_name", "string", "type(entry.value).__name__, or \"\" without a value", kReads, 1, class_name},
    {"dtype", "string", "str(entry.value.dtype) for tensors (\"torch.float32\"), else \"\"", kReads, 1, dtype},
    {"numel", "int", "entry.value.numel() for tensors, else -1", kReads, 1, numel},
};

static const gp_plugin_api kApi = {
    sizeof(gp_plugin_api),
    GP_PLUGIN_API_VERSION_MAJOR,
    GP_PLUGIN_API_VERSION_MINOR,
    "modinfo",
    "1.0.0",
    "fields read from the guarded Python value: class name, tensor dtype and size",
    NULL,
    NULL,
    get_last_error,
    kFields,
    sizeof(kFields) / sizeof(kFields[0]),
    NULL,
    0,
    NULL,
    0,
};

GP_PLUGIN_EXPORT const gp_plugin_api* gp_plugin_get_api(void) { return &kApi; }
