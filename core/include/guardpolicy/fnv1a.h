// fnv1a.h: FNV-1a 64 (the .gpolc checksum and the schema hash; docs/bytecode.md).
//
// The published parameters (draft-eastlake-fnv): offset basis 14695981039346656037,
// prime 1099511628211; FNV-1a xors each byte into the hash, then multiplies.
#pragma once

#include <cstdint>
#include <string_view>

namespace guardpolicy {

inline constexpr uint64_t kFnv1a64OffsetBasis = 14695981039346656037ULL;
inline constexpr uint64_t kFnv1a64Prime = 1099511628211ULL;

// The hash of `bytes`, continuing from `h` (the offset basis for a fresh hash).
constexpr uint64_t Fnv1a64(std::string_view bytes, uint64_t h = kFnv1a64OffsetBasis) {
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= kFnv1a64Prime;
  }
  return h;
}

}  // namespace guardpolicy
