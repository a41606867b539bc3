// display_text.cpp: escapes for characters a terminal would hide (see display_text.h).
#include "guardpolicy/display_text.h"

#include <fmt/format.h>

#include "guardpolicy/source.h"

namespace guardpolicy {
namespace {

bool InvisibleCodePoint(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0x115F || cp == 0x1160 || cp == 0x180E ||
         (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x2064) ||
         cp == 0x3000 || cp == 0x3164 || cp == 0xFEFF;
}

size_t CharLength(std::string_view s, size_t i) { return std::max<size_t>(1, Utf8SequenceLength(s, i)); }

}  // namespace

uint32_t CodePointOf(std::string_view ch) {
  if (ch.empty()) return 0;
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(ch[k])); };
  switch (Utf8SequenceLength(ch, 0)) {
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default: return b(0);
  }
}

bool IsInvisible(std::string_view ch) {
  return !ch.empty() && (Utf8SequenceLength(ch, 0) == 0 || InvisibleCodePoint(CodePointOf(ch)));
}

std::string DisplayChar(std::string_view ch, bool keep_tab) {
  if (ch.empty()) return {};
  const size_t n = Utf8SequenceLength(ch, 0);
  if (n == 0) return fmt::format("\\x{:02x}", static_cast<unsigned char>(ch[0]));
  const std::string_view one = ch.substr(0, n);
  const uint32_t cp = CodePointOf(one);
  if (cp == '\t') return keep_tab ? "\t" : "\\t";
  if (cp == '\n') return "\\n";
  if (cp == '\r') return "\\r";
  if (!InvisibleCodePoint(cp)) return std::string(one);
  return cp < 0x80 ? fmt::format("\\x{:02x}", cp) : fmt::format("\\u{:04x}", cp);
}

std::string EscapeInvisible(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = CharLength(text, i);
    out += DisplayChar(text.substr(i, n));
    i += n;
  }
  return out;
}

std::string ShortDisplay(std::string_view text, size_t max_chars) {
  size_t chars = 0, cut = 0;
  for (size_t i = 0; i < text.size(); i += CharLength(text, i)) {
    if (chars++ == max_chars) {
      cut = i;
      break;
    }
  }
  if (cut == 0) return EscapeInvisible(text);
  return EscapeInvisible(text.substr(0, cut)) + "...";
}

std::string ElideMiddle(std::string_view text, size_t head, size_t tail) {
  std::vector<size_t> starts;  // the byte offset of each character
  for (size_t i = 0; i < text.size(); i += CharLength(text, i)) starts.push_back(i);
  if (starts.size() <= head + tail) return EscapeInvisible(text);
  return EscapeInvisible(text.substr(0, starts[head])) + "..." +
         EscapeInvisible(text.substr(starts[starts.size() - tail]));
}

}  // namespace guardpolicy
