// disasm.cpp: `guardpolicy disasm FILE [--policy NAME]`: the compiled bytecode listing.
#include "context.h"
#include "cli.h"
#include <filesystem>

#include "guardpolicy/artifact.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/diagnostic.h"

namespace guardpolicy::cli {

int RunDisasm(const Context& ctx, const std::string& file, const std::string& policy) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
  try {
    *ctx.out << Disassemble(loader->LoadFile(file, policy, {})->program());
    return kExitClean;
  } catch (const PolicyError& e) {
    return ReportLoadError(ctx, e);
  }
}

int RunCompile(const Context& ctx, const std::string& file, const std::string& policy, std::string out) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
  try {
    auto compiled = loader->Load(SourceFileFromPath(file), policy, {});
    if (out.empty()) out = std::filesystem::path(file).replace_extension(".gpolc").string();
    const std::string error = WriteFileAtomically(out, SerializePolicy(*compiled, loader->schema()));
    if (!error.empty()) {
      *ctx.err << "guardpolicy: cannot write `" << out << "`: " << error << "\n";
      return kExitUsage;
    }
    *ctx.out << "wrote " << out << " (policy `" << compiled->name() << "`, " << compiled->program().code.size()
             << " instructions)\n";
    return kExitClean;
  } catch (const PolicyError& e) {
    return ReportLoadError(ctx, e);
  }
}

}  // namespace guardpolicy::cli
