# check_layers.cmake: fails when an include crosses a layer upwards (docs/design.md, "Layers").
#
#   cmake -DSOURCE_DIR=<repo> -DCXX=<c++ compiler> -P cmake/check_layers.cmake
#
# With -DEXPECT="<text>;<text>..." it passes only when every text is among the violations
# found (the self-test over tests/layers/violations).
#
# The includes are the compiler's own (-MM -MG: every project header a file reaches, through
# every level, without needing the third-party headers), so an arrow through a chain of
# headers counts as much as a direct one. Each rule names files (globs under SOURCE_DIR) and
# a regular expression for the project files they must not reach (paths under SOURCE_DIR).
cmake_minimum_required(VERSION 3.20)

if(NOT SOURCE_DIR OR NOT CXX)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repo> -DCXX=<compiler> -P check_layers.cmake")
endif()

set(inc "core/include/guardpolicy")
# The stages above the bytecode: the syntax tree and what works on it, and the facade.
set(front_end "${inc}/(ast|pattern_checks|parser|resolver|linker|checker|evaluator|compiler|analysis|printer|formatter|policy|registry|artifact|test_runner)\\.h|core/src/(ast|parser|linker|checker|analysis|compiler|format|policy|registry)/")
# What compiles or runs a policy: the code generator, the bytecode, the VM and the facade.
set(compiles_or_runs "${inc}/(compiler|bytecode|verifier|optimizer|vm|snapshot|extension_host|policy|registry|artifact|test_runner)\\.h|core/src/(compiler|bytecode|optimizer|vm|policy|registry)/")

# name | files (globs, comma-separated) | forbidden
set(rules
  "bytecode and VM know no AST|core/src/vm/*.cpp,core/src/bytecode/*.cpp,core/src/optimizer/*.cpp,core/src/optimizer/*.h,${inc}/bytecode.h,${inc}/vm.h,${inc}/verifier.h,${inc}/optimizer.h|${front_end}|${inc}/plugin_loader\\.h"
  "the schema knows no AST and no loader|core/src/schema/*.cpp,${inc}/schema.h,${inc}/types.h,${inc}/literal.h|${front_end}|${inc}/plugin_loader\\.h|core/src/(vm|bytecode|optimizer)/|${inc}/(bytecode|vm|verifier)\\.h"
  "the host adapter sits below the stages|core/src/plugin/*.cpp,${inc}/plugin.h,${inc}/plugin_loader.h,${inc}/builtin_filters.h,${inc}/plugin_values.h|${front_end}|${inc}/(vm|verifier|optimizer)\\.h"
  "the checker and the analysis neither compile nor run a policy (the analysis asks evaluator.h)|core/src/linker/*.cpp,core/src/checker/*.cpp,core/src/checker/*.h,core/src/analysis/*.cpp,core/src/analysis/*.h,${inc}/resolver.h,${inc}/linker.h,${inc}/checker.h,${inc}/analysis.h,${inc}/evaluator.h|${compiles_or_runs}"
  "the artifact and the loaded policy know no AST (runtime_settings.h is shared)|core/src/policy/artifact.cpp,core/src/policy/compiled_policy.cpp,${inc}/artifact.h,${inc}/compiled_policy.h,${inc}/runtime_settings.h|${inc}/(ast|parser|resolver|linker|checker|evaluator|compiler|analysis|printer|formatter|policy|registry|test_runner)\\.h|core/src/(ast|parser|linker|checker|analysis|compiler|format)/"
  "a stage includes no other stage's private header (the compiler: none)|core/src/compiler/*.cpp|core/src/(ast|parser|linker|checker|analysis|format|bytecode|optimizer|vm|policy|registry|plugin|schema|source|diag|io)/"
  "plugins/ includes no core header|plugins/*.c,plugins/*.h|core/"
  "outside core, no private core header|bindings/*.cpp,bindings/*.h,tools/*.cpp,tools/*.h|core/src/"
  "the bindings include no command line (guardpolicy._cli is tools/cli/python_module.cpp)|bindings/*.cpp,bindings/*.h|tools/cli/"
  # The bindings' rooms (bindings/CMakeLists.txt), bottom to top: runtime/ (the per-call C
  # types), policy/ (the glue evaluating a policy), module/ (plumbing), then _core.cpp.
  "the per-call types include no policy glue and no module plumbing|bindings/runtime/*.cpp,bindings/runtime/*.h|bindings/(policy|module)/"
  "the policy glue includes no module plumbing|bindings/policy/*.cpp,bindings/policy/*.h|bindings/module/"
)

