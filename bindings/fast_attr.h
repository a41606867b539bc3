// fast_attr.h: reading one plain instance attribute the way CPython's specialized
// LOAD_ATTR does, instead of through the generic attribute protocol.
//
// `entry.is_global` costs Python code about 2 ns: CPython 3.11's adaptive interpreter
// rewrites the LOAD_ATTR into LOAD_ATTR_INSTANCE_VALUE, which remembers the type's version
// tag and the attribute's index in the instance's inline values (Python/specialize.c,
// Python/ceval.c). Through the public C API the same read is PyObject_GetAttr: a type-cache
// probe, then a hash lookup in the shared keys, about 12 ns. For a filter that reads one or
// two fields per entry that difference decides whether it beats torch's one-line function.
//
// AttrCache is that inline cache for one attribute name, in C++ (CPython 3.11 only; on other
// versions every read is PyObject_GetAttr). It remembers up to kTypes types (one per slot of
// a table hashed by type). A type is read inline only when it uses the generic getattr
// (tp_getattro == PyObject_GenericGetAttr), has a valid version tag, and either
//   - keeps instance attributes in a managed dict (Py_TPFLAGS_MANAGED_DICT) and has no data
//     descriptor of that name on its MRO (a method or a cached_property is fine: an instance
//     value wins over them): the value is read from the inline values at the name's index
//     in the shared keys (LOAD_ATTR_INSTANCE_VALUE), or from the instance's materialized
//     __dict__ (LOAD_ATTR_WITH_HINT); when the instance holds none, the generic path runs
//     the descriptor; or
//   - finds for the name a __slots__ member descriptor (an object member) on its MRO, read
//     at the member's offset (LOAD_ATTR_SLOT),
// and the first read after filling is checked against PyObject_GetAttr (a different object
// and the type is never read inline). Any other case (an unknown type, a type modified since,
// an attribute the instance does not hold, a deleted one) reads through the generic path,
// so the result is always what `getattr(obj, name)` returns. Needs the GIL, which
// guards it: caches live for the process (one per attribute name), so the fill cost is paid
// once, not per call.
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>

// The CPython versions whose internals these fast paths rely on: the object layout of
// inline values and PEP 509 dict versions (3.11), and _PyType_Lookup (3.11-3.13). Elsewhere
// every read takes the generic path.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define GUARDPOLICY_CPYTHON_LAYOUT 1
#endif
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#define GUARDPOLICY_CPYTHON_TYPE_LOOKUP 1
#endif

namespace guardpolicy::python {

// getattr(obj, name) when it exists: 1 with a new reference in *out; 0 when it does not (no
// exception); -1 with a Python exception set. PyObject_GetOptionalAttr, by its 3.11 name.
inline int LookupOptionalAttr(PyObject* obj, PyObject* name, PyObject** out) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(obj, name, out);
#else
  return _PyObject_LookupAttr(obj, name, out);
#endif
}

// A dict (or a module's) and its version tag (CPython 3.11's PEP 509 `ma_version_tag`:
// every change to the dict changes it): "nothing in this dict changed" in two loads.
// Elsewhere never the same, so everything is looked up again.
struct DictStamp {
  PyObject* dict = nullptr;  // borrowed: compared by identity only
  uint64_t version = 0;
  static DictStamp OfDict(PyObject* d) {
    DictStamp st;
    if (d != nullptr && PyDict_Check(d)) {
      st.dict = d;
#ifdef GUARDPOLICY_CPYTHON_LAYOUT
      st.version = reinterpret_cast<PyDictObject*>(d)->ma_version_tag;
#endif
    }
    return st;
  }
  static DictStamp Of(PyObject* module) {
    return module != nullptr && PyModule_Check(module) ? OfDict(PyModule_GetDict(module)) : DictStamp{};
  }
  bool SameDict(PyObject* d) const {
#ifdef GUARDPOLICY_CPYTHON_LAYOUT
    const DictStamp now = OfDict(d);
    return dict != nullptr && now.dict == dict && now.version == version;
#else
    (void)d;
    return false;
#endif
  }
  bool Same(PyObject* module) const {
    return module != nullptr && PyModule_Check(module) && SameDict(PyModule_GetDict(module));
  }
};


// Whether getattr on `type`'s instances returns what a data descriptor found on `type`'s
// MRO gives, as object.__getattribute__ does: PyObject_GenericGetAttr itself; module's and
// type's getattr (both ask such a descriptor first); or a Python class (a metaclass too)
// that inherits object's or type's `__getattribute__` (a `__getattr__` of its own runs only
// on a miss). CPython 3.11-3.13; elsewhere false.
bool DataDescriptorsWin(PyTypeObject* type);

