// runtime_settings.h: a policy's runtime lines (config, stance, verify, on_violation,
// on_recompile, dispatch, on_error), one struct shared by the syntax tree (`PolicyDecl`), the
// loaded policy (`PolicyMeta`), the `.gpolc` artifact and the Python extension.
//
// Adding a line: its grammar rule, its build in the parser (ast_builder.cpp), a member here
// with its entry in `kRuntimeSettingMembers` (an `extends` inherits it then), its check in the
// checker. The artifact, the
// formatter and `_core`'s `runtime_settings` dict read every member through the visitor (a new
// member of a new type needs one overload in each; a new member changes the artifact's format,
// so `kArtifactFormatVersion` moves with it).
//
// Ranges point into the policy's source; a setting read from a `.gpolc` has none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "guardpolicy/literal.h"
#include "guardpolicy/source.h"

namespace guardpolicy {

// `config knob = literal`: a torch config value set while the policy's frames compile.
struct ConfigSetting {
  std::string knob;
  Literal value;
  SourceRange range;
};

// `stance <name> after N calls`.
struct StanceSetting {
  std::string stance;  // skip_guard_eval_unsafe
  int64_t after_calls = 0;
  SourceRange range;
};

// `verify every N calls`: every N-th call of a compiled frame re-checks the guards the
// policy dropped (with torch's guard manager); see docs/verify.md.
struct VerifySetting {
  int64_t every_calls = 0;
  SourceRange range;
};

// `on_violation <action>`: what a failed dropped guard on a verified call does; one of the
// schema's `violation_actions`.
struct OnViolationSetting {
  std::string action;
  SourceRange range;
};

// `on_recompile <action>`: what a call after the stance's warm-up that no cache entry accepts
// does; one of the schema's `violation_actions` (recompile: compile with every guard and
// warm up again; warn: the same with a warning; raise: torch's RuntimeError, as
// `fail_on_recompile`). Needs a `stance` line.
using OnRecompileSetting = OnViolationSetting;

// `dispatch <mode>`: how calls reach the compiled code after warm-up; one of the schema's
// `dispatch_modes`.
struct DispatchSetting {
  std::string mode;
  SourceRange range;
};

enum class OnError : uint8_t { kKeep, kDrop, kRaise };
const char* OnErrorName(OnError e);

// `on_error keep|drop|raise`: what an entry the policy cannot evaluate gets.
struct OnErrorSetting {
  OnError action = OnError::kKeep;
  SourceRange range;       // the action word
  SourceRange item_range;  // the whole `on_error ...` line
};

struct RuntimeSettings {
  std::vector<ConfigSetting> config;
  std::optional<StanceSetting> stance;
  std::optional<VerifySetting> verify;
  std::optional<OnViolationSetting> on_violation;
  std::optional<OnRecompileSetting> on_recompile;
  std::optional<DispatchSetting> dispatch;
  std::optional<OnErrorSetting> on_error;

  // `on_error`'s action; `keep` without the line.
  OnError EffectiveOnError() const { return on_error ? on_error->action : OnError::kKeep; }
};

// The members of RuntimeSettings with their line names, in the artifact's order: the one list
// VisitRuntimeSettings and InheritRuntimeSettings walk.
inline constexpr auto kRuntimeSettingMembers = std::make_tuple(
    std::pair{"on_error", &RuntimeSettings::on_error},
    std::pair{"stance", &RuntimeSettings::stance}, std::pair{"verify", &RuntimeSettings::verify},
    std::pair{"on_violation", &RuntimeSettings::on_violation},
    std::pair{"on_recompile", &RuntimeSettings::on_recompile},
    std::pair{"dispatch", &RuntimeSettings::dispatch},
    std::pair{"config", &RuntimeSettings::config});

// Calls `f(name, member)` for each member of `s` (const or not), in the artifact's order.
template <typename Settings, typename F>
void VisitRuntimeSettings(Settings& s, F&& f) {
  std::apply([&](const auto&... m) { (f(m.first, s.*(m.second)), ...); }, kRuntimeSettingMembers);
}

// `base`'s lines where `into` has none of the kind: an `extends`'s inheritance. A `config`
// knob is inherited knob by knob (`into`'s own knobs first, in their order).
inline void InheritLine(std::vector<ConfigSetting>& into, const std::vector<ConfigSetting>& base) {
  for (const ConfigSetting& c : base) {
    bool own = false;
    for (const ConfigSetting& mine : into) own = own || mine.knob == c.knob;
    if (!own) into.push_back(c);
  }
}
template <typename T>
void InheritLine(std::optional<T>& into, const std::optional<T>& base) {
  if (!into) into = base;
}
inline void InheritRuntimeSettings(RuntimeSettings& into, const RuntimeSettings& base) {
  std::apply([&](const auto&... m) { (InheritLine(into.*(m.second), base.*(m.second)), ...); },
             kRuntimeSettingMembers);
}

}  // namespace guardpolicy
