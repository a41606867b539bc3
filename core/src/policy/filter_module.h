// filter_module.h: the policy source text that stands for a plugin's filters.
//
// One `unsafe policy <filter>(<params>) { drop when <plugin>.<filter>(<params>) }` per
// filter, with the declared parameter types and defaults; the Loader parses and checks it
// as a Module whose `plugin` names the plugin, and serves `use <plugin>.<filter>` from it.
#pragma once

#include <string>

#include "guardpolicy/plugin.h"

namespace guardpolicy {

std::string FilterModuleSource(const Plugin& plugin);

}  // namespace guardpolicy
