// ast.h: the syntax tree of a policy file, built by the parser and annotated by the checker.
//
// Ownership: a Module owns everything below it; nodes hold a shared pointer to their
// SourceFile through SourceRange. The checker fills the `type`/`resolved` annotations of
// Expr in place; afterwards the tree is read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "guardpolicy/literal.h"
#include "guardpolicy/runtime_settings.h"
#include "guardpolicy/source.h"
#include "guardpolicy/types.h"

namespace guardpolicy {

enum class ExprKind : uint8_t {
  kLiteral,   // literal
  kPath,      // dotted identifier: a field, a parameter or an enum literal (checker decides)
  kNot,       // kids[0]
  kCompare,   // kids[0] op kids[1]
  kIn,        // kids[0] (not) in {kids[1..]}
  kStringOp,  // kids[0] op kids[1]: contains, startswith, endswith, matches, glob
  kAnd,       // kids[0] and kids[1]
  kOr,        // kids[0] or kids[1]
  kCall,      // path(kids...): a plugin function, or a filter (true when it drops the entry)
};

enum class BinaryOp : uint8_t {
  kEq, kNe, kLt, kLe, kGt, kGe,
  kContains, kStartsWith, kEndsWith, kMatches, kGlob,
};
const char* BinaryOpName(BinaryOp op);

// What the checker resolved a kPath to.
struct Resolution {
  enum class Kind : uint8_t { kNone, kField, kParam, kEnumLiteral, kFunction };
  Kind kind = Kind::kNone;
  // Field index in Schema, parameter index, enum ordinal (-1: unknown open), or function
  // index in Schema::functions().
  int index = -1;
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  SourceRange range;
  Literal literal;                          // kLiteral
  std::string path;                         // kPath, kCall (the callee), dotted
  BinaryOp op = BinaryOp::kEq;              // kCompare, kStringOp
  bool negated = false;                     // kIn: `not in`
  std::vector<std::unique_ptr<Expr>> kids;  // see ExprKind

  // Checker annotations.
  Type type;
  Resolution resolved;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Param {
  std::string name;
  std::string type_name;  // as written: bool, int, string, GuardType, GuardSource
  SourceRange range;
  std::optional<Literal> default_value;
  Type type;  // checker
};

// `name = literal` in `use p(name = literal)`.
struct Arg {
  std::string name;
  Literal value;
  SourceRange range;
};

struct Rule {
  Decision decision = Decision::kKeep;
  ExprPtr condition;
  SourceRange range;
};

struct Use {
  std::string target;  // dotted, e.g. skip_guard_on_all_nn_modules
  std::vector<Arg> args;
  SourceRange range;
};

// A rule or a `use`, in source order: first match decides.
struct Item {
  enum class Kind : uint8_t { kRule, kUse };
  Kind kind = Kind::kRule;
  Rule rule;
  Use use;
};

struct Module;

struct PolicyDecl {
  std::string name;
  const Module* module = nullptr;  // the module that owns this declaration
  bool is_unsafe = false;
  SourceRange range;       // the whole declaration
  SourceRange name_range;
  std::vector<Param> params;
  // `extends BASE [(ARGS)]`, as a `use` of the base: the base's rules come after this policy's
  // own, its `default` and runtime lines apply where this policy has none of the kind (the
  // linker's Inherit). Unset: no base.
  std::optional<Use> extends;
  std::optional<std::string> doc;
  SourceRange doc_range;
  std::vector<Item> items;
  std::optional<Decision> default_decision;  // its own line; unset: the base's, else `default keep`
  SourceRange default_range;
  RuntimeSettings runtime;  // its own config, stance, verify, on_violation, ..., on_error lines
};

struct FieldInit {
  std::string path;
  Literal value;
  SourceRange range;
};

struct Expectation {
  Decision decision = Decision::kKeep;
  std::vector<FieldInit> fields;
  SourceRange range;
};

struct TestDecl {
  std::string target;
  SourceRange range;
  std::vector<Expectation> expectations;
};

struct Module {
  SourceFilePtr file;
  // Non-empty when the module stands for a plugin's filters (its policies are the filters
  // `<plugin>.<filter>`, its source made up by the loader): the plugin's namespace.
  std::string plugin;
  int64_t version = 0;
  SourceRange version_range;
  std::vector<PolicyDecl> policies;
  std::vector<TestDecl> tests;

  const PolicyDecl* FindPolicy(std::string_view name) const;
};

}  // namespace guardpolicy
