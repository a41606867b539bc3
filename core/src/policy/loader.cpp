// loader.cpp: the facade from source to CompiledPolicy, and the policy library.
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "filter_module.h"
#include "front_end.h"
#include "guardpolicy/artifact.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/policy.h"
#include "program_evaluator.h"

namespace guardpolicy {

Loader::Loader(std::shared_ptr<const Schema> schema, std::string std_dir, CompileOptions options)
    : schema_(std::move(schema)), std_dir_(std::move(std_dir)), options_(options) {}

Loader::~Loader() = default;

LintResult Loader::Lint(SourceFilePtr file) {
  front_end::Values v;
  v.file = std::move(file);
  RunLint(v);
  return {std::move(v.module), std::move(v.diagnostics), std::move(v.analysis)};
}

front_end::Context Loader::Context(RuleEvaluator& evaluator) { return {*this, *schema_, options_, evaluator}; }

void Loader::RunLint(front_end::Values& v) {
  // A compiled policy given where source is read (lint, fmt, test, compile): its bytes are
  // no source to complain about (a NUL byte, GP0004); say what it is.
  if (LooksLikeArtifact(v.file->text(), v.file->path())) {
    v.diagnostics.Error(codes::kBadArtifact, {},
                        fmt::format("`{}` is a compiled policy (.gpolc), not policy source", v.file->path()),
                        "lint, fmt, test and compile read the .gpol source; disasm, check and "
                        "guardpolicy.load read a .gpolc");
    return;
  }
  ProgramEvaluator evaluator(*schema_, options_);
  front_end::Lint(v, Context(evaluator));
  // Problems in library files this file uses (std or --data-dir policies, cycles between
  // them) are reported here, where they surface, each once.
  v.diagnostics.Append(library_diagnostics_);
  library_diagnostics_ = Diagnostics();
}

std::shared_ptr<const CompiledPolicy> Loader::Load(SourceFilePtr file, const std::string& name,
                                                   const ParamValues& params) {
  front_end::Values v;
  v.file = std::move(file);
  v.policy = name;
  v.params = params;
  RunLint(v);
  if (!v.module || v.diagnostics.HasErrors()) throw PolicyError(std::move(v.diagnostics));
  ProgramEvaluator evaluator(*schema_, options_);
  if (!front_end::Load(v, Context(evaluator))) throw PolicyError(std::move(v.diagnostics));
  const PolicyDecl* decl = v.selected;
  PolicyMeta meta;
  meta.is_unsafe = decl->is_unsafe;
  meta.doc = decl->doc.value_or("");
  meta.runtime = Inherit(*decl, *this).runtime;  // its own lines over its base's (`extends`)
  for (const Param& p : decl->params) {
    if (p.default_value) meta.params[p.name] = *p.default_value;
  }
  for (const auto& [param, value] : params) meta.params[param] = value;
  return std::make_shared<const CompiledPolicy>(std::move(*v.program), std::move(meta));
}

std::shared_ptr<const CompiledPolicy> Loader::LoadFile(const std::string& path, const std::string& name,
                                                       const ParamValues& params) {
  SourceFilePtr file = SourceFileFromPath(path, options_);
  if (!LooksLikeArtifact(file->text(), path)) return Load(std::move(file), name, params);
  auto policy = DeserializePolicy(file->text(), *schema_, path);
  Diagnostics diags;
  if (!params.empty()) {
    diags.Error(codes::kParamValue, {}, fmt::format("`{}` is compiled: its parameters were bound by `guardpolicy compile`", path),
                "pass parameters when compiling, or load the .gpol source");
  }
  if (!name.empty() && name != policy->name()) {
    diags.Error(codes::kPolicySelection, {}, fmt::format("`{}` holds policy `{}`, not `{}`", path, policy->name(), name));
  }
  if (diags.HasErrors()) throw PolicyError(std::move(diags));
  return policy;
}

std::unique_ptr<Module> Loader::LintLibrary(SourceFilePtr file, std::string_view plugin) {
  front_end::Values v;
  v.file = std::move(file);
  v.plugin = std::string(plugin);
  v.analyse = false;  // only errors: a library file's warnings are its own business
  RunLint(v);
  for (const Diagnostic& d : v.diagnostics.items()) {
    if (d.severity == Severity::kError) library_diagnostics_.Add(d);
  }
  if (!v.module || v.diagnostics.HasErrors()) return nullptr;
  return std::move(v.module);
}

const Module* Loader::LoadLibraryModule(const std::string& name) {
  if (auto it = library_.find(name); it != library_.end()) {
    if (it->second == nullptr && in_progress_.count(name)) {
      library_diagnostics_.Error(codes::kUseCycle, {},
                                 fmt::format("library policy `{}` uses itself through other library files", name),
                                 "break the cycle between the files in " + std_dir_);
    }
    return it->second.get();
  }
  library_[name] = nullptr;  // in progress: a `use` cycle through the library resolves to null
  in_progress_.insert(name);
  struct Done {
    std::set<std::string, std::less<>>& set;
    std::string name;
    ~Done() { set.erase(name); }
  } done{in_progress_, name};
  const std::string path = (std::filesystem::path(std_dir_) / (name + ".gpol")).string();
  std::error_code ec;
  if (std_dir_.empty() || !std::filesystem::is_regular_file(path, ec)) return nullptr;
  try {
    library_[name] = LintLibrary(SourceFileFromPath(path, options_), "");
  } catch (const PolicyError& e) {
    library_diagnostics_.Append(e.diagnostics());
    return nullptr;
  }
  return library_[name].get();
}

// The filters of plugin `ns` as a module of policies named `<ns>.<filter>`, built once.
const Module* Loader::LoadPluginModule(std::string_view ns) {
  const Plugin* plugin = schema_->FindPlugin(ns);
  if (plugin == nullptr) return nullptr;
  if (auto it = plugin_modules_.find(ns); it != plugin_modules_.end()) return it->second.get();
  std::unique_ptr<Module>& slot = plugin_modules_[std::string(ns)];
  // The path names the made-up source in diagnostics only.
  auto source = std::make_shared<const SourceFile>("plugin:" + std::string(ns), FilterModuleSource(*plugin));
  slot = LintLibrary(std::move(source), ns);
  if (slot == nullptr) return nullptr;
  for (PolicyDecl& p : slot->policies) p.name = std::string(ns) + "." + p.name;
  return slot.get();
}

const PolicyDecl* Loader::Resolve(std::string_view name, const Module& from) {
  if (const PolicyDecl* p = from.FindPolicy(name)) return p;
  if (const size_t dot = name.find('.'); dot != std::string_view::npos) {
    const Module* m = LoadPluginModule(name.substr(0, dot));
    return m ? m->FindPolicy(name) : nullptr;
  }
  // Library names are plain identifiers; anything else (a path) never reaches the disk.
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
                          std::string_view::npos) {
    return nullptr;
  }
  const Module* m = LoadLibraryModule(std::string(name));
  return m ? m->FindPolicy(name) : nullptr;
}

std::vector<std::string> Loader::KnownPolicies(const Module& from) {
  std::vector<std::string> names;
  for (const PolicyDecl& p : from.policies) names.push_back(p.name);
  for (const FunctionInfo& f : schema_->functions()) {
    if (f.is_filter) names.push_back(f.name);
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(std_dir_, ec)) {
    if (entry.path().extension() == ".gpol") names.push_back(entry.path().stem().string());
  }
  return names;
}

}  // namespace guardpolicy
