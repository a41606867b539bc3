// source_path.cpp: walking a torch._dynamo source chain into `path` / `module_path`.
#include "source_path.h"

#include "py_attrs.h"

#include <string_view>
#include <utility>
#include <vector>

namespace guardpolicy::python {
namespace {

namespace py = pybind11;

constexpr int kMaxSourceDepth = 1000;  // as the extractor's: a longer `.base` chain is malformed

enum Attr : int {
  kBase, kMember, kLocalName, kGlobalName, kIndex, kIndexIsSlice, kDerefed, kField, kIdxKey, kName, kAttrCount,
};
constexpr const char* kAttrNames[kAttrCount] = {
    "base", "member", "local_name", "global_name", "index", "index_is_slice", "is_derefed_cell_contents",
    "field", "idx_key", "__name__"};

PyObject* Interned(Attr a) {
  static PyObject** names = InternNames(kAttrNames, kAttrCount);
  return names[a];
}

py::object GetAttr(py::handle obj, Attr a) { return python::GetAttr(obj, Interned(a)); }
py::object GetOptionalAttr(py::handle obj, Attr a) { return python::GetOptionalAttr(obj, Interned(a)); }

// The UTF-8 text of a str into `out`; false (and `out` untouched) for anything else.
bool Text(py::handle obj, std::string& out) {
  if (!obj || !PyUnicode_Check(obj.ptr())) return false;
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
  if (data == nullptr) throw py::error_already_set();
  out.assign(data, static_cast<size_t>(size));
  return true;
}

// repr(key) for the literal keys torch puts in a source (str, int, bool, None, float,
// bytes); false for anything else (a ConstDictKeySource, a slice's reduction, ...).
bool KeyRepr(py::handle key, std::string& out) {
  PyObject* k = key.ptr();
  if (!(PyUnicode_Check(k) || PyLong_Check(k) || PyFloat_Check(k) || PyBytes_Check(k) || k == Py_None)) {
    return false;
  }
  py::object r = py::reinterpret_steal<py::object>(PyObject_Repr(k));
  if (!r) throw py::error_already_set();
  return Text(r, out);
}

bool IsContainer(std::string_view member) {
  return member == "_modules" || member == "_parameters" || member == "_buffers";
}

// Appends `.part` (no dot at the start of a path rooted at the frame's `self`).
void AppendAttr(std::string& path, std::string_view part) {
  if (!path.empty()) path += '.';
  path += part;
}

}  // namespace

SourcePaths::Kind SourcePaths::KindOf(py::handle node) {
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(node.ptr()));
  auto it = kinds_.find(type);
  if (it != kinds_.end()) return it->second;
  static constexpr std::pair<std::string_view, Kind> kKinds[] = {
      {"LocalSource", Kind::kLocal},
      {"GlobalSource", Kind::kGlobal},
      {"AttrSource", Kind::kAttr},
      {"ParamBufferSource", Kind::kAttr},
      {"UnspecializedParamBufferSource", Kind::kAttr},
      {"CellContentsSource", Kind::kAttr},
      {"GenericAttrSource", Kind::kAttr},
      {"GradSource", Kind::kAttr},
      {"NNModuleSource", Kind::kModule},
      {"UnspecializedNNModuleSource", Kind::kModule},
      {"UnspecializedBuiltinNNModuleSource", Kind::kModule},
      {"FSDPNNModuleSource", Kind::kModule},
      {"SkipGuardSource", Kind::kSame},
      {"OptimizerSource", Kind::kSame},
      {"DictGetItemSource", Kind::kDictItem},
      {"DictSubclassGetItemSource", Kind::kDictItem},
      {"GetItemSource", Kind::kItem},
      {"ListGetItemSource", Kind::kItem},
      {"ClosureSource", Kind::kClosure},
      {"CodeSource", Kind::kCode},
      {"DefaultsSource", Kind::kDefaults},
  };
  std::string name;
  Kind kind = Kind::kOther;
  if (Text(GetAttr(py::handle(type), kName), name)) {
    for (const auto& [n, k] : kKinds) {
      if (name == n) kind = k;
    }
  }
  kinds_.emplace(type, kind);
  return kind;
}

SourcePaths::Paths SourcePaths::Of(py::handle originating_source) {
  std::vector<py::object> chain;  // leaf first
  chain.push_back(py::reinterpret_borrow<py::object>(originating_source));
  while (static_cast<int>(chain.size()) <= kMaxSourceDepth) {
    py::object base = GetOptionalAttr(chain.back(), kBase);
    if (!base || base.is_none()) break;
    chain.push_back(std::move(base));
  }
  std::vector<Kind> kinds;
  kinds.reserve(chain.size());
  for (const py::object& node : chain) kinds.push_back(KindOf(node));

  Paths out;
  const size_t n = chain.size();
  const py::object& root = chain[n - 1];
  std::string path, text;
  if (kinds[n - 1] == Kind::kLocal) {
    if (!Text(GetAttr(root, kLocalName), text)) return out;
    py::object derefed = GetOptionalAttr(root, kDerefed);
    if (derefed && Truth(derefed)) {
      path = "closure:" + text;
    } else if (!(text == "self" && n > 1 && kinds[n - 2] == Kind::kModule)) {
      path = "input:" + text;
    }  // else: the frame's `self` module, the root of the module tree ("")
  } else if (kinds[n - 1] == Kind::kGlobal) {
    if (!Text(GetAttr(root, kGlobalName), text)) return out;
    path = "global:" + text;
  } else {
    return out;  // ambient (GlobalStateSource, ShapeEnvSource, ...) or another root
  }

  // From the root's first link to the leaf; i counts down (chain is leaf first).
  for (size_t k = n - 1; k-- > 0;) {
    const py::object& node = chain[k];
    switch (kinds[k]) {
      case Kind::kModule:
        out.module_path = path;
        continue;
      case Kind::kSame:
        continue;
      case Kind::kAttr: {
        if (!Text(GetAttr(node, kMember), text)) return out;
        // module._modules['x'] / ._parameters['x'] / ._buffers['x'] -> .x
        if (IsContainer(text) && kinds[k + 1] == Kind::kModule && k > 0 && kinds[k - 1] == Kind::kDictItem) {
          std::string key;
          if (Text(GetAttr(chain[k - 1], kIndex), key)) {
            AppendAttr(path, key);
            --k;
            continue;
          }
        }
        AppendAttr(path, text);
        continue;
      }
      case Kind::kDictItem:
      case Kind::kItem: {
        if (kinds[k] == Kind::kItem) {
          py::object is_slice = GetOptionalAttr(node, kIndexIsSlice);
          if (is_slice && Truth(is_slice)) return out;
        }
        if (!KeyRepr(GetAttr(node, kIndex), text)) return out;
        path += "[" + text + "]";
        continue;
      }
      case Kind::kClosure:
        AppendAttr(path, "__closure__");
        continue;
      case Kind::kCode:
        AppendAttr(path, "__code__");
        continue;
      case Kind::kDefaults: {
        std::string field, key;
        if (!Text(GetAttr(node, kField), field) || !KeyRepr(GetAttr(node, kIdxKey), key)) return out;
        AppendAttr(path, field);
        path += "[" + key + "]";
        continue;
      }
      case Kind::kLocal:
      case Kind::kGlobal:
      case Kind::kOther:
        return out;  // not a link we can name: path "", module_path as far as it got
    }
  }
  out.path = std::move(path);
  return out;
}

}  // namespace guardpolicy::python
