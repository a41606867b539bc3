// data_dirs.cpp: one Schema and one Registry per data directory (see data_dirs.h).
#include "data_dirs.h"

#include <map>
#include <mutex>
#include <utility>

namespace guardpolicy::python {
namespace {

std::mutex schema_mu;
std::map<std::string, std::shared_ptr<const Schema>>& SchemaCache() {
  static auto* cache =
      new std::map<std::string, std::shared_ptr<const Schema>>();  // lives with the process
  return *cache;
}

}  // namespace

std::shared_ptr<const Schema> SchemaFor(const std::string& data_dir) {
  std::lock_guard<std::mutex> lock(schema_mu);
  auto& slot = SchemaCache()[data_dir];
  if (!slot)
    slot = std::make_shared<const Schema>(Schema::FromFile(data_dir + "/schema/guard_entry.yaml"));
  return slot;
}

void ReplaceSchema(const std::string& data_dir, std::shared_ptr<const Schema> schema) {
  std::lock_guard<std::mutex> lock(schema_mu);
  SchemaCache()[data_dir] = std::move(schema);
}

Registry& RegistryFor(const std::string& data_dir) {
  static auto* registries =
      new std::map<std::string, std::unique_ptr<Registry>>();  // lives with the process
  std::shared_ptr<const Schema> schema = SchemaFor(data_dir);
  std::lock_guard<std::mutex> lock(schema_mu);
  auto& slot = (*registries)[data_dir];
  if (!slot) slot = std::make_unique<Registry>(schema, data_dir + "/std");
  slot->SetSchema(schema);
  return *slot;
}

}  // namespace guardpolicy::python
