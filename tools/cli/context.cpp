// context.cpp: data-directory resolution for the CLI.
#include "context.h"

#include <filesystem>

namespace guardpolicy::cli {

std::unique_ptr<Loader> Context::MakeLoader() const {
  const std::filesystem::path dir(data_dir);
  const std::string schema_file =
      schema_path.empty() ? (dir / "schema" / "guard_entry.yaml").string() : schema_path;
  auto schema = std::make_shared<const Schema>(Schema::FromFile(schema_file));
  return std::make_unique<Loader>(std::move(schema), (dir / "std").string());
}

}  // namespace guardpolicy::cli
