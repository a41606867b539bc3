// filter_module.cpp: a plugin filter as policy source, so `use <plugin>.<filter>(...)`
// goes through the same checker, analysis and compiler as `use` of a policy.
//
// For a filter `names.drop_deep(max_depth: int = 4)` the text is
//
//   guardpolicy 1
//   unsafe policy drop_deep(max_depth: int = 4) {
//     doc "..."
//     drop when names.drop_deep(max_depth)
//   }
//
// (a filter called in a condition is true when it drops the entry; the policy's default
// is keep, so `use` of it drops exactly what the filter drops and lets the rest fall
// through to the next rule).
#include "filter_module.h"

#include <fmt/format.h>

#include "guardpolicy/printer.h"

namespace guardpolicy {

namespace {

std::string StringLiteral(const std::string& s) {
  Literal lit;
  lit.kind = Literal::Kind::kString;
  for (const char c : s) lit.str += (c == '\n' || c == '\r') ? ' ' : c;
  return PrintLiteral(lit);
}

}  // namespace

std::string FilterModuleSource(const Plugin& plugin) {
  std::string out = "guardpolicy 1\n";
  for (const PluginFilter& f : plugin.filters()) {
    std::string params, args;
    for (const PluginParam& p : f.params) {
      params += fmt::format("{}{}: {}", params.empty() ? "" : ", ", p.name, p.type);
      if (p.has_default) params += " = " + PrintLiteral(DefaultLiteral(p));
      args += (args.empty() ? "" : ", ") + p.name;
    }
    out += fmt::format("\nunsafe policy {}{} {{\n", f.name, params.empty() ? "" : "(" + params + ")");
    if (!f.doc.empty()) out += "  doc " + StringLiteral(f.doc) + "\n";
    out += fmt::format("  drop when {}.{}({})\n}}\n", plugin.name(), f.name, args);
  }
  return out;
}

}  // namespace guardpolicy
