// diagnostic.h: author mistakes as values.
//
// A Diagnostic is a finding about a policy source: severity, a stable code (`GP` + 4
// digits, documented in docs/diagnostics.md), a lowercase message without a final period
// (user text in backticks), the source range it points at, and optional help. Stages
// append diagnostics to a Diagnostics list and go on; exceptions are kept for "could not
// run at all" (see PolicyError).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "guardpolicy/source.h"

namespace guardpolicy {

enum class Severity { kError, kWarning, kNote };

const char* SeverityName(Severity s);

// Another place a diagnostic points at, e.g. the earlier rule that shadows this one.
struct RelatedLocation {
  SourceRange range;
  std::string message;  // e.g. "covered by this rule"
};

struct Diagnostic {
  Severity severity = Severity::kError;
  std::string code;     // e.g. "GP1001"
  std::string message;  // e.g. "unknown field `nmae`"
  SourceRange range;
  std::string help;     // e.g. "did you mean `name`?"; may be empty
  std::vector<RelatedLocation> related;
};

class Diagnostics {
 public:
  void Add(Diagnostic d) { items_.push_back(std::move(d)); }
  void Error(std::string code, SourceRange range, std::string message, std::string help = {});
  void Warning(std::string code, SourceRange range, std::string message, std::string help = {},
               std::vector<RelatedLocation> related = {});
  void Note(std::string code, SourceRange range, std::string message, std::string help = {});
  void Append(const Diagnostics& other);
  void InsertAt(size_t at, const Diagnostics& other);  // before item `at` (at most size())
  // Orders the items from `from` on by where they begin (file path, then offset); stable:
  // items that begin at the same place keep their order.
  void SortByPosition(size_t from = 0);

  bool HasErrors() const;
  bool HasErrorsOrWarnings() const;  // anything but notes (`lint --werror`)
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<Diagnostic>& items() const { return items_; }

 private:
  std::vector<Diagnostic> items_;
};

// Renders one diagnostic as text:
//   file:line:col: error[GP1001]: message
//     12 |   keep when nmae == "x"
//        |             ^^^^
//     = help: did you mean `name`?
std::string RenderText(const Diagnostic& d);
// All diagnostics, in order, each rendered as above.
std::string RenderText(const Diagnostics& ds);

// All diagnostics as a JSON array of objects {file, line, column, end_line, end_column,
// severity, code, message, help, related: [{file, line, column, ..., message}]}; lines and
// columns 1-based (columns in bytes); position keys absent for diagnostics without a file.
std::string RenderJson(const Diagnostics& ds);
// All diagnostics as one SARIF 2.1.0 log (one run, tool "guardpolicy").
std::string RenderSarif(const Diagnostics& ds, const std::string& tool_version);

// Raised by the facade (policy.h) when a policy cannot be loaded; carries every
// diagnostic found. what() is the rendered text of all of them.
class PolicyError : public std::runtime_error {
 public:
  explicit PolicyError(Diagnostics diagnostics);
  const Diagnostics& diagnostics() const { return diagnostics_; }

 private:
  Diagnostics diagnostics_;
};

// Levenshtein distance between two identifiers, for "did you mean" suggestions.
int EditDistance(std::string_view a, std::string_view b);
// The candidate closest to `name` within distance max(1, |name|/3), or "" if none.
std::string ClosestMatch(std::string_view name, const std::vector<std::string>& candidates);
// `noun` after its English indefinite article, for messages: "a bool", "an int", "an enum".
std::string WithArticle(std::string_view noun);

}  // namespace guardpolicy
