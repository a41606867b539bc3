// source.h: policy source text and positions in it.
//
// A SourceFile owns the bytes of one policy file (or an in-memory source) and maps byte
// offsets to 1-based line and column numbers. A line ends at `\n`, `\r\n` or a lone `\r`. A SourceRange is a half-open byte range
// [begin, end) into one SourceFile. Both are immutable after construction and safe to
// share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace guardpolicy {

// A 1-based line and column; column counts bytes (not code points) from the line start.
struct LineCol {
  int line = 0;
  int col = 0;
};

class SourceFile {
 public:
  // `path` is what diagnostics print ("<string>" for in-memory sources); `text` is the raw
  // bytes, which may be any bytes (invalid UTF-8 is reported by the parser, not here).
  SourceFile(std::string path, std::string text);

  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }

  // Line and column of byte `offset` (clamped to [0, size]).
  LineCol Locate(uint32_t offset) const;
  // The text of 1-based `line` without its line terminator; empty when out of range.
  std::string_view Line(int line) const;
  // Byte offset of 1-based `line` and 0-based byte column `col0`, clamped to the text.
  uint32_t Offset(int line, int col0) const;

 private:
  std::string path_;
  std::string text_;
  std::vector<uint32_t> line_starts_;
};

using SourceFilePtr = std::shared_ptr<const SourceFile>;

// Half-open byte range [begin, end) in `file`. A default range has no file.
struct SourceRange {
  SourceFilePtr file;
  uint32_t begin = 0;
  uint32_t end = 0;

  bool valid() const { return file != nullptr; }
  LineCol start() const { return file ? file->Locate(begin) : LineCol{}; }
  // "path:line:col", or "<unknown>" without a file.
  std::string ToString() const;
};

// Length of the UTF-8 sequence starting at s[i] (1 to 4), or 0 when it is malformed
// (bad lead byte, truncated, bad continuation, overlong 2-byte form).
size_t Utf8SequenceLength(std::string_view s, size_t i);

}  // namespace guardpolicy
