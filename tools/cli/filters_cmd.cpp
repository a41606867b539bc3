// filters_cmd.cpp: `guardpolicy filters [--plugin PATH]...`: the filter registry.
#include <fmt/format.h>

#include "cli.h"
#include "context.h"
#include "guardpolicy/printer.h"
#include "guardpolicy/registry.h"

namespace guardpolicy::cli {

int RunFilters(const Context& ctx) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
  auto schema = std::make_shared<const Schema>(loader->schema());
  Registry registry(schema, ctx.data_dir + "/std");
  for (const FilterInfo& f : registry.List()) {
    std::string params;
    for (const FilterParamInfo& p : f.params) {
      params += fmt::format("{}{}: {}", params.empty() ? "" : ", ", p.name, schema->TypeName(p.type));
      if (p.default_value) params += " = " + PrintLiteral(*p.default_value);
    }
    *ctx.out << fmt::format("{:<8} {}{}\n", FilterKindName(f.kind), f.name, params.empty() ? "" : "(" + params + ")");
    if (!f.doc.empty()) *ctx.out << fmt::format("         {}\n", f.doc);
  }
  return kExitClean;
}

}  // namespace guardpolicy::cli
