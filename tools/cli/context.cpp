// context.cpp: data-directory resolution for the CLI.
#include "context.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace guardpolicy::cli {

std::unique_ptr<Loader> Context::MakeLoader() const {
  const std::filesystem::path dir(data_dir);
  const std::string schema_file =
      schema_path.empty() ? (dir / "schema" / "guard_entry.yaml").string() : schema_path;
  auto schema = std::make_shared<const Schema>(Schema::FromFile(schema_file));
  CompileOptions options;
  options.opt_level = opt_level;
  return std::make_unique<Loader>(std::move(schema), (dir / "std").string(), options);
}

std::string WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".gp.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << bytes;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return "cannot write " + tmp;
    }
  }
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::filesystem::permissions(tmp, std::filesystem::status(path, ec).permissions(), ec);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return ec.message();
  }
  return {};
}

}  // namespace guardpolicy::cli
