// entry_extractor.cpp: reading GuardFilterEntry fields through the CPython API: an entry's
// schema fields, the per-entry and per-call caches they share, and the dispatch of the other
// slots (plugin fields and filters: entry_extractor_plugins.cpp; mapping rows:
// entry_extractor_mappings.cpp).
#include "entry_extractor.h"

#include <algorithm>
#include <stdexcept>

#include "py_attrs.h"

namespace guardpolicy::python {
namespace {

constexpr std::string_view kGuardSourcePrefix = "guard_source.";

// Attribute names, interned once for the life of the interpreter.
enum Attr : int {
  kAttrName, kAttrGuardType, kAttrDerived, kAttrIsGlobal, kAttrHasValue, kAttrValue, kAttrOrigGuard,
  kAttrSource, kAttrOriginatingSource, kAttrBase, kAttrMember, kAttrUserStack, kAttrFilename,
  kAttrLineno, kAttrModule, kAttrQualname, kAttrGet, kAttrDunderName, kAttrCodeParts, kAttrCodeList,
  kAttrCount,
};
constexpr const char* kAttrNames[kAttrCount] = {
    "name", "guard_type", "derived_guard_types", "is_global", "has_value", "value", "orig_guard",
    "source", "originating_source", "base", "member", "user_stack", "filename", "lineno",
    "__module__", "__qualname__", "get", "__name__", "code_parts", "code_list"};

PyObject* Interned(Attr a) {
  static PyObject** names = InternNames(kAttrNames, kAttrCount);
  return names[a];
}

py::object GetAttr(py::handle obj, Attr a) { return python::GetAttr(obj, Interned(a)); }
py::object GetOptionalAttr(py::handle obj, Attr a) { return python::GetOptionalAttr(obj, Interned(a)); }

bool TruthAttr(py::handle obj, Attr a) { return Truth(GetAttr(obj, a)); }

// The method `guard_source.<method>` calls (interned, by FieldId), or nullptr for a field
// without that prefix.
PyObject* PredicateMethod(FieldId id) {
  static const std::array<PyObject*, kSchemaFieldCount> methods = [] {
    std::array<PyObject*, kSchemaFieldCount> out{};
    const std::vector<std::string> names = SchemaFieldNames();  // by FieldId
    for (size_t field = 0; field < names.size(); ++field) {
      const std::string_view n(names[field]);
      if (n.substr(0, kGuardSourcePrefix.size()) == kGuardSourcePrefix) {
        const char* method = names[field].c_str() + kGuardSourcePrefix.size();
        out[field] = PyUnicode_InternFromString(method);  // never freed
      }
    }
    return out;
  }();
  return methods[static_cast<size_t>(id)];
}

constexpr int kMaxSourceDepth = 1000;  // a `.base` chain longer than this is malformed

}  // namespace

py::object EntryExtractor::RowGet(py::handle row) { return GetAttr(row, kAttrGet); }

void EntryExtractor::Reset() {
  BeginEntry();
  host_strings_.Clear();
  filter_keep_.clear();
  keep_alive_.clear();
  strings_.clear();
  guard_sources_.clear();
  source_paths_.Clear();
  for (py::object& cls : torch_classes_) cls = py::object();
}

void EntryExtractor::ForgetEntry() {
  row_get_ = py::object();
  orig_guard_ = py::object();
  value_ = py::object();
  user_frame_ = py::object();
  has_value_ = -1;
  have_paths_ = false;
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

std::vector<std::string_view> EntryExtractor::SetMembers(FieldId id, py::handle entry) {
  if (id != FieldId::kDerivedGuardTypes) throw std::logic_error("SetMembers: not an enum-set field");
  std::vector<std::string_view> names;
  for (py::handle t : GetAttr(entry, kAttrDerived)) names.push_back(View(t));
  return names;
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
  auto it = guard_sources_.find(gs.ptr());
  if (it != guard_sources_.end()) return it->second;
  GuardSourceInfo info;
  info.preds.fill(-1);
  keep_alive_.push_back(py::reinterpret_borrow<py::object>(gs));
  info.object = gs.ptr();
  info.name = View(GetAttr(gs, kAttrName));
  const int e = plan_.guard_source_enum;
  info.ordinal = e >= 0 ? plan_.schema->enums()[e].Find(info.name) : -1;
  return guard_sources_.emplace(gs.ptr(), info).first->second;
}

bool EntryExtractor::Predicate(GuardSourceInfo& info, FieldId id) {
  int8_t& answer = info.preds[static_cast<size_t>(id)];
  if (answer >= 0) return answer != 0;
  py::object result = py::reinterpret_steal<py::object>(PyObject_CallMethodNoArgs(info.object, PredicateMethod(id)));
  if (!result) throw py::error_already_set();
  answer = Truth(result) ? 1 : 0;
  return answer != 0;
}

// type(src).__name__, the root of its `.base` chain and the number of links to it.
EntryExtractor::SourceWalk EntryExtractor::WalkSource(py::handle src) {
  SourceWalk w;
  w.kind = TypeName(src);
  py::object node = py::reinterpret_borrow<py::object>(src);
  while (w.depth < kMaxSourceDepth) {
    py::object base = GetOptionalAttr(node, kAttrBase);
    if (!base) break;
    node = std::move(base);
    ++w.depth;
  }
  w.root = w.depth == 0 ? w.kind : TypeName(node);
  return w;
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

const SourcePaths::Paths& EntryExtractor::PathsOf(py::handle entry) {
  if (!have_paths_) {
    paths_ = source_paths_.Of(GetAttr(OrigGuard(entry), kAttrOriginatingSource));
    have_paths_ = true;
    entry_cache_used_ = true;
  }
  return paths_;
}

std::string_view EntryExtractor::TypeName(py::handle obj) {
  return View(GetAttr(py::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))), kAttrDunderName));
}

