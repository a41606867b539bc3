// program_evaluator.cpp: compile the linked rules, link the image, run each entry alone.
#include "program_evaluator.h"

#include "entry_fields.h"
#include "guardpolicy/compiler.h"
#include "guardpolicy/extension_host.h"

namespace guardpolicy {

std::vector<std::optional<Decided>> ProgramEvaluator::Decide(const LinkedPolicy& linked,
                                                             const std::vector<EntryLiterals>& entries) {
  Diagnostics ignored;  // the load reports them
  ProgramImage image = Compile(linked, schema_, {}, ignored, options_);
  if (ignored.HasErrors()) return {};
  std::optional<Program> program;
  try {
    program = Program::Link(std::move(image), schema_);
  } catch (const LinkError&) {
    return {};
  }
  std::vector<std::optional<Decided>> decided;
  for (const EntryLiterals& entry : entries) {
    HostStrings strings;
    try {
      const Outcome o = EvaluateEntries(*program, schema_, {FieldsOf(entry, schema_)}, strings).front();
      decided.push_back(Decided{o.decision, o.rule});
    } catch (const PluginError&) {
      decided.push_back(std::nullopt);
    }
  }
  return decided;
}

}  // namespace guardpolicy
