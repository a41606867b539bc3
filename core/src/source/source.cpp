// source.cpp: line tables for SourceFile.
#include "guardpolicy/source.h"

#include <algorithm>

namespace guardpolicy {

SourceFile::SourceFile(std::string path, std::string text)
    : path_(std::move(path)), text_(std::move(text)) {
  line_starts_.push_back(0);
  for (uint32_t i = 0; i < text_.size(); ++i) {
    if (text_[i] == '\n') line_starts_.push_back(i + 1);
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
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  if (n == 2 && c < 0xC2) return 0;  // overlong
  return n;
}

}  // namespace guardpolicy
