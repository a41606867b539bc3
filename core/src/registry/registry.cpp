// registry.cpp: listing and returning filters by name.
#include "guardpolicy/registry.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/plugin.h"
#include "guardpolicy/printer.h"

namespace guardpolicy {
namespace {

[[noreturn]] void Fail(const char* code, const std::string& message, const std::string& help = "") {
  Diagnostics d;
  d.Error(code, {}, message, help);
  throw PolicyError(std::move(d));
}

// `unsafe policy <name> { use <filter>(<params>) }`: the filter as a policy.
std::string FilterPolicySource(const std::string& filter, const ParamValues& params) {
  std::string args;
  for (const auto& [name, value] : params) args += fmt::format("{}{} = {}", args.empty() ? "" : ", ", name, PrintLiteral(value));
  std::string policy = filter;
  std::replace(policy.begin(), policy.end(), '.', '_');
  return fmt::format("guardpolicy 1\nunsafe policy {} {{\n  use {}({})\n}}\n", policy, filter, args);
}

// A bound parameter's type as far as its literal tells (enum parameters read as string).
Type LiteralType(const Literal& lit) {
  switch (lit.kind) {
    case Literal::Kind::kBool: return Type::Bool();
    case Literal::Kind::kInt: return Type::Int();
    case Literal::Kind::kString: break;
  }
  return Type::String();
}

// The names and literal kinds of `params` against filter `f`'s parameters (GP4002), so a
// mistake is reported against what the caller wrote, not the generated `use` line.
void CheckFilterParams(const FunctionInfo& f, const ParamValues& params) {
  for (const auto& [name, value] : params) {
    auto it = std::find(f.arg_names.begin(), f.arg_names.end(), name);
    if (it == f.arg_names.end()) {
      const std::string best = ClosestMatch(name, f.arg_names);
      Fail(codes::kParamValue, fmt::format("filter `{}` has no parameter `{}`", f.name, name),
           best.empty() ? "" : fmt::format("did you mean `{}`?", best));
    }
    const Type& type = f.args[static_cast<size_t>(it - f.arg_names.begin())];
    if (LiteralType(value) != type) {
      Fail(codes::kParamValue, fmt::format("parameter `{}` of filter `{}` needs {} value", name, f.name,
                                           WithArticle(type.kind == TypeKind::kBool  ? "bool"
                                                       : type.kind == TypeKind::kInt ? "int"
                                                                                      : "string")));
    }
  }
}

}  // namespace

const char* FilterKindName(FilterInfo::Kind kind) {
  switch (kind) {
    case FilterInfo::Kind::kBuiltin: return "builtin";
    case FilterInfo::Kind::kStd: return "std";
    case FilterInfo::Kind::kPlugin: return "plugin";
    case FilterInfo::Kind::kPolicy: return "policy";
  }
  return "?";
}

Registry::Registry(std::shared_ptr<const Schema> schema, std::string std_dir)
    : schema_(std::move(schema)), std_dir_(std::move(std_dir)) {}

void Registry::SetSchema(std::shared_ptr<const Schema> schema) { schema_ = std::move(schema); }

void Registry::AddPolicy(const std::shared_ptr<const CompiledPolicy>& policy) { policies_[policy->name()] = policy; }

std::vector<std::string> Registry::StdNames() const {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(std_dir_, ec)) {
    if (e.path().extension() == ".gpol") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<FilterInfo> Registry::List() {
  std::vector<FilterInfo> out;
  for (const FunctionInfo& f : schema_->functions()) {
    if (!f.is_filter) continue;
    FilterInfo info{f.name, f.plugin->name() == "builtin" ? FilterInfo::Kind::kBuiltin : FilterInfo::Kind::kPlugin,
                    f.doc, {}, f.plugin->origin()};
    for (size_t i = 0; i < f.args.size(); ++i) info.params.push_back({f.arg_names[i], f.args[i], f.arg_defaults[i]});
    out.push_back(std::move(info));
  }
  Loader loader(schema_, std_dir_);
  for (const std::string& name : StdNames()) {
    const std::string path = (std::filesystem::path(std_dir_) / (name + ".gpol")).string();
    LintResult lint;
    try {
      lint = loader.Lint(SourceFileFromPath(path));
    } catch (const PolicyError&) {
      continue;  // unreadable: Get() reports it
    }
    const PolicyDecl* decl = lint.module ? lint.module->FindPolicy(name) : nullptr;
    if (decl == nullptr) continue;
    FilterInfo info{name, FilterInfo::Kind::kStd, decl->doc.value_or(""), {}, path};
    for (const Param& p : decl->params) info.params.push_back({p.name, p.type, p.default_value});
    out.push_back(std::move(info));
  }
  for (auto it = policies_.begin(); it != policies_.end();) {
    auto policy = it->second.lock();
    if (!policy) {
      it = policies_.erase(it);
      continue;
    }
    FilterInfo info{policy->name(), FilterInfo::Kind::kPolicy, policy->doc(), {}, policy->program().image().default_file};
    for (const auto& [name, value] : policy->meta().params) info.params.push_back({name, LiteralType(value), value});
    out.push_back(std::move(info));
    ++it;
  }
  std::stable_sort(out.begin(), out.end(), [](const FilterInfo& a, const FilterInfo& b) { return a.kind < b.kind; });
  return out;
}

std::shared_ptr<const CompiledPolicy> Registry::Get(const std::string& name, const ParamValues& params) {
  Loader loader(schema_, std_dir_);
  const int fn = schema_->FindFunction(name);
  if (fn >= 0 && schema_->functions()[fn].is_filter) {
    const FunctionInfo& f = schema_->functions()[fn];
    CheckFilterParams(f, params);
    auto policy = loader.Load(std::make_shared<const SourceFile>("<registry>", FilterPolicySource(name, params)), "", {});
    // Show the filter's doc and bound parameters (defaults included), not the wrapper's.
    PolicyMeta meta = policy->meta();
    meta.doc = f.doc;
    for (size_t i = 0; i < f.args.size(); ++i) {
      auto given = params.find(f.arg_names[i]);
      if (given != params.end()) meta.params[f.arg_names[i]] = given->second;
      else if (f.arg_defaults[i]) meta.params[f.arg_names[i]] = *f.arg_defaults[i];
    }
    return std::make_shared<const CompiledPolicy>(policy->program(), std::move(meta));
  }
  const std::vector<std::string> std_names = StdNames();
  if (std::find(std_names.begin(), std_names.end(), name) != std_names.end()) {
    return loader.LoadFile((std::filesystem::path(std_dir_) / (name + ".gpol")).string(), name, params);
  }
  if (auto it = policies_.find(name); it != policies_.end()) {
    if (auto policy = it->second.lock()) {
      if (!params.empty()) {
        Fail(codes::kParamValue, fmt::format("policy `{}` is already compiled: its parameters are bound", name),
             "load its source again with the parameters");
      }
      return policy;
    }
  }
  std::vector<std::string> known;
  for (const FilterInfo& f : List()) known.push_back(f.name);
  const std::string best = ClosestMatch(name, known);
  Fail(codes::kPolicySelection, fmt::format("no filter named `{}`", name),
       best.empty() ? "guardpolicy.filters() lists them" : fmt::format("did you mean `{}`?", best));
}

}  // namespace guardpolicy