std::string_view EntryExtractor::QualifiedTypeName(py::handle obj) {
  py::handle type(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())));
  return Store(py::str(GetAttr(type, kAttrModule)).cast<std::string>() + "." +
               py::str(GetAttr(type, kAttrQualname)).cast<std::string>());
}

bool EntryExtractor::IsInstance(py::handle value, TorchClass cls) {
  py::object& klass = torch_classes_[static_cast<int>(cls)];
  if (!klass) {
    py::module_ torch = py::module_::import("torch");
    klass = cls == TorchClass::kTensor      ? torch.attr("Tensor")
            : cls == TorchClass::kParameter ? torch.attr("nn").attr("Parameter")
                                            : torch.attr("nn").attr("Module");
  }
  const int r = PyObject_IsInstance(value.ptr(), klass.ptr());
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

py::object& EntryExtractor::OrigGuard(py::handle entry) {
  if (!orig_guard_) {
    orig_guard_ = GetAttr(entry, kAttrOrigGuard);
    entry_cache_used_ = true;
  }
  return orig_guard_;
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

// The guard's code parts, each once, joined by "\n": `entry.code_parts` where torch has it
// (2.15), else `entry.orig_guard.code_list` (None for a guard with no Python code).
std::string_view EntryExtractor::Code(py::handle entry) {
  py::object parts = GetOptionalAttr(entry, Interned(kAttrCodeParts));
  if (!parts) parts = GetOptionalAttr(OrigGuard(entry), Interned(kAttrCodeList));
  if (!parts || parts.is_none()) return {};
  std::string code;
  std::vector<std::string_view> seen;
  for (py::handle part : parts) {
    const std::string_view text = View(py::str(part));
    if (std::find(seen.begin(), seen.end(), text) != seen.end()) continue;
    seen.push_back(text);
    if (!code.empty()) code += '\n';
    code += text;
  }
  return code.empty() ? std::string_view() : Store(std::move(code));
}

void EntryExtractor::ExtractOne(FieldId id, py::handle entry, Value& out) {
  switch (id) {
    case FieldId::kName: out = Value{0, 0, View(GetAttr(entry, kAttrName))}; return;
    case FieldId::kGuardType: out = EnumValue(plan_.guard_type_enum, View(GetAttr(entry, kAttrGuardType))); return;
    case FieldId::kDerivedGuardTypes: out = SetValue(plan_.guard_type_enum, GetAttr(entry, kAttrDerived)); return;
    case FieldId::kIsGlobal: out = BoolValue(TruthAttr(entry, kAttrIsGlobal)); return;
    case FieldId::kHasValue: out = BoolValue(HasValue(entry)); return;  // no need to fetch the value
    case FieldId::kGuardSource: {
      const GuardSourceInfo& gs = GuardSourceOf(GetAttr(OrigGuard(entry), kAttrSource));
      out = Value{gs.ordinal, 0, gs.name};
      return;
    }
    case FieldId::kGuardSourceIsLocal:
    case FieldId::kGuardSourceIsUnspecializedNnModule:
    case FieldId::kGuardSourceIsUnspecializedBuiltinNnModule:
    case FieldId::kGuardSourceIsSpecializedNnModule:
    case FieldId::kGuardSourceIsFsdpModule:
      out = BoolValue(Predicate(GuardSourceOf(GetAttr(OrigGuard(entry), kAttrSource)), id));
      return;
    case FieldId::kSourceKind:
    case FieldId::kSourceRoot:
    case FieldId::kSourceDepth: {
      const SourceWalk w = WalkSource(GetAttr(OrigGuard(entry), kAttrOriginatingSource));
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
        if (id == FieldId::kValueIsTensor) r = IsInstance(*v, TorchClass::kTensor);
        else if (id == FieldId::kValueIsParameter) r = IsInstance(*v, TorchClass::kParameter);
        else if (id == FieldId::kValueIsModule) r = IsInstance(*v, TorchClass::kModule);
        else r = IsInstance(*v, TorchClass::kTensor) && !IsInstance(*v, TorchClass::kParameter) &&
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
    case FieldId::kPath:
    case FieldId::kModulePath: {
      const SourcePaths::Paths& p = PathsOf(entry);
      const std::string& s = id == FieldId::kPath ? p.path : p.module_path;
      out = Value{0, 0, s.empty() ? std::string_view() : Store(s)};
      return;
    }
    case FieldId::kCode: out = Value{0, 0, Code(entry)}; return;
    case FieldId::kPlugin:
    case FieldId::kFilter:
      break;  // plugin slots: ExtractOtherSlot
  }
  throw std::logic_error("ExtractOne: not a schema field");
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
      row_get_ = RowGet(entry);
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

}  // namespace guardpolicy::python
