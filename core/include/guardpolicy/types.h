// types.h: the value types of the policy language, and its three decisions.
//
// bool, int (int64), string (UTF-8 bytes), enum:<E> and set:<E> over an enum declared in
// the schema. `Type` is a small value; `enum_index` indexes Schema::enums().
#pragma once

#include <cstdint>
#include <string>

namespace guardpolicy {

// What a policy decides for a guard entry (docs/language.md, "Three decisions"): `keep`,
// torch checks it on every call; `drop`, never; `watch`, when the state it reads changes.
// Under a plain guard_filter_fn, and in this release's runtime, a watch is a keep. The
// values are the DECIDE operand and the byte in a .gpolc (append only).
enum class Decision : uint8_t { kKeep = 0, kDrop = 1, kWatch = 2 };
inline constexpr int kDecisionCount = 3;

// Whether `v` is the value of a Decision (a DECIDE operand, a byte read from a .gpolc).
inline constexpr bool IsDecision(int64_t v) { return v >= 0 && v < kDecisionCount; }

inline const char* DecisionName(Decision d) {
  switch (d) {
    case Decision::kDrop: return "drop";
    case Decision::kWatch: return "watch";
    case Decision::kKeep: break;
  }
  return "keep";
}

// Whether torch keeps the guard (checks it when it runs guards): keep and watch.
inline constexpr bool KeptByTorch(Decision d) { return d != Decision::kDrop; }

enum class TypeKind : uint8_t { kError, kBool, kInt, kString, kEnum, kEnumSet };

struct Type {
  TypeKind kind = TypeKind::kError;
  int enum_index = -1;  // for kEnum and kEnumSet

  static Type Bool() { return {TypeKind::kBool, -1}; }
  static Type Int() { return {TypeKind::kInt, -1}; }
  static Type String() { return {TypeKind::kString, -1}; }
  static Type Enum(int e) { return {TypeKind::kEnum, e}; }
  static Type EnumSet(int e) { return {TypeKind::kEnumSet, e}; }
  static Type Error() { return {}; }

  bool is_error() const { return kind == TypeKind::kError; }
  bool operator==(const Type&) const = default;
};

}  // namespace guardpolicy
