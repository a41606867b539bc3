// display_text.h: source text as diagnostics show it.
//
// What a message quotes from a policy file, and the source line under a caret, must not
// carry characters a terminal hides or acts on: C0 controls and DEL, C1 controls, no-break
// and other invisible spaces (U+00A0, U+00AD, U+115F, U+1160, U+180E, U+2000..U+200F,
// U+2028..U+202F, U+205F..U+2064, U+3000, U+3164, U+FEFF) are shown as escapes (`\x01`,
// `\u00a0`), a malformed UTF-8 byte as `\xff`.
#pragma once

#include <string>
#include <string_view>

namespace guardpolicy {

// How the character at the start of `ch` (one UTF-8 sequence, or one malformed byte) is
// shown: itself, or an escape. A tab stays a tab when `keep_tab`, else it is `\t`.
std::string DisplayChar(std::string_view ch, bool keep_tab = false);
// `text` with every character shown as DisplayChar does (tabs as `\t`).
std::string EscapeInvisible(std::string_view text);
// `text` escaped and, past `max_chars` characters, cut to its first ones and `...`.
std::string ShortDisplay(std::string_view text, size_t max_chars = 40);
// `text` escaped and, past `head + tail` characters, cut to its first `head` ones, `...` and
// its last `tail` ones: a long path keeps its file name.
std::string ElideMiddle(std::string_view text, size_t head, size_t tail);
// The code point of one UTF-8 sequence (the byte's value when it is malformed).
uint32_t CodePointOf(std::string_view ch);
// True for a character DisplayChar escapes.
bool IsInvisible(std::string_view ch);

}  // namespace guardpolicy
