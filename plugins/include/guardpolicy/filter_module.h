// filter_module.h: the policy source text that stands for a plugin's filters.
//
// One `unsafe policy <filter>(<params>) { drop when <plugin>.<filter>(<params>) }` per
// filter, with the declared parameter types and defaults; the Loader parses and checks it
// under the path `plugin:<name>` and serves `use <plugin>.<filter>` from it.
#pragma once

#include <string>

#include "guardpolicy/ast.h"
#include "guardpolicy/plugin.h"

namespace guardpolicy {

std::string FilterModuleSource(const Plugin& plugin);

// A filter parameter's default as a literal of its type (`p.has_default` must hold).
Literal DefaultLiteral(const PluginParam& p);

}  // namespace guardpolicy
