// entry_extractor.cpp: reading GuardFilterEntry fields through the CPython API.
#include "entry_extractor.h"

#include <stdexcept>

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

// GuardSource predicate methods, in GuardSourceInfo::preds order.
constexpr const char* kGuardSourcePredicates[] = {
    "is_local", "is_unspecialized_nn_module", "is_unspecialized_builtin_nn_module",
    "is_specialized_nn_module", "is_fsdp_module"};

constexpr int kMaxSourceDepth = 1000;  // a `.base` chain longer than this is malformed

// torch.Tensor, torch.nn.Parameter, torch.nn.Module: imported on first use, never freed
// (they live as long as the interpreter).
struct TorchTypes {
  PyObject* tensor = nullptr;
  PyObject* parameter = nullptr;
  PyObject* module = nullptr;
};
TorchTypes& Torch() {
  static TorchTypes types;
  return types;
}

Value BoolValue(bool b) { return Value{b ? 1 : 0, 0, {}}; }

// What an absent field reads as: false, 0, "", no enum member (ordinal -1), empty set.
Value AbsentValue(const Type& t) { return Value{t.kind == TypeKind::kEnum ? -1 : 0, 0, {}}; }

bool IsInstance(py::handle obj, PyObject* type) {
  const int r = PyObject_IsInstance(obj.ptr(), type);
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

}  // namespace

EntryExtractor::EntryExtractor(const Program& program, const Schema& schema) : schema_(schema) {
  for (const std::string& field : program.fields) {
    bool found = false;
    for (const auto& [name, id] : kFieldIds) {
      if (field == name) {
        ids_.push_back(id);
        found = true;
      }
    }
    if (!found) throw std::invalid_argument("no extractor for field `" + field + "`");
  }
  guard_type_enum_ = schema.FindEnum("GuardType");
  guard_source_enum_ = schema.FindEnum("GuardSource");
  if (guard_type_enum_ >= 0) {
    const auto& members = schema.enums()[guard_type_enum_].members;
    for (size_t i = 0; i < members.size(); ++i) guard_type_ordinal_[members[i]] = static_cast<int>(i);
  }
}

void EntryExtractor::Reset() {
  orig_guard_ = py::object();
  value_ = py::object();
  user_frame_ = py::object();
  keep_alive_.clear();
  strings_.clear();
  guard_sources_.clear();
}

std::string_view EntryExtractor::View(py::handle str) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(str.ptr(), &size);
  if (data == nullptr) throw py::error_already_set();
  keep_alive_.push_back(py::reinterpret_borrow<py::object>(str));
  return {data, static_cast<size_t>(size)};
}

std::string_view EntryExtractor::Store(std::string s) {
  strings_.push_back(std::move(s));
  return strings_.back();
}

Value EntryExtractor::EnumValue(int enum_index, std::string_view name) const {
  int ordinal = -1;
  if (enum_index == guard_type_enum_) {
    auto it = guard_type_ordinal_.find(std::string(name));
    if (it != guard_type_ordinal_.end()) ordinal = it->second;
  } else if (enum_index >= 0) {
    ordinal = schema_.enums()[enum_index].Find(name);
  }
  return Value{ordinal, 0, name};
}

void EntryExtractor::LoadTorchTypes() {
  TorchTypes& t = Torch();
  if (t.tensor != nullptr) return;
  py::module_ torch = py::module_::import("torch");
  t.tensor = py::object(torch.attr("Tensor")).release().ptr();
  t.parameter = py::object(torch.attr("nn").attr("Parameter")).release().ptr();
  t.module = py::object(torch.attr("nn").attr("Module")).release().ptr();
}

const EntryExtractor::GuardSourceInfo& EntryExtractor::GuardSourceOf(py::handle gs) {
  auto it = guard_sources_.find(gs.ptr());
  if (it != guard_sources_.end()) return it->second;
  GuardSourceInfo info;
  keep_alive_.push_back(py::reinterpret_borrow<py::object>(gs));
  info.name = View(gs.attr("name"));
  info.ordinal = guard_source_enum_ >= 0 ? schema_.enums()[guard_source_enum_].Find(info.name) : -1;
  for (int i = 0; i < 5; ++i) info.preds[i] = gs.attr(kGuardSourcePredicates[i])().cast<bool>();
  return guard_sources_.emplace(gs.ptr(), info).first->second;
}

EntryExtractor::SourceWalk EntryExtractor::WalkSource(py::handle src) {
  SourceWalk w;
  w.kind = Py_TYPE(src.ptr())->tp_name;
  py::object cur = py::reinterpret_borrow<py::object>(src);
  while (w.depth < kMaxSourceDepth && py::hasattr(cur, "base")) {
    if (py::hasattr(cur, "member")) {
      py::object member = cur.attr("member");
      if (py::isinstance<py::str>(member) && View(member) == "_buffers") w.via_buffers = true;
    }
    cur = cur.attr("base");
    ++w.depth;
  }
  keep_alive_.push_back(cur);
  w.root = Py_TYPE(cur.ptr())->tp_name;
  return w;
}

void EntryExtractor::Extract(py::handle entry, Value* out) {
  orig_guard_ = py::object();
  value_ = py::object();
  user_frame_ = py::object();
  have_walk_ = false;
  for (size_t slot = 0; slot < ids_.size(); ++slot) ExtractOne(ids_[slot], entry, out[slot]);
}

