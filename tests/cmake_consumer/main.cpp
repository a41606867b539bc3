// main.cpp: uses an installed guardpolicy. Compiles an inline policy (which `use`s a policy of
// the installed standard library), evaluates it on a few entries, then loads the C plugin
// with guardpolicy::LoadPlugin and runs a policy that calls its function. Prints what it
// finds; exits 1 on any mismatch.
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <guardpolicy/plugin_loader.h>
#include <guardpolicy/policy.h>
#include <guardpolicy/schema.h>
#include <guardpolicy/vm.h>

namespace gp = guardpolicy;

namespace {

constexpr const char* kPolicy = R"(guardpolicy 1

unsafe policy consumer {
  doc "Keep shape guards; drop guards on globals and on module attributes."
  keep when guard_type == SHAPE_ENV
  use skip_guard_on_globals
  drop when name startswith "self."
  default keep
}
)";

struct Case {
  std::string guard_type;
  std::string name;
  bool is_global;
  gp::Decision expected;
};

// The value of each of the program's field slots for one entry.
std::vector<gp::Value> Fields(const gp::Program& program, const gp::Schema& schema, const Case& c) {
  const gp::EnumInfo& guard_types = schema.enums()[schema.FindEnum("GuardType")];
  std::vector<gp::Value> values;
  for (const std::string& field : program.image().fields) {
    if (field == "guard_type") {
      values.push_back({guard_types.Find(c.guard_type), 0, c.guard_type});
    } else if (field == "name") {
      values.push_back({0, 0, c.name});
    } else if (field == "is_global") {
      values.push_back({c.is_global ? 1 : 0, 0, {}});
    } else {
      throw std::runtime_error("the policy reads an unexpected field: " + field);
    }
  }
  return values;
}

bool RunPolicy(const std::string& data_dir) {
  auto schema = std::make_shared<const gp::Schema>(
      gp::Schema::FromFile(data_dir + "/schema/guard_entry.yaml"));
  gp::Loader loader(schema, data_dir + "/std");
  auto source = std::make_shared<const gp::SourceFile>("consumer.gpol", kPolicy);
  auto policy = loader.Load(source, "consumer", {});

  const std::vector<Case> cases = {
      {"SHAPE_ENV", "", false, gp::Decision::kKeep},
      {"EQUALS_MATCH", "G['GLOBAL_INT']", true, gp::Decision::kDrop},
      {"TENSOR_MATCH", "self._modules['fc1']._parameters['weight']", false, gp::Decision::kDrop},
      {"TENSOR_MATCH", "x", false, gp::Decision::kKeep},
  };
  bool ok = true;
  for (const Case& c : cases) {
    const std::vector<gp::Value> fields = Fields(policy->program(), *schema, c);
    const gp::Outcome outcome = gp::Evaluate(policy->program(), fields.data());
    std::cout << "decision " << c.guard_type << " '" << c.name << "': "
              << gp::DecisionName(outcome.decision) << "\n";
    if (outcome.decision != c.expected) {
      std::cerr << "  expected " << gp::DecisionName(c.expected) << "\n";
      ok = false;
    }
  }
  return ok;
}

// Loads the plugin through guardpolicy's loader, adds it to the schema and runs a policy
// that calls its function.
bool LoadPlugin(const std::string& data_dir, const std::string& path) {
  std::shared_ptr<const gp::Plugin> plugin = gp::LoadPlugin(path);
  auto schema = std::make_shared<const gp::Schema>(
      gp::Schema::FromFile(data_dir + "/schema/guard_entry.yaml").WithPlugin(plugin));
  gp::Loader loader(schema, data_dir + "/std");
  auto source = std::make_shared<const gp::SourceFile>(
      "plugin.gpol", "guardpolicy 1\nunsafe policy deep {\n  drop when consumer.double_it(source.depth) > 4\n}\n");
  auto policy = loader.Load(source, "deep", {});
  bool ok = true;
  for (const int64_t depth : {1, 2, 3}) {
    const gp::Value fields[] = {{depth, 0, {}}};  // the policy reads one field: source.depth
    const gp::Outcome o = gp::Evaluate(policy->program(), fields);
    std::cout << "plugin " << plugin->name() << " " << plugin->version() << ": depth " << depth << " -> "
              << gp::DecisionName(o.decision) << "\n";
    ok &= o.decision == (depth > 2 ? gp::Decision::kDrop : gp::Decision::kKeep);
  }
  return ok;
}

}  // namespace

int main() {
  std::cout << "data dir: " << CONSUMER_DATA_DIR << "\n";
  try {
    const bool policy_ok = RunPolicy(CONSUMER_DATA_DIR);
    const bool plugin_ok = LoadPlugin(CONSUMER_DATA_DIR, CONSUMER_PLUGIN);
    if (!policy_ok || !plugin_ok) return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  std::cout << "consumer: ok\n";
  return 0;
}
