// fast_attr.cpp: filling and checking AttrCache slots (CPython 3.11 object layout).
#include "fast_attr.h"

#include <cstdint>

#include <structmember.h>  // T_OBJECT_EX

namespace guardpolicy::python {
namespace {

#ifdef GUARDPOLICY_CPYTHON_LAYOUT
// The head of CPython 3.11's PyDictKeysObject and its unicode entries
// (Include/internal/pycore_dict.h, 3.11), for the one read Fill needs: the index of a name
// in a type's shared keys (what _PyDictKeys_StringLookup, not exported, returns).
struct DictKeysHead {
  Py_ssize_t dk_refcnt;
  uint8_t dk_log2_size;
  uint8_t dk_log2_index_bytes;
  uint8_t dk_kind;
  uint32_t dk_version;
  Py_ssize_t dk_usable;
  Py_ssize_t dk_nentries;
  char dk_indices[1];
};
struct DictUnicodeEntry {
  PyObject* me_key;
  PyObject* me_value;
};
constexpr uint8_t kDictKeysSplit = 2;    // DICT_KEYS_SPLIT
constexpr Py_ssize_t kSharedKeysMax = 30;  // SHARED_KEYS_MAX_SIZE

// Where AttrCache reads `name` on `type`'s instances (see AttrCache::Slot::index), or -1
// when the type does not qualify for inline reads (see fast_attr.h).
Py_ssize_t InlineIndex(PyTypeObject* type, PyObject* name, Py_ssize_t slot_bit, Py_ssize_t dict_bit) {
  if (type->tp_getattro != PyObject_GenericGetAttr) return -1;
  PyObject* descr = _PyType_Lookup(type, name);  // also assigns a version tag
  if (!(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) || type->tp_version_tag == 0) return -1;
  if (descr != nullptr && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
    const PyMemberDef* member = reinterpret_cast<PyMemberDescrObject*>(descr)->d_member;
    if (member->type != T_OBJECT_EX || member->offset <= 0 || member->offset >= slot_bit) return -1;
    return slot_bit | member->offset;
  }
  if (descr != nullptr && Py_TYPE(descr)->tp_descr_set != nullptr) return -1;  // a data descriptor wins
  if (!(type->tp_flags & Py_TPFLAGS_MANAGED_DICT) || !(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) return -1;
  const auto* keys = reinterpret_cast<const DictKeysHead*>(reinterpret_cast<PyHeapTypeObject*>(type)->ht_cached_keys);
  if (keys == nullptr || keys->dk_kind != kDictKeysSplit || keys->dk_nentries > kSharedKeysMax) return dict_bit;
  const auto* entries = reinterpret_cast<const DictUnicodeEntry*>(keys->dk_indices + (size_t{1} << keys->dk_log2_index_bytes));
  for (Py_ssize_t i = 0; i < keys->dk_nentries; ++i) {
    PyObject* key = entries[i].me_key;
    if (key == name) return i;
    if (key != nullptr && PyUnicode_Check(key) && PyUnicode_Compare(key, name) == 0) return i;
  }
  return dict_bit;  // never inline: only a materialized __dict__ holds it
}
#endif

}  // namespace

bool DataDescriptorsWin(PyTypeObject* type) {
#ifdef GUARDPOLICY_CPYTHON_TYPE_LOOKUP
  const getattrofunc get = type->tp_getattro;
  if (get == PyObject_GenericGetAttr || get == PyModule_Type.tp_getattro || get == PyType_Type.tp_getattro) return true;
  static PyObject* const getattribute = PyUnicode_InternFromString("__getattribute__");
  if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) return false;
  PyObject* found = _PyType_Lookup(type, getattribute);
  // type's own lookup only on a metaclass (on anything else it raises).
  return found == _PyType_Lookup(&PyBaseObject_Type, getattribute) ||
         (found == _PyType_Lookup(&PyType_Type, getattribute) && PyType_IsSubtype(type, &PyType_Type));
#else
  (void)type;
  return false;
#endif
}

AttrCache::Slot* AttrCache::SlotFor(PyObject* obj) {
#ifdef GUARDPOLICY_CPYTHON_LAYOUT
  PyTypeObject* t = Py_TYPE(obj);
  Slot* slot = &slots_[SlotIndex(t)];
  if (slot->type == t && slot->version == t->tp_version_tag && t->tp_version_tag != 0) return slot;
  if (!enabled_) return nullptr;
  slot->type = t;
  slot->index = -1;
  slot->pending = InlineIndex(t, name_, kSlotBit, kDictBit);
  slot->version = t->tp_version_tag;
  return slot;
#else
  (void)obj;
  return nullptr;
#endif
}

void AttrCache::Verify(Slot& slot, PyObject* obj, PyObject* generic) const {
#ifdef GUARDPOLICY_CPYTHON_LAYOUT
  // Another thread may have taken the slot while the generic read ran.
  if (slot.type != Py_TYPE(obj) || slot.pending < 0 || slot.version != Py_TYPE(obj)->tp_version_tag) return;
  PyObject* read = Read(obj, slot.pending, name_);
  if (read == nullptr) return;  // cannot tell from this instance
  if (read == generic) slot.index = slot.pending;
  slot.pending = -1;  // confirmed, or refused for good
#else
  (void)slot, (void)obj, (void)generic;
#endif
}

PyObject* AttrCache::GetSlow(PyObject* obj) {
  Slot* slot = SlotFor(obj);
  PyObject* r = PyObject_GetAttr(obj, name_);
  if (slot != nullptr && r != nullptr) Verify(*slot, obj, r);
  return r;
}

int AttrCache::GetOptionalSlow(PyObject* obj, PyObject** out) {
  Slot* slot = SlotFor(obj);
  const int found = LookupOptionalAttr(obj, name_, out);
  if (slot != nullptr && found == 1) Verify(*slot, obj, *out);
  return found;
}

bool AttrCache::ReadsInline(PyObject* obj) const {
  PyObject* r = Inline(obj);
  Py_XDECREF(r);
  return r != nullptr;
}

}  // namespace guardpolicy::python