void EntryExtractor::ExtractOne(FieldId id, py::handle entry, Value& out) {
  auto orig_guard = [&]() -> py::object& {
    if (!orig_guard_) orig_guard_ = entry.attr("orig_guard");
    return orig_guard_;
  };
  auto value = [&]() -> py::object* {  // null when has_value is false
    if (!entry.attr("has_value").cast<bool>()) return nullptr;
    if (!value_) value_ = entry.attr("value");
    return &value_;
  };
  auto walk = [&]() -> const SourceWalk& {
    if (!have_walk_) {
      walk_ = WalkSource(orig_guard().attr("originating_source"));
      have_walk_ = true;
    }
    return walk_;
  };
  auto frame_attr = [&](const char* attr) -> py::object {
    if (!user_frame_) {
      py::object stack = orig_guard().attr("user_stack");
      if (stack.is_none() || py::len(stack) == 0) {
        user_frame_ = py::none();
      } else {
        user_frame_ = py::object(stack[py::int_(-1)]);
      }
    }
    return user_frame_.is_none() ? py::object() : user_frame_.attr(attr);
  };
  switch (id) {
    case FieldId::kName: out = Value{0, 0, View(entry.attr("name"))}; return;
    case FieldId::kGuardType: out = EnumValue(guard_type_enum_, View(entry.attr("guard_type"))); return;
    case FieldId::kDerivedGuardTypes:
      out = SetValue(guard_type_enum_, entry.attr("derived_guard_types"));
      return;
    case FieldId::kIsGlobal: out = BoolValue(entry.attr("is_global").cast<bool>()); return;
    case FieldId::kHasValue: out = BoolValue(entry.attr("has_value").cast<bool>()); return;
    case FieldId::kGuardSource: {
      const GuardSourceInfo& gs = GuardSourceOf(orig_guard().attr("source"));
      out = Value{gs.ordinal, 0, gs.name};
      return;
    }
    case FieldId::kGsIsLocal:
    case FieldId::kGsIsUnspecializedNNModule:
    case FieldId::kGsIsUnspecializedBuiltinNNModule:
    case FieldId::kGsIsSpecializedNNModule:
    case FieldId::kGsIsFsdpModule: {
      const int pred = static_cast<int>(id) - static_cast<int>(FieldId::kGsIsLocal);
      out = BoolValue(GuardSourceOf(orig_guard().attr("source")).preds[pred]);
      return;
    }
    case FieldId::kSourceKind: out = Value{0, 0, walk().kind}; return;
    case FieldId::kSourceRoot: out = Value{0, 0, walk().root}; return;
    case FieldId::kSourceDepth: out = Value{walk().depth, 0, {}}; return;
    case FieldId::kValueType: {
      py::object* v = value();
      if (v == nullptr) {
        out = Value{};
        return;
      }
      py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(v->ptr()));
      std::string qual = py::str(type.attr("__module__")).cast<std::string>() + "." +
                         py::str(type.attr("__qualname__")).cast<std::string>();
      out = Value{0, 0, Store(std::move(qual))};
      return;
    }
    case FieldId::kValueIsTensor:
    case FieldId::kValueIsParameter:
    case FieldId::kValueIsModule:
    case FieldId::kValueIsBuffer: {
      py::object* v = value();
      if (v == nullptr) {
        out = BoolValue(false);
        return;
      }
      LoadTorchTypes();
      const TorchTypes& t = Torch();
      bool r = false;
      if (id == FieldId::kValueIsTensor) r = IsInstance(*v, t.tensor);
      else if (id == FieldId::kValueIsParameter) r = IsInstance(*v, t.parameter);
      else if (id == FieldId::kValueIsModule) r = IsInstance(*v, t.module);
      else r = IsInstance(*v, t.tensor) && !IsInstance(*v, t.parameter) && walk().via_buffers;
      out = BoolValue(r);
      return;
    }
    case FieldId::kUserFrameFile:
    case FieldId::kUserFrameFunction: {
      py::object s = frame_attr(id == FieldId::kUserFrameFile ? "filename" : "name");
      out = Value{0, 0, s && py::isinstance<py::str>(s) ? View(s) : std::string_view()};
      return;
    }
    case FieldId::kUserFrameLine: {
      py::object line = frame_attr("lineno");
      out = Value{line && py::isinstance<py::int_>(line) ? line.cast<int64_t>() : 0, 0, {}};
      return;
    }
  }
}

void EntryExtractor::ExtractMapping(py::handle mapping, Value* out) {
  if (!PyMapping_Check(mapping.ptr())) throw py::type_error("evaluate() rows must be mappings");
  py::object get = mapping.attr("get");
  for (size_t slot = 0; slot < ids_.size(); ++slot) {
    const char* name = kFieldIds[static_cast<int>(ids_[slot])].first;
    const Type type = schema_.fields()[schema_.FindField(name)].type;
    Value& v = out[slot];
    v = AbsentValue(type);
    py::object item = get(name, py::none());
    if (item.is_none()) continue;
    switch (type.kind) {
      case TypeKind::kBool: v = BoolValue(item.cast<bool>()); break;
      case TypeKind::kInt: v.i = item.cast<int64_t>(); break;
      case TypeKind::kString: v.s = View(item); break;
      case TypeKind::kEnum: v = EnumValue(type.enum_index, View(item)); break;
      case TypeKind::kEnumSet: v = SetValue(type.enum_index, item); break;
      case TypeKind::kError: break;
    }
  }
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

}  // namespace guardpolicy::python
