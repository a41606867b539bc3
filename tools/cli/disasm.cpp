// disasm.cpp: `guardpolicy disasm FILE [--policy NAME]`: the compiled bytecode listing.
#include "context.h"
#include "cli.h"
#include "guardpolicy/diagnostic.h"

namespace guardpolicy::cli {

int RunDisasm(const Context& ctx, const std::string& file, const std::string& policy) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
  try {
    auto compiled = loader->Load(SourceFileFromPath(file), policy, {});
    *ctx.out << Disassemble(compiled->program());
    return kExitClean;
  } catch (const PolicyError& e) {
    *ctx.err << RenderText(e.diagnostics());
    return e.diagnostics().items().empty() || e.diagnostics().items()[0].code == "GP0001"
               ? kExitUsage
               : kExitFindings;
  }
}

}  // namespace guardpolicy::cli
