// context.cpp: data-directory resolution for the CLI.
#include "context.h"

#include "guardpolicy/diag_codes.h"
#include "guardpolicy/plugin_loader.h"

#include <filesystem>

namespace guardpolicy::cli {

int ExitCodeFor(const Diagnostics& diagnostics) {
  for (const Diagnostic& d : diagnostics.items()) {
    if (d.code == codes::kIoError || d.code == codes::kSourceTooLarge || d.code == codes::kBadArtifact) return 2;
  }
  return diagnostics.HasErrors() ? 1 : 0;
}

int ReportLoadError(const Context& ctx, const PolicyError& e) {
  *ctx.err << RenderText(e.diagnostics());
  return ExitCodeFor(e.diagnostics());
}

std::unique_ptr<Loader> Context::MakeLoader() const {
  const std::filesystem::path dir(data_dir);
  const std::string schema_file =
      schema_path.empty() ? (dir / "schema" / "guard_entry.yaml").string() : schema_path;
  Schema schema = Schema::FromFile(schema_file);
  for (const std::string& path : plugins) schema = schema.WithPlugin(LoadPlugin(path));
  CompileOptions options;
  options.opt_level = opt_level;
  options.policy_option = "--policy NAME";
  return std::make_unique<Loader>(std::make_shared<const Schema>(std::move(schema)), (dir / "std").string(),
                                  options);
}

}  // namespace guardpolicy::cli
