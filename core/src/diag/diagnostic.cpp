// diagnostic.cpp: collecting and rendering diagnostics.
#include "guardpolicy/diagnostic.h"

#include <algorithm>

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

void Diagnostics::Append(const Diagnostics& other) {
  items_.insert(items_.end(), other.items_.begin(), other.items_.end());
}

bool Diagnostics::HasErrors() const {
  return std::any_of(items_.begin(), items_.end(),
                     [](const Diagnostic& d) { return d.severity == Severity::kError; });
}

namespace {

// `line` with each byte of a malformed UTF-8 sequence shown as `?` (same width in bytes).
std::string Printable(std::string_view line) {
  std::string out(line);
  for (size_t i = 0; i < out.size();) {
    const size_t n = Utf8SequenceLength(line, i);
    if (n == 0) {
      out[i++] = '?';
    } else {
      i += n;
    }
  }
  return out;
}

// The source line and a caret line under [begin, end) clipped to that line.
std::string RenderSnippet(const SourceRange& r) {
  const LineCol lc = r.start();
  const std::string_view line = r.file->Line(lc.line);
  const uint32_t line_begin = r.file->Offset(lc.line, 0);
  const uint32_t line_end = line_begin + static_cast<uint32_t>(line.size());
  const uint32_t end = std::clamp(r.end, r.begin + 1, std::max(line_end, r.begin + 1));
  const std::string gutter = std::to_string(lc.line);
  const std::string pad(gutter.size(), ' ');
  std::string caret(static_cast<size_t>(lc.col - 1), ' ');
  for (size_t i = 0; i < caret.size() && i < line.size(); ++i) {
    if (line[i] == '\t') caret[i] = '\t';
  }
  caret.append(std::max<uint32_t>(1, end - r.begin), '^');
  return fmt::format("  {} | {}\n  {} | {}\n", gutter, Printable(line), pad, caret);
}

}  // namespace

std::string RenderText(const Diagnostic& d) {
  const std::string where = d.range.valid() ? d.range.ToString() + ": " : "";
  std::string out = fmt::format("{}{}[{}]: {}\n", where, SeverityName(d.severity), d.code, d.message);
  if (d.range.valid()) out += RenderSnippet(d.range);
  if (!d.help.empty()) out += fmt::format("  = help: {}\n", d.help);
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
