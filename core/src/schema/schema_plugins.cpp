// schema_plugins.cpp: adding a plugin's declarations to a schema (the checks that need it).
#include <fmt/format.h>

#include "guardpolicy/plugin.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {
namespace {

std::string FirstSegment(const std::string& dotted) { return dotted.substr(0, dotted.find('.')); }

}  // namespace

const Plugin* Schema::FindPlugin(std::string_view ns) const {
  for (const auto& p : plugins_) {
    if (p->name() == ns) return p.get();
  }
  return nullptr;
}

Schema Schema::WithPlugin(std::shared_ptr<const Plugin> plugin) const {
  const std::string& ns = plugin->name();
  auto bad = [&](const std::string& why) {
    throw PluginError(fmt::format("{}: plugin `{}`: {}", plugin->origin(), ns, why));
  };
  if (FindPlugin(ns)) bad("a plugin with this name is already loaded");
  if (ns == "builtin" && plugin->origin() != "builtin") bad("the namespace `builtin` is reserved for the built-in filters");
  for (const FieldInfo& f : fields_) {
    if (f.plugin == nullptr && FirstSegment(f.name) == ns) {
      bad(fmt::format("the name clashes with the schema field `{}`", f.name));
    }
  }
  auto type_of = [&](const std::string& what, const std::string& type) {
    const Type t = ParseType(type);
    if (t.is_error()) bad(fmt::format("{}: unknown type `{}` (bool, int, string, an enum such as GuardType, "
                                      "or set:<Enum>)", what, type));
    return t;
  };
  auto reads_of = [&](const std::string& what, const std::vector<std::string>& reads) {
    std::vector<int> out;
    for (const std::string& r : reads) {
      const int i = FindField(r);
      if (i < 0 || fields_[i].plugin != nullptr) bad(fmt::format("{}: reads `{}`, which is not a core schema field", what, r));
      out.push_back(i);
    }
    return out;
  };

  Schema s = *this;
  for (size_t i = 0; i < plugin->fields().size(); ++i) {
    const PluginField& d = plugin->fields()[i];
    FieldInfo f;
    f.name = ns + "." + d.name;
    f.type = type_of("field `" + f.name + "`", d.type);
    f.doc = d.doc;
    f.from = fmt::format("plugin `{}` {} ({})", ns, plugin->version(), plugin->origin());
    f.plugin = plugin;
    f.decl = static_cast<int>(i);
    f.reads = reads_of("field `" + f.name + "`", d.reads);
    s.field_index_[f.name] = static_cast<int>(s.fields_.size());
    s.fields_.push_back(std::move(f));
  }
  for (size_t i = 0; i < plugin->functions().size(); ++i) {
    const PluginFunction& d = plugin->functions()[i];
    FunctionInfo fn;
    fn.name = ns + "." + d.name;
    for (size_t k = 0; k < d.arg_types.size(); ++k) {
      fn.args.push_back(type_of(fmt::format("function `{}` argument {}", fn.name, k + 1), d.arg_types[k]));
    }
    fn.result = type_of("function `" + fn.name + "` result", d.result_type);
    if (fn.result.kind != TypeKind::kBool && fn.result.kind != TypeKind::kInt) {
      bad(fmt::format("function `{}`: result type `{}` is not bool or int (ABI 1.0)", fn.name, d.result_type));
    }
    fn.doc = d.doc;
    fn.plugin = plugin;
    fn.decl = static_cast<int>(i);
    s.functions_.push_back(std::move(fn));
  }
  for (size_t i = 0; i < plugin->filters().size(); ++i) {
    const PluginFilter& d = plugin->filters()[i];
    FunctionInfo fn;
    fn.name = ns + "." + d.name;
    for (const PluginParam& p : d.params) {
      const Type t = type_of(fmt::format("filter `{}` parameter `{}`", fn.name, p.name), p.type);
      if (t.kind != TypeKind::kBool && t.kind != TypeKind::kInt && t.kind != TypeKind::kString) {
        bad(fmt::format("filter `{}` parameter `{}`: type `{}` is not bool, int or string", fn.name, p.name, p.type));
      }
      fn.args.push_back(t);
      fn.arg_names.push_back(p.name);
      fn.arg_defaults.push_back(p.has_default ? std::optional<Literal>(DefaultLiteral(p)) : std::nullopt);
    }
    fn.result = Type::Bool();
    fn.doc = d.doc;
    fn.is_filter = true;
    fn.plugin = plugin;
    fn.decl = static_cast<int>(i);
    fn.reads = reads_of("filter `" + fn.name + "`", d.reads);
    s.functions_.push_back(std::move(fn));
  }
  s.plugins_.push_back(std::move(plugin));
  return s;
}

}  // namespace guardpolicy
