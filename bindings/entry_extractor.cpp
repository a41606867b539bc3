// entry_extractor.cpp: reading GuardFilterEntry fields through the CPython API.
#include "entry_extractor.h"

#include <algorithm>
#include <array>
#include <new>
#include <optional>
#include <stdexcept>

#include "fast_attr.h"
#include "known_properties.h"
#include "type_checks.h"
#include "guardpolicy/plugin_values.h"

namespace guardpolicy::python {
namespace {

constexpr std::pair<const char*, FieldId> kFieldIds[] = {
    {"name", FieldId::kName},
    {"guard_type", FieldId::kGuardType},
    {"derived_guard_types", FieldId::kDerivedGuardTypes},
    {"is_global", FieldId::kIsGlobal},
    {"has_value", FieldId::kHasValue},
    {"guard_source", FieldId::kGuardSource},
    {"guard_source.is_local", FieldId::kGsIsLocal},
    {"guard_source.is_unspecialized_nn_module", FieldId::kGsIsUnspecializedNNModule},
    {"guard_source.is_unspecialized_builtin_nn_module", FieldId::kGsIsUnspecializedBuiltinNNModule},
    {"guard_source.is_specialized_nn_module", FieldId::kGsIsSpecializedNNModule},
    {"guard_source.is_fsdp_module", FieldId::kGsIsFsdpModule},
    {"source.kind", FieldId::kSourceKind},
    {"source.root", FieldId::kSourceRoot},
    {"source.depth", FieldId::kSourceDepth},
    {"value.type", FieldId::kValueType},
    {"value.is_tensor", FieldId::kValueIsTensor},
    {"value.is_parameter", FieldId::kValueIsParameter},
    {"value.is_buffer", FieldId::kValueIsBuffer},
    {"value.is_module", FieldId::kValueIsModule},
    {"user_frame.file", FieldId::kUserFrameFile},
    {"user_frame.line", FieldId::kUserFrameLine},
    {"user_frame.function", FieldId::kUserFrameFunction},
};

// Attribute names, interned once for the life of the interpreter.
enum Attr : int {
  kAttrName, kAttrGuardType, kAttrDerived, kAttrIsGlobal, kAttrHasValue, kAttrValue, kAttrOrigGuard,
  kAttrSource, kAttrOriginatingSource, kAttrBase, kAttrMember, kAttrUserStack, kAttrFilename,
  kAttrLineno, kAttrModule, kAttrQualname, kAttrIsLocal, kAttrIsUnspecNN, kAttrIsUnspecBuiltin,
  kAttrIsSpecNN, kAttrIsFsdp, kAttrGet, kAttrGuardSource, kAttrCount,
};
constexpr const char* kAttrNames[kAttrCount] = {
    "name", "guard_type", "derived_guard_types", "is_global", "has_value", "value", "orig_guard",
    "source", "originating_source", "base", "member", "user_stack", "filename", "lineno",
    "__module__", "__qualname__", "is_local", "is_unspecialized_nn_module",
    "is_unspecialized_builtin_nn_module", "is_specialized_nn_module", "is_fsdp_module", "get", "guard_source"};

PyObject* Interned(Attr a) {
  static PyObject** names = [] {
    auto** out = new PyObject*[kAttrCount];  // never freed: lives as long as the interpreter
    for (int i = 0; i < kAttrCount; ++i) out[i] = PyUnicode_InternFromString(kAttrNames[i]);
    return out;
  }();
  return names[a];
}

// One inline attribute cache per name, for the process (guarded by the GIL; fast_attr.h).
[[gnu::always_inline]] inline AttrCache& Cache(Attr a) {
  static AttrCache* caches = [] {
    auto* out = static_cast<AttrCache*>(::operator new(sizeof(AttrCache) * kAttrCount));  // never freed
    for (int i = 0; i < kAttrCount; ++i) new (&out[i]) AttrCache(Interned(static_cast<Attr>(i)));
    return out;
  }();
  return caches[a];
}

[[gnu::always_inline]] inline py::object GetAttr(py::handle obj, Attr a) {
  PyObject* r = Cache(a).Get(obj.ptr());
  if (r == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

// The attribute, or an empty object when it does not exist (no exception is raised).
py::object GetOptionalAttr(py::handle obj, Attr a) {
  PyObject* r = nullptr;
  const int found = Cache(a).GetOptional(obj.ptr(), &r);
  if (found < 0) throw py::error_already_set();
  return found ? py::reinterpret_steal<py::object>(r) : py::object();
}

bool Truth(py::handle obj) {
  if (obj.ptr() == Py_True) return true;  // the usual case: real bools
  if (obj.ptr() == Py_False) return false;
  const int r = PyObject_IsTrue(obj.ptr());
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

// bool(getattr(obj, a)); a real bool read inline costs no reference counting.
[[gnu::always_inline]] inline bool TruthAttr(py::handle obj, Attr a) {
  PyObject* v = Cache(a).Peek(obj.ptr());
  if (v == Py_True) return true;
  if (v == Py_False) return false;
  return Truth(GetAttr(obj, a));
}

// GuardSource predicate methods, in GuardSourceInfo::preds order.
constexpr Attr kGuardSourcePredicates[] = {kAttrIsLocal, kAttrIsUnspecNN, kAttrIsUnspecBuiltin, kAttrIsSpecNN,
                                           kAttrIsFsdp};

constexpr int kMaxSourceDepth = 1000;  // a `.base` chain longer than this is malformed

Value BoolValue(bool b) { return Value{b ? 1 : 0, 0, {}}; }

// What an absent field reads as: false, 0, "", no enum member (ordinal -1), empty set.
Value AbsentValue(const Type& t) { return Value{t.kind == TypeKind::kEnum ? -1 : 0, 0, {}}; }

}  // namespace

static std::optional<FieldId> CoreFieldId(std::string_view field) {
  for (const auto& [name, id] : kFieldIds) {
    if (field == name) return id;
  }
  return std::nullopt;
}

ExtractorPlan::ExtractorPlan(const Program& program, std::shared_ptr<const Schema> schema_in)
    : schema(std::move(schema_in)) {
  names = program.fields;
  types = program.field_types;
  plugin_slots.resize(program.fields.size());
  for (size_t slot = 0; slot < program.fields.size(); ++slot) {
    const std::string& field = program.fields[slot];
    PluginSlot& ps = plugin_slots[slot];
    const int index = schema->FindField(field);
    const int fn = index < 0 ? schema->FindFunction(field) : -1;
    const std::vector<int>* reads = nullptr;
    if (index >= 0 && schema->fields()[index].plugin) {
      ids.push_back(FieldId::kPlugin);
      ps.field = &schema->fields()[index];
      reads = &ps.field->reads;
    } else if (fn >= 0 && schema->functions()[fn].is_filter) {
      ids.push_back(FieldId::kFilter);
      ps.filter = &schema->functions()[fn];
      ps.params = program.field_args[slot];
      reads = &ps.filter->reads;
      has_filters = true;
    } else if (auto id = CoreFieldId(field)) {
      ids.push_back(*id);
    } else {
      throw std::invalid_argument("no extractor for field `" + field + "`");
    }
    for (size_t k = 0; reads && k < reads->size(); ++k) {
      const FieldInfo& r = schema->fields()[(*reads)[k]];
      auto id = CoreFieldId(r.name);
      if (!id) throw std::invalid_argument("no extractor for field `" + r.name + "`");
      ps.reads.push_back(*id);
      ps.read_names.push_back(r.name);
      ps.read_types.push_back(r.type);
    }
  }
  if (ids.size() > 64) throw std::invalid_argument("a program reads more than 64 fields");
  guard_type_enum = schema->FindEnum("GuardType");
  guard_source_enum = schema->FindEnum("GuardSource");
  if (guard_type_enum >= 0) {
    const auto& members = schema->enums()[guard_type_enum].members;
    for (size_t i = 0; i < members.size(); ++i) guard_type_ordinal[members[i]] = static_cast<int>(i);
  }
}

bool ReadsInline(py::handle obj, std::string_view attr) {
  for (int a = 0; a < kAttrCount; ++a) {
    if (attr == kAttrNames[a]) return Cache(static_cast<Attr>(a)).ReadsInline(obj.ptr());
  }
  return false;
}

void EntryExtractor::Reset() {
  BeginEntry();
  host_strings_.Clear();
  filter_keep_.clear();
  keep_alive_.clear();
  strings_.clear();
  if (!guard_sources_.empty()) guard_sources_.clear();
  last_guard_source_ = nullptr;
  if (!walks_.empty()) walks_.clear();
  if (!type_names_.empty()) type_names_.clear();
  if (!short_type_names_.empty()) short_type_names_.clear();
  if (!isinstance_memo_.empty()) isinstance_memo_.clear();
}

void EntryExtractor::ForgetEntry() {
  row_get_ = py::object();
  orig_guard_ = py::object();
  value_ = py::object();
  user_frame_ = py::object();
  has_value_ = -1;
  entry_cache_used_ = false;
}

std::string_view EntryExtractor::View(py::handle str) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(str.ptr(), &size);
  if (data == nullptr) throw py::error_already_set();
  keep_alive_.push_back(py::reinterpret_borrow<py::object>(str));
  return {data, static_cast<size_t>(size)};
}

std::string_view EntryExtractor::Store(std::string s) { return strings_.emplace_front(std::move(s)); }

Value EntryExtractor::EnumValue(int enum_index, std::string_view name) const {
  int ordinal = -1;
  if (enum_index == plan_.guard_type_enum) {
    auto it = plan_.guard_type_ordinal.find(name);
    if (it != plan_.guard_type_ordinal.end()) ordinal = it->second;
  } else if (enum_index >= 0) {
    ordinal = plan_.schema->enums()[enum_index].Find(name);
  }
  return Value{ordinal, 0, name};
}

Value EntryExtractor::SetValue(int enum_index, py::handle members) {
  Value v;
  std::string unknown;
  for (py::handle t : members) {
    const Value m = EnumValue(enum_index, View(t));
    if (m.i >= 0) v.bits |= uint64_t{1} << m.i;
    else unknown += std::string(kSetSeparator) + std::string(m.s);
  }
  if (!unknown.empty()) v.s = Store(unknown + kSetSeparator);
  return v;
}



EntryExtractor::GuardSourceInfo& EntryExtractor::GuardSourceOf(py::handle gs) {
  if (gs.ptr() == last_guard_source_) return *last_guard_source_info_;  // runs of one source are common
  auto it = guard_sources_.find(gs.ptr());
  if (it != guard_sources_.end()) {
    last_guard_source_ = gs.ptr();
    return *(last_guard_source_info_ = &it->second);
  }
  GuardSourceInfo info;
  keep_alive_.push_back(py::reinterpret_borrow<py::object>(gs));
  info.object = gs.ptr();
  info.name = View(GetAttr(gs, kAttrName));
  const int e = plan_.guard_source_enum;
  info.ordinal = e >= 0 ? plan_.schema->enums()[e].Find(info.name) : -1;
  GuardSourceInfo& stored = guard_sources_.emplace(gs.ptr(), info).first->second;
  last_guard_source_ = gs.ptr();
  last_guard_source_info_ = &stored;
  return stored;
}


bool EntryExtractor::Predicate(GuardSourceInfo& info, int pred) {
  if (info.preds[pred] >= 0) return info.preds[pred] != 0;
  py::object result = py::reinterpret_steal<py::object>(
      PyObject_CallMethodNoArgs(info.object, Interned(kGuardSourcePredicates[pred])));
  if (!result) throw py::error_already_set();
  info.preds[pred] = Truth(result) ? 1 : 0;
  return info.preds[pred] != 0;
}

// The walk of `src` to its root, memoized per chain node (sibling guards share prefixes).
const EntryExtractor::SourceWalk& EntryExtractor::WalkSource(py::handle src) {
  if (auto it = walks_.find(src.ptr()); it != walks_.end()) return it->second;
  // One bucket array per call, sized by the entries, not a rehash every few nodes.
  if (walks_.empty()) walks_.reserve(std::min<size_t>(2 * expected_entries_ + 8, 1024));
  // src, base, base.base, ...: nodes not walked before this call (usually one or two).
  std::vector<py::object>& chain = chain_;
  chain.clear();
  chain.push_back(py::reinterpret_borrow<py::object>(src));
  const SourceWalk* known = nullptr;
  while (static_cast<int>(chain.size()) <= kMaxSourceDepth) {
    py::object base = GetOptionalAttr(chain.back(), kAttrBase);
    if (!base) break;
    if (auto it = walks_.find(base.ptr()); it != walks_.end()) {
      known = &it->second;
      break;
    }
    chain.push_back(std::move(base));
  }
  // Fill from the deepest node up.
  SourceWalk below;
  if (known) below = *known;
  for (size_t k = chain.size(); k-- > 0;) {
    py::handle node = chain[k];
    SourceWalk w;
    w.kind = TypeName(Py_TYPE(node.ptr()));
    const bool is_root = k + 1 == chain.size() && known == nullptr;
    w.root = is_root ? w.kind : below.root;
    w.depth = is_root ? 0 : below.depth + 1;
    keep_alive_.push_back(py::reinterpret_borrow<py::object>(node));
    below = walks_.emplace(node.ptr(), w).first->second;
  }
  chain.clear();
  return walks_.at(src.ptr());
}

// Some node of the chain from `src` that has a `.base` has `.member == "_buffers"` (only
// value.is_buffer asks, and only for tensors that are not parameters: no memo).
bool EntryExtractor::ViaBuffers(py::handle src) {
  py::object node = py::reinterpret_borrow<py::object>(src);
  for (int depth = 0; depth <= kMaxSourceDepth; ++depth) {
    py::object base = GetOptionalAttr(node, kAttrBase);
    if (!base) return false;
    py::object member = GetOptionalAttr(node, kAttrMember);
    if (member && PyUnicode_Check(member.ptr()) && PyUnicode_CompareWithASCIIString(member.ptr(), "_buffers") == 0) {
      return true;
    }
    node = std::move(base);
  }
  return false;
}

// type(obj).__name__, valid for the call: a heap type's name object is kept alive (renaming
// the class frees the buffer tp_name points into); a static type's tp_name is static and
// __name__ is what follows its last dot.
std::string_view EntryExtractor::TypeName(PyTypeObject* type) {
  if (auto it = short_type_names_.find(type); it != short_type_names_.end()) return it->second;
  std::string_view name;
  if (type->tp_flags & Py_TPFLAGS_HEAPTYPE) {
    name = View(reinterpret_cast<PyHeapTypeObject*>(type)->ht_name);
  } else {
    name = type->tp_name;
    if (const size_t dot = name.rfind('.'); dot != std::string_view::npos) name.remove_prefix(dot + 1);
  }
  return short_type_names_.emplace(type, name).first->second;
}

std::string_view EntryExtractor::QualifiedTypeName(py::handle obj) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  if (auto it = type_names_.find(type); it != type_names_.end()) return it->second;
  py::handle t(type);
  std::string qual = py::str(GetAttr(t, kAttrModule)).cast<std::string>() + "." +
                     py::str(GetAttr(t, kAttrQualname)).cast<std::string>();
  keep_alive_.push_back(py::reinterpret_borrow<py::object>(t));
  return type_names_.emplace(type, Store(std::move(qual))).first->second;
}

// isinstance(value, torch class): from the types when they tell; else asked once per value
// object and call (guards often share a value, and a `__getattribute__` in Python, like
// transformers' configs have, costs more than the rest of the entry). The value is held for
// the call, so its address is not reused meanwhile.
bool EntryExtractor::ValueIs(py::handle value, TorchKind kind) {
  const int known = IsInstanceFromTypes(value, kind);
  if (known >= 0) return known == 1;
  auto [it, inserted] = isinstance_memo_.try_emplace(value.ptr(), std::array<int8_t, 3>{-1, -1, -1});
  if (inserted) keep_alive_.push_back(py::reinterpret_borrow<py::object>(value));
  int8_t& answer = it->second[static_cast<int>(kind)];
  if (answer < 0) answer = CallIsInstance(value, kind) ? 1 : 0;
  return answer == 1;
}

py::object& EntryExtractor::OrigGuard(py::handle entry) {
  if (!orig_guard_) {
    orig_guard_ = GetAttr(entry, kAttrOrigGuard);
    entry_cache_used_ = true;
  }
  return orig_guard_;
}

// entry.orig_guard.source: when that is torch's plain property (known_properties.h), the two
// attributes its getter reads, without calling it (a Python frame per entry); the second is
// itself a constant property on root sources (GlobalSource: GuardSource.GLOBAL).
py::object EntryExtractor::GuardSource(py::handle entry) {
  py::object& guard = OrigGuard(entry);
  if (IsAttributeChainProperty(Py_TYPE(guard.ptr()), "source", "originating_source", "guard_source")) {
    py::object source = GetAttr(guard, kAttrOriginatingSource);
    // A root source's guard_source is a property returning a GuardSource member.
    if (PyObject* member = ConstantPropertyValue(Py_TYPE(source.ptr()), Interned(kAttrGuardSource))) {
      return py::reinterpret_borrow<py::object>(member);
    }
    return GetAttr(source, kAttrGuardSource);
  }
  return GetAttr(guard, kAttrSource);
}

bool EntryExtractor::HasValue(py::handle entry) {
  if (has_value_ < 0) {
    has_value_ = TruthAttr(entry, kAttrHasValue) ? 1 : 0;
    entry_cache_used_ = true;
  }
  return has_value_ != 0;
}

py::object* EntryExtractor::EntryValue(py::handle entry) {
  if (!HasValue(entry)) return nullptr;
  if (!value_) {
    value_ = GetAttr(entry, kAttrValue);
    entry_cache_used_ = true;
  }
  return &value_;
}

// user_stack[-1].<filename|lineno|name> (which: 0, 1, 2), or an empty object.
py::object EntryExtractor::FrameAttr(py::handle entry, int which) {
  if (!user_frame_) {
    entry_cache_used_ = true;
    py::object stack = GetAttr(OrigGuard(entry), kAttrUserStack);
    if (stack.is_none() || py::len(stack) == 0) {
      user_frame_ = py::none();
    } else {
      user_frame_ = py::object(stack[py::int_(-1)]);
    }
  }
  if (user_frame_.is_none()) return py::object();
  static constexpr Attr kFrameAttrs[] = {kAttrFilename, kAttrLineno, kAttrName};
  return GetAttr(user_frame_, kFrameAttrs[which]);
}

void EntryExtractor::ExtractOne(FieldId id, py::handle entry, Value& out) {
  switch (id) {
    case FieldId::kName: out = Value{0, 0, View(GetAttr(entry, kAttrName))}; return;
    case FieldId::kGuardType: {
      // Usually a read inline and a pointer compare: torch passes the same few str objects
      // (GuardBuilder method names) in every call, and the plan remembers them.
      PyObject* type = Cache(kAttrGuardType).Peek(entry.ptr());
      py::object held;
      if (type == nullptr) {
        held = GetAttr(entry, kAttrGuardType);
        type = held.ptr();
      }
      for (const auto& [seen, value] : plan_.known_guard_types) {
        if (seen.ptr() == type) {  // held by the plan, so the pointer is still that string's
          out = value;
          return;
        }
      }
      py::object ref = held ? std::move(held) : py::reinterpret_borrow<py::object>(type);
      out = EnumValue(plan_.guard_type_enum, View(ref));
      if (PyUnicode_CheckExact(type) && plan_.known_guard_types.size() < ExtractorPlan::kKnownGuardTypes) {
        plan_.known_guard_types.emplace_back(std::move(ref), out);
      }
      return;
    }
    case FieldId::kDerivedGuardTypes: out = SetValue(plan_.guard_type_enum, GetAttr(entry, kAttrDerived)); return;
    case FieldId::kIsGlobal: out = BoolValue(TruthAttr(entry, kAttrIsGlobal)); return;
    case FieldId::kHasValue: out = BoolValue(HasValue(entry)); return;  // no need to fetch the value
    case FieldId::kGuardSource: {
      const GuardSourceInfo& gs = GuardSourceOf(GuardSource(entry));
      out = Value{gs.ordinal, 0, gs.name};
      return;
    }
    case FieldId::kGsIsLocal:
    case FieldId::kGsIsUnspecializedNNModule:
    case FieldId::kGsIsUnspecializedBuiltinNNModule:
    case FieldId::kGsIsSpecializedNNModule:
    case FieldId::kGsIsFsdpModule: {
      const int pred = static_cast<int>(id) - static_cast<int>(FieldId::kGsIsLocal);
      out = BoolValue(Predicate(GuardSourceOf(GuardSource(entry)), pred));
      return;
    }
    case FieldId::kSourceKind:
    case FieldId::kSourceRoot:
    case FieldId::kSourceDepth: {
      const SourceWalk& w = WalkSource(GetAttr(OrigGuard(entry), kAttrOriginatingSource));
      out = id == FieldId::kSourceDepth ? Value{w.depth, 0, {}}
                                        : Value{0, 0, id == FieldId::kSourceKind ? w.kind : w.root};
      return;
    }
    case FieldId::kValueType: {
      py::object* v = EntryValue(entry);
      out = v ? Value{0, 0, QualifiedTypeName(*v)} : Value{};
      return;
    }
    case FieldId::kValueIsTensor:
    case FieldId::kValueIsParameter:
    case FieldId::kValueIsModule:
    case FieldId::kValueIsBuffer: {
      py::object* v = EntryValue(entry);
      bool r = false;
      if (v != nullptr) {
        if (id == FieldId::kValueIsTensor) r = ValueIs(*v, TorchKind::kTensor);
        else if (id == FieldId::kValueIsParameter) r = ValueIs(*v, TorchKind::kParameter);
        else if (id == FieldId::kValueIsModule) r = ValueIs(*v, TorchKind::kModule);
        else r = ValueIs(*v, TorchKind::kTensor) && !ValueIs(*v, TorchKind::kParameter) &&
                 ViaBuffers(GetAttr(OrigGuard(entry), kAttrOriginatingSource));
      }
      out = BoolValue(r);
      return;
    }
    case FieldId::kUserFrameFile:
    case FieldId::kUserFrameFunction: {
      py::object s = FrameAttr(entry, id == FieldId::kUserFrameFile ? 0 : 2);
      out = Value{0, 0, s && PyUnicode_Check(s.ptr()) ? View(s) : std::string_view()};
      return;
    }
    case FieldId::kUserFrameLine: {
      py::object line = FrameAttr(entry, 1);
      out = Value{line && PyLong_Check(line.ptr()) ? line.cast<int64_t>() : 0, 0, {}};
      return;
    }
  }
}

void EntryExtractor::ExtractOtherSlot(size_t slot, py::handle entry, Value& out) {
  const FieldId id = plan_.ids[slot];
  if (id == FieldId::kFilter) {
    const auto& keep = filter_keep_.at(slot);
    out = BoolValue(entry_index_ < keep.size() && keep[entry_index_] == 0);  // true: the filter drops it
    return;
  }
  if (mappings_) {
    if (!PyMapping_Check(entry.ptr())) throw py::type_error("evaluate() rows must be mappings");
    if (!row_get_) {
      row_get_ = GetAttr(entry, kAttrGet);
      entry_cache_used_ = true;
    }
    // A plugin field the row does not give is extracted from the row's core fields.
    if (id == FieldId::kPlugin && row_get_(plan_.names[slot], py::none()).is_none()) {
      ExtractPluginField(slot, entry, out);
      return;
    }
    out = MappingValue(row_get_, plan_.names[slot], plan_.types[slot]);
    return;
  }
  if (id == FieldId::kPlugin) {
    ExtractPluginField(slot, entry, out);
  } else {
    ExtractOne(id, entry, out);
  }
}

std::vector<gp_value> EntryExtractor::ReadValues(const ExtractorPlan::PluginSlot& ps, py::handle entry,
                                                 bool mapping) {
  std::vector<gp_value> out;
  py::object get = mapping ? GetAttr(entry, kAttrGet) : py::object();
  for (size_t k = 0; k < ps.reads.size(); ++k) {
    Value v;
    if (mapping) v = MappingValue(get, ps.read_names[k], ps.read_types[k]);
    else ExtractOne(ps.reads[k], entry, v);
    out.push_back(ToAbi(v));
  }
  return out;
}

void EntryExtractor::ExtractPluginField(size_t slot, py::handle entry, Value& out) {
  const ExtractorPlan::PluginSlot& ps = plan_.plugin_slots[slot];
  const std::vector<gp_value> reads = ReadValues(ps, entry, mappings_);
  const gp_entry_view view =
      host_strings_.View(reads.data(), static_cast<uint32_t>(reads.size()), mappings_ ? nullptr : entry.ptr());
  gp_value result{};
  ps.field->plugin->Extract(static_cast<size_t>(ps.field->decl), view, result);
  out = FromAbi(result, ps.field->type, *plan_.schema);
  if (!out.s.empty()) out.s = host_strings_.Keep(out.s);
}

void EntryExtractor::RunFilters(py::handle entries, bool mappings) {
  const size_t n = static_cast<size_t>(PyTuple_GET_SIZE(entries.ptr()));
  filter_keep_.assign(plan_.ids.size(), {});
  for (size_t slot = 0; slot < plan_.ids.size(); ++slot) {
    if (plan_.ids[slot] != FieldId::kFilter) continue;
    const ExtractorPlan::PluginSlot& ps = plan_.plugin_slots[slot];
    std::vector<std::vector<gp_value>> reads(n);
    std::vector<gp_entry_view> views(n);
    for (size_t i = 0; i < n; ++i) {
      py::handle entry = PyTuple_GET_ITEM(entries.ptr(), static_cast<Py_ssize_t>(i));
      BeginEntry();
      reads[i] = ReadValues(ps, entry, mappings);
      views[i] = host_strings_.View(reads[i].data(), static_cast<uint32_t>(reads[i].size()),
                                    mappings ? nullptr : entry.ptr());
    }
    BeginEntry();
    std::vector<gp_value> params;
    for (const Constant& c : ps.params) params.push_back(ToAbi(Value{c.i, c.bits, c.s}));
    std::vector<uint8_t>& keep = filter_keep_[slot];
    keep.assign(n, 1);
    ps.filter->plugin->RunFilter(static_cast<size_t>(ps.filter->decl), params.data(), views.data(),
                                 static_cast<uint32_t>(n), keep.data());
  }
}

Value EntryExtractor::MappingValue(py::handle get, const std::string& name, const Type& type) {
  Value v = AbsentValue(type);
  py::object item = get(name, py::none());
  if (item.is_none()) return v;
  switch (type.kind) {
    case TypeKind::kBool: v = BoolValue(item.cast<bool>()); break;
    case TypeKind::kInt: v.i = item.cast<int64_t>(); break;
    case TypeKind::kString: v.s = View(item); break;
    case TypeKind::kEnum: v = EnumValue(type.enum_index, View(item)); break;
    case TypeKind::kEnumSet: v = SetValue(type.enum_index, item); break;
    case TypeKind::kError: break;
  }
  return v;
}

}  // namespace guardpolicy::python
