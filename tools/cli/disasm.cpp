// disasm.cpp: `guardpolicy disasm FILE [--policy NAME]`: the compiled bytecode listing.
#include "context.h"
#include "cli.h"
#include <cerrno>
#include <filesystem>

#include "guardpolicy/artifact.h"
#include "guardpolicy/diag_codes.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/file_io.h"

namespace guardpolicy::cli {

int RunDisasm(const Context& ctx, const std::string& file, const std::string& policy) {
  std::unique_ptr<Loader> loader = ctx.MakeLoader();
  try {
    *ctx.out << Disassemble(loader->LoadFile(file, policy, {})->program().image(), loader->schema());
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
    // Never over what this run reads: the policy, its plugins, its schema.
    std::vector<std::string> inputs = ctx.plugins;
    inputs.push_back(file);
    if (!ctx.schema_path.empty()) inputs.push_back(ctx.schema_path);
    const WriteResult written = WriteFileReplacing(out, SerializePolicy(*compiled, loader->schema()), inputs);
    if (!written.ok()) {
      *ctx.err << "guardpolicy: cannot write `" << out << "`: " << written.error << "; nothing was written\n";
      if (written.err_no == EEXIST) *ctx.err << "  = help: choose another output path with -o\n";
      return kExitUsage;
    }
    *ctx.out << "wrote " << out << " (policy `" << compiled->name() << "`, " << compiled->program().image().code.size()
             << " instructions)\n";
    return kExitClean;
  } catch (const PolicyError& e) {
    return ReportLoadError(ctx, e);
  }
}

}  // namespace guardpolicy::cli
