// diagnostic.cpp: collecting and rendering diagnostics.
#include "guardpolicy/diagnostic.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "guardpolicy/display_text.h"

#include <fmt/format.h>

namespace guardpolicy {

const char* SeverityName(Severity s) {
  switch (s) {
    case Severity::kError: return "error";
    case Severity::kWarning: return "warning";
    case Severity::kNote: return "note";
  }
  return "error";
}

void Diagnostics::Error(std::string code, SourceRange range, std::string message,
                        std::string help) {
  Add({Severity::kError, std::move(code), std::move(message), std::move(range), std::move(help), {}});
}

void Diagnostics::Warning(std::string code, SourceRange range, std::string message,
                          std::string help, std::vector<RelatedLocation> related) {
  Add({Severity::kWarning, std::move(code), std::move(message), std::move(range), std::move(help),
       std::move(related)});
}

void Diagnostics::Note(std::string code, SourceRange range, std::string message, std::string help) {
  Add({Severity::kNote, std::move(code), std::move(message), std::move(range), std::move(help), {}});
}

void Diagnostics::Append(const Diagnostics& other) { InsertAt(items_.size(), other); }

void Diagnostics::InsertAt(size_t at, const Diagnostics& other) {
  items_.insert(items_.begin() + static_cast<std::ptrdiff_t>(std::min(at, items_.size())), other.items_.begin(),
                other.items_.end());
}

void Diagnostics::SortByPosition(size_t from) {
  const auto where = [](const Diagnostic& d) {
    return std::make_pair(
        d.range.file ? std::string_view(d.range.file->path()) : std::string_view(), d.range.begin);
  };
  std::stable_sort(items_.begin() + static_cast<std::ptrdiff_t>(std::min(from, items_.size())),
                   items_.end(),
                   [&](const Diagnostic& a, const Diagnostic& b) { return where(a) < where(b); });
}

bool Diagnostics::HasErrors() const {
  return std::any_of(items_.begin(), items_.end(),
                     [](const Diagnostic& d) { return d.severity == Severity::kError; });
}

bool Diagnostics::HasErrorsOrWarnings() const {
  return std::any_of(items_.begin(), items_.end(),
                     [](const Diagnostic& d) { return d.severity != Severity::kNote; });
}

namespace {

// Characters of a source line shown around the caret, at most: a longer line is cut to a
// window (the start of the range kKeepBefore characters in), marked with `...`.
constexpr size_t kMaxSnippetChars = 160;
constexpr size_t kKeepBefore = 60;

// The source line and a caret line under [begin, end) clipped to that line. Characters a
// terminal hides are escaped (display_text.h), and the caret moves with them.
std::string RenderSnippet(const SourceRange& r) {
  const LineCol lc = r.start();
  const std::string_view line = r.file->Line(lc.line);
  const uint32_t line_begin = r.file->Offset(lc.line, 0);
  const size_t begin = std::min<size_t>(r.begin - line_begin, line.size());
  const size_t end = std::max(begin + 1, std::min<size_t>(r.end > r.begin ? r.end - line_begin : 0, line.size()));
  std::vector<size_t> starts;  // byte offset of each character of the line
  for (size_t i = 0; i < line.size(); i += std::max<size_t>(1, Utf8SequenceLength(line, i))) starts.push_back(i);
  const size_t first_char = std::lower_bound(starts.begin(), starts.end(), begin) - starts.begin();
  size_t from = 0, to = starts.size();
  if (starts.size() > kMaxSnippetChars) {
    from = first_char > kKeepBefore ? first_char - kKeepBefore : 0;
    to = std::min(starts.size(), from + kMaxSnippetChars);
  }
  std::string text = from > 0 ? "..." : "";
  std::string caret(text.size(), ' ');
  for (size_t k = from; k < to; ++k) {
    const size_t at = starts[k];
    const size_t next = k + 1 < starts.size() ? starts[k + 1] : line.size();
    const std::string shown = DisplayChar(line.substr(at, next - at), /*keep_tab=*/true);
    text += shown;
    const bool escaped = IsInvisible(line.substr(at, next - at)) && shown != "\t";
    const size_t width = escaped ? shown.size() : 1;  // an escape is ASCII; one column a character
    if (at < begin) {
      caret += shown == "\t" ? std::string("\t") : std::string(width, ' ');
    } else if (at < end) {
      caret.append(width, '^');
    }
  }
  if (caret.find('^') == std::string::npos) caret += '^';  // an empty line, or the range starts at its end
  if (to < starts.size()) text += "...";
  const std::string gutter = std::to_string(lc.line);
  const std::string pad(gutter.size(), ' ');
  return fmt::format("  {} | {}\n  {} | {}\n", gutter, text, pad, caret);
}

// `text` with each user text in backticks shown escaped and, past kQuotedHead + kQuotedTail
// characters, cut in the middle: a 1 MB name is not echoed whole, and a long path keeps its
// file name.
constexpr size_t kQuotedHead = 100, kQuotedTail = 60;
std::string ShortenQuoted(std::string_view text) {
  std::string out;
  size_t at = 0;
  for (size_t open; (open = text.find('`', at)) != std::string_view::npos;) {
    const size_t close = text.find('`', open + 1);
    if (close == std::string_view::npos) break;
    out += text.substr(at, open + 1 - at);
    out += ElideMiddle(text.substr(open + 1, close - open - 1), kQuotedHead, kQuotedTail);
    out += '`';
    at = close + 1;
  }
  out += text.substr(at);
  return out;
}

}  // namespace

std::string RenderText(const Diagnostic& d) {
  const std::string where = d.range.valid() ? d.range.ToString() + ": " : "";
  std::string out =
      fmt::format("{}{}[{}]: {}\n", where, SeverityName(d.severity), d.code, ShortenQuoted(d.message));
  if (d.range.valid()) out += RenderSnippet(d.range);
  if (!d.help.empty()) out += fmt::format("  = help: {}\n", ShortenQuoted(d.help));
  for (const RelatedLocation& r : d.related) {
    out += fmt::format("  = note: {}: {}\n", r.range.ToString(), r.message);
    if (r.range.valid()) out += RenderSnippet(r.range);
  }
  return out;
}

std::string RenderText(const Diagnostics& ds) {
  std::string out;
  for (const Diagnostic& d : ds.items()) out += RenderText(d);
  return out;
}

namespace {

// Errors first (the reason it failed), then warnings and notes, each in source order.
Diagnostics ErrorsFirst(const Diagnostics& in) {
  Diagnostics out;
  for (const Diagnostic& d : in.items()) {
    if (d.severity == Severity::kError) out.Add(d);
  }
  for (const Diagnostic& d : in.items()) {
    if (d.severity != Severity::kError) out.Add(d);
  }
  return out;
}

}  // namespace

PolicyError::PolicyError(Diagnostics diagnostics)
    : std::runtime_error(RenderText(ErrorsFirst(diagnostics))), diagnostics_(ErrorsFirst(diagnostics)) {}

int EditDistance(std::string_view a, std::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions and adjacent swaps.
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string ClosestMatch(std::string_view name, const std::vector<std::string>& candidates) {
  const int limit = std::max<int>(2, static_cast<int>(name.size()) / 3);
  std::string best;
  int best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const int dist = EditDistance(name, c);
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  return best;
}

std::string WithArticle(std::string_view noun) {
  const bool vowel = !noun.empty() && std::string_view("aeiouAEIOU").find(noun[0]) != std::string_view::npos;
  return std::string(vowel ? "an " : "a ") + std::string(noun);
}

}  // namespace guardpolicy