set(failures "")
foreach(rule IN LISTS rules)
  string(REPLACE "|" ";" parts "${rule}")
  list(GET parts 0 name)
  list(GET parts 1 globs_text)
  list(SUBLIST parts 2 -1 forbidden_parts)
  list(JOIN forbidden_parts "|" forbidden)
  string(REPLACE "," ";" globs "${globs_text}")
  set(files "")
  foreach(g IN LISTS globs)
    file(GLOB_RECURSE found RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/${g}")
    list(APPEND files ${found})
  endforeach()
  list(REMOVE_DUPLICATES files)
  if(NOT files)
    string(APPEND failures "\n[${name}] no files match: ${globs_text}")
    continue()
  endif()
  foreach(f IN LISTS files)
    if(f MATCHES "\\.c$")
      set(lang -x c -std=c99)
    else()
      set(lang -x c++ -std=c++20)
    endif()
    execute_process(
      COMMAND "${CXX}" ${lang} -MM -MG -I "${SOURCE_DIR}/core/include" -I "${SOURCE_DIR}/plugins/include"
              -I "${SOURCE_DIR}/tools/cli" -I "${SOURCE_DIR}/bindings"
              "${SOURCE_DIR}/${f}"
      OUTPUT_VARIABLE deps ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      string(APPEND failures "\n[${name}] ${f}: the compiler failed: ${err}")
      continue()
    endif()
    string(REPLACE "\\\n" " " deps "${deps}")
    string(REGEX REPLACE "^[^:]*:" "" deps "${deps}")
    string(REGEX REPLACE "[ \t\r\n]+" ";" deps "${deps}")
    foreach(d IN LISTS deps)
      if(d STREQUAL "")
        continue()
      endif()
      cmake_path(ABSOLUTE_PATH d BASE_DIRECTORY "${SOURCE_DIR}/${f}/.." NORMALIZE OUTPUT_VARIABLE abs)
      cmake_path(RELATIVE_PATH abs BASE_DIRECTORY "${SOURCE_DIR}" OUTPUT_VARIABLE rel)
      if(rel STREQUAL f)
        continue()
      endif()
      if(rel MATCHES "^(${forbidden})")
        string(APPEND failures "\n[${name}] ${f} reaches ${rel}")
      endif()
    endforeach()
  endforeach()
endforeach()

# The core library builds from its own tree only (the plugin host side is core/src/plugin/).
if(EXISTS "${SOURCE_DIR}/core/CMakeLists.txt")
  file(STRINGS "${SOURCE_DIR}/core/CMakeLists.txt" outside REGEX "^[^#]*plugins/")
  foreach(line IN LISTS outside)
    string(STRIP "${line}" line)
    string(APPEND failures "\n[core builds from its own tree] core/CMakeLists.txt: ${line}")
  endforeach()
endif()

# The linker holds the layers as well: core/CMakeLists.txt declares one library per layer
# (guardpolicy_layer(<layer> ...), from the bottom up), and a layer may link only the layers
# declared before it (tests/cpp/CMakeLists.txt then links each alone, no symbol undefined).
if(EXISTS "${SOURCE_DIR}/core/CMakeLists.txt")
  file(READ "${SOURCE_DIR}/core/CMakeLists.txt" text)
  string(REGEX REPLACE "#[^\n]*" "" text "${text}")
  string(REGEX MATCHALL "guardpolicy_layer\\([a-z_]+" declared "${text}")
  list(TRANSFORM declared REPLACE "guardpolicy_layer\\(" "")
  string(REGEX MATCHALL "target_link_libraries\\(guardpolicy_[a-z_]+[^)]*\\)" links "${text}")
  foreach(link IN LISTS links)
    string(REGEX MATCH "^target_link_libraries\\(guardpolicy_([a-z_]+)" _ "${link}")
    set(layer "${CMAKE_MATCH_1}")
    list(FIND declared "${layer}" at)
    if(at EQUAL -1)
      continue()
    endif()
    string(REGEX MATCHALL "guardpolicy::[a-z_]+" used "${link}")
    foreach(u IN LISTS used)
      string(REPLACE "guardpolicy::" "" u "${u}")
      list(FIND declared "${u}" below)
      if(NOT below EQUAL -1 AND NOT below LESS at)
        string(APPEND failures "\n[a layer links only the layers below it] core/CMakeLists.txt: ${layer} links ${u}")
      endif()
    endforeach()
  endforeach()
endif()
# guardpolicy._core links the core alone; the command line is guardpolicy._cli.
if(EXISTS "${SOURCE_DIR}/bindings/CMakeLists.txt")
  file(STRINGS "${SOURCE_DIR}/bindings/CMakeLists.txt" core_links REGEX "^[ \t]*target_link_libraries\\(_core[ \t].*guardpolicy::cli")
  foreach(line IN LISTS core_links)
    string(STRIP "${line}" line)
    string(APPEND failures "\n[the bindings link no command line] bindings/CMakeLists.txt: ${line}")
  endforeach()
endif()

if(DEFINED EXPECT)
  foreach(text IN LISTS EXPECT)
    string(FIND "${failures}" "${text}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the check missed `${text}`; it found:${failures}")
    endif()
  endforeach()
  message(STATUS "layers: every expected violation was found")
  return()
endif()

if(failures)
  message(FATAL_ERROR "layer violations:${failures}")
endif()
message(STATUS "layers: every include looks down")