class AttrCache {
  static constexpr int kTypesLog2 = 6;  // a direct-mapped table of 64 types
  static constexpr int kTypes = 1 << kTypesLog2;
  static inline bool enabled_ = true;
  struct Slot {
    PyTypeObject* type = nullptr;  // borrowed: compared by identity, guarded by version
    unsigned int version = 0;      // tp_version_tag when filled (tags are never reused)
    // Where the attribute is: its index in the inline values (or, once they moved to a
    // materialized __dict__, its key there); with kDictBit, only a materialized __dict__ can
    // hold it; with kSlotBit, the byte offset of a __slots__ member. -1: read generically.
    Py_ssize_t index = -1;
    Py_ssize_t pending = -1;  // the index found, until a read confirms it (Verify)
  };
  static constexpr Py_ssize_t kSlotBit = Py_ssize_t{1} << 40;
  static constexpr Py_ssize_t kDictBit = Py_ssize_t{1} << 41;

 public:
  // `name` must be an interned str that outlives the cache.
  explicit AttrCache(PyObject* name) : name_(name) {}

  // getattr(obj, name): a new reference, or nullptr with a Python exception set.
  PyObject* Get(PyObject* obj) {
    if (PyObject* r = Inline(obj)) return r;
    return GetSlow(obj);
  }

  // getattr(obj, name) when it exists: 1 with a new reference in *out; 0 when obj has no
  // such attribute (no exception); -1 with a Python exception set.
  int GetOptional(PyObject* obj, PyObject** out) {
    if ((*out = Inline(obj)) != nullptr) return 1;
    return GetOptionalSlow(obj, out);
  }

  // The inline read, borrowed (valid while obj keeps the attribute), or nullptr (no
  // exception) when only the generic path can answer. It does not fill the cache.
  [[gnu::always_inline]] PyObject* Peek(PyObject* obj) const {
#ifdef GUARDPOLICY_CPYTHON_LAYOUT
    PyTypeObject* t = Py_TYPE(obj);
    if (!enabled_) return nullptr;
    const Slot& s = slots_[SlotIndex(t)];
    if (s.type != t || s.index < 0 || s.version != t->tp_version_tag) return nullptr;
    return Read(obj, s.index, name_);
#else
    (void)obj;
#endif
    return nullptr;
  }

  // Whether Py_TYPE(obj) is read inline (tests).
  bool ReadsInline(PyObject* obj) const;

  // Turns the inline path off (or back on) for every cache in the process: tests compare
  // both paths.
  static void SetEnabled(bool enabled) { enabled_ = enabled; }

 private:
  // The attribute at `index` (see Slot), borrowed, or nullptr when it is not set there.
  [[gnu::always_inline]] static PyObject* Read(PyObject* obj, Py_ssize_t index, PyObject* name) {
    if (index & kSlotBit) {  // LOAD_ATTR_SLOT: a member descriptor's offset
      return *reinterpret_cast<PyObject* const*>(reinterpret_cast<const char*>(obj) + (index & ~kSlotBit));
    }
    // LOAD_ATTR_INSTANCE_VALUE: _PyObject_ValuesPointer (Include/internal/pycore_object.h, 3.11).
    PyObject* const* values = *(reinterpret_cast<PyObject* const* const*>(obj) - 4);
    if (values != nullptr) return (index & kDictBit) ? nullptr : values[index];
    return ReadDict(obj, name);
  }
  // LOAD_ATTR_WITH_HINT: the materialized dict, _PyObject_ManagedDictPointer (3.11).
  [[gnu::noinline]] static PyObject* ReadDict(PyObject* obj, PyObject* name) {
    PyObject* dict = *(reinterpret_cast<PyObject* const*>(obj) - 3);
    return dict == nullptr ? nullptr : PyDict_GetItemWithError(dict, name);  // str key: cannot fail
  }
  // Fibonacci hashing of the type's address.
  static size_t SlotIndex(const PyTypeObject* t) {
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(t) >> 4) * uint64_t{0x9E3779B97F4A7C15} >>
                               (64 - kTypesLog2));
  }
  // The inline read: a new reference, or nullptr (no exception) to take the slow path.
  PyObject* Inline(PyObject* obj) const {
    PyObject* r = Peek(obj);
    Py_XINCREF(r);
    return r;
  }
  PyObject* GetSlow(PyObject* obj);
  int GetOptionalSlow(PyObject* obj, PyObject** out);
  // The slot for Py_TYPE(obj), filled (or refilled after a type change); nullptr when the
  // inline path is off or on another Python version.
  Slot* SlotFor(PyObject* obj);
  // A slot is read inline only once an inline read at its index gave what the generic read
  // `generic` of the same instance gave; a different object refuses the type for good.
  void Verify(Slot& slot, PyObject* obj, PyObject* generic) const;

  PyObject* name_;
  Slot slots_[kTypes];  // by SlotIndex; a type whose slot another holds replaces it
};

}  // namespace guardpolicy::python
