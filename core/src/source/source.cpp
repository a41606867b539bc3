// source.cpp: line tables for SourceFile.
#include "guardpolicy/source.h"

#include <algorithm>

namespace guardpolicy {

SourceFile::SourceFile(std::string path, std::string text)
    : path_(std::move(path)), text_(std::move(text)) {
  line_starts_.push_back(0);
  // Lines end at `\n`, `\r\n` or a lone `\r` (the lexer's whitespace and comment rules
  // take all three).
  for (uint32_t i = 0; i < text_.size(); ++i) {
    const bool lone_cr = text_[i] == '\r' && (i + 1 == text_.size() || text_[i + 1] != '\n');
    if (text_[i] == '\n' || lone_cr) line_starts_.push_back(i + 1);
  }
}

LineCol SourceFile::Locate(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(text_.size()));
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const int line = static_cast<int>(it - line_starts_.begin());
  return {line, static_cast<int>(offset - line_starts_[line - 1]) + 1};
}

std::string_view SourceFile::Line(int line) const {
  if (line < 1 || line > static_cast<int>(line_starts_.size())) return {};
  const uint32_t begin = line_starts_[line - 1];
  uint32_t end = line < static_cast<int>(line_starts_.size()) ? line_starts_[line] - 1
                                                                : static_cast<uint32_t>(text_.size());
  if (end > begin && text_[end - 1] == '\r') --end;
  return std::string_view(text_).substr(begin, end - begin);
}

uint32_t SourceFile::Offset(int line, int col0) const {
  if (line < 1) return 0;
  if (line > static_cast<int>(line_starts_.size())) return static_cast<uint32_t>(text_.size());
  const uint64_t off = static_cast<uint64_t>(line_starts_[line - 1]) + std::max(col0, 0);
  return static_cast<uint32_t>(std::min<uint64_t>(off, text_.size()));
}

std::string SourceRange::ToString() const {
  if (!file) return "<unknown>";
  const LineCol lc = start();
  return file->path() + ":" + std::to_string(lc.line) + ":" + std::to_string(lc.col);
}

size_t Utf8SequenceLength(std::string_view s, size_t i) {
  // RFC 3629: the second byte's range depends on the lead byte (no overlong forms, no
  // surrogates, nothing above U+10FFFF); the other continuation bytes are 80..BF.
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace guardpolicy
