// string_tests.h: the VM's string tests on guard names (==, startswith, endswith,
// contains), inline.
//
// Guard names are short (10-200 bytes) and share long prefixes ("L['self']._modules['"),
// so most tests fail on their first or last byte; each test checks those bytes before
// comparing the rest, in two 8-byte words up to 16 bytes (a library call per test costs
// more than the whole test).
//
// Find (and Contains) is the "generic SIMD" substring search of W. Muła ("SIMD-friendly algorithms
// for substring searching", 2016-2018): 16 candidate positions at a time, a position is a
// candidate only when both the needle's first and last bytes match there, and candidates
// are checked with memcmp. A first-byte-only search (memchr) stops at every '.', '_' or
// '[' of a name, which is most of its bytes for needles like "._parameters". SSE2 (every
// x86-64); elsewhere the same test runs position by position.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace guardpolicy::vm_internal {

// a[0, n) == b[0, n): two overlapping 8-byte words per side up to 16 bytes (no library
// call for the short strings guard names are compared with), memcmp beyond.
[[gnu::always_inline]] inline bool SameBytes(const char* a, const char* b, size_t n) {
  if (n > 16 || n < 8) return std::memcmp(a, b, n) == 0;
  uint64_t a0, a1, b0, b1;
  std::memcpy(&a0, a, 8);
  std::memcpy(&b0, b, 8);
  std::memcpy(&a1, a + n - 8, 8);
  std::memcpy(&b1, b + n - 8, 8);
  return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}

[[gnu::always_inline]] inline bool StrEq(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         (a.empty() || (a[0] == b[0] && a.back() == b.back() && SameBytes(a.data(), b.data(), a.size())));
}
[[gnu::always_inline]] inline bool StartsWith(std::string_view s, std::string_view p) {
  return p.size() <= s.size() && StrEq(std::string_view(s.data(), p.size()), p);
}
[[gnu::always_inline]] inline bool EndsWith(std::string_view s, std::string_view p) {
  return p.size() <= s.size() && StrEq(std::string_view(s.data() + (s.size() - p.size()), p.size()), p);
}

// The first position >= `from` where `needle` occurs in `hay`, or npos.
inline size_t Find(std::string_view hay, std::string_view needle, size_t from = 0) {
  constexpr size_t npos = std::string_view::npos;
  const size_t n = needle.size();
  if (from > hay.size() || n > hay.size() - from) return npos;
  if (n == 0) return from;
  const char* h = hay.data();
  if (n == 1) {
    const void* at = std::memchr(h + from, needle[0], hay.size() - from);
    return at == nullptr ? npos : static_cast<size_t>(static_cast<const char*>(at) - h);
  }
  const char first = needle[0];
  const char last = needle[n - 1];
  const size_t starts = hay.size() - n + 1;  // candidate start positions [from, starts)
  size_t i = from;
#if defined(__SSE2__)
  const __m128i vfirst = _mm_set1_epi8(first);
  const __m128i vlast = _mm_set1_epi8(last);
  // 16 start positions from i; both loads stay inside hay while i + 16 <= starts, since
  // i + 15 + (n - 1) < starts + n - 1 = hay.size(). The last block may overlap the one
  // before it (positions checked twice find nothing new), so no position is left to a
  // byte-by-byte loop once hay holds 16 starts.
  auto block = [&](size_t at0) -> size_t {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + at0));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + at0 + n - 1));
    auto mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, vfirst),
                                                                      _mm_cmpeq_epi8(b, vlast))));
    while (mask != 0) {
      const size_t at = at0 + static_cast<size_t>(__builtin_ctz(mask));
      if (SameBytes(h + at + 1, needle.data() + 1, n - 2)) return at;
      mask &= mask - 1;
    }
    return npos;
  };
  if (i + 16 <= starts) {
    for (; i + 16 <= starts; i += 16) {
      if (const size_t at = block(i); at != npos) return at;
    }
    return i < starts ? block(starts - 16) : npos;
  }
#endif
  for (; i < starts; ++i) {
    if (h[i] == first && h[i + n - 1] == last && SameBytes(h + i + 1, needle.data() + 1, n - 2)) return i;
  }
  return npos;
}

// `needle` occurs in `hay`.
inline bool Contains(std::string_view hay, std::string_view needle) {
  return Find(hay, needle) != std::string_view::npos;
}

}  // namespace guardpolicy::vm_internal
