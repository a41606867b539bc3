// types.h: the value types of the policy language, and its two decisions.
//
// bool, int (int64), string (UTF-8 bytes), enum:<E> and set:<E> over an enum declared in
// the schema. `Type` is a small value; `enum_index` indexes Schema::enums().
#pragma once

#include <cstdint>
#include <string>

namespace guardpolicy {

// What a policy decides for a guard entry.
enum class Decision : uint8_t { kKeep = 0, kDrop = 1 };
inline const char* DecisionName(Decision d) { return d == Decision::kDrop ? "drop" : "keep"; }

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
