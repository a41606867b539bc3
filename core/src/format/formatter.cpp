// formatter.cpp: AST + comments -> canonical text.
#include "guardpolicy/formatter.h"

#include <algorithm>

#include <fmt/format.h>

#include "guardpolicy/parser.h"
#include "guardpolicy/printer.h"

namespace guardpolicy {
namespace {

struct Comment {
  uint32_t offset = 0;
  std::string text;  // from `#` to the end of the line, trailing spaces removed
};

// Comments as the lexer sees them (grammar/GuardPolicy.g4: COMMENT and STRING end at `\r`
// or `\n`): `#` to the end of the line, outside string literals. A lone `\r` ends a
// comment too; what follows it is code.
std::vector<Comment> ScanComments(const std::string& s) {
  std::vector<Comment> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"') {
      for (++i; i < s.size() && s[i] != '"' && s[i] != '\n' && s[i] != '\r'; ++i) {
        if (s[i] == '\\') ++i;
      }
    } else if (s[i] == '#') {
      const size_t end = std::min(s.find_first_of("\r\n", i), s.size());
      std::string text = s.substr(i, end - i);
      while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.pop_back();
      out.push_back({static_cast<uint32_t>(i), std::move(text)});
      i = end;
    }
  }
  return out;
}

// One line of output tied to the source range it came from.
struct Construct {
  SourceRange range;
  std::string text;
};

class Formatter {
 public:
  Formatter(const SourceFile& file, std::vector<Comment> comments)
      : file_(file), comments_(std::move(comments)) {}

  std::string Run(const Module& m) {
    Emit(0, {m.version_range, fmt::format("guardpolicy {}", m.version)}, true);
    std::vector<std::pair<uint32_t, const void*>> decls;
    for (const PolicyDecl& p : m.policies) decls.emplace_back(p.range.begin, &p);
    for (const TestDecl& t : m.tests) decls.emplace_back(t.range.begin, &t);
    std::sort(decls.begin(), decls.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [offset, ptr] : decls) {
      blank_pending_ = true;
      if (const auto* p = FindPolicy(m, ptr)) FormatPolicy(*p);
      else FormatTest(*static_cast<const TestDecl*>(ptr));
    }
    FlushComments(static_cast<uint32_t>(file_.text().size()) + 1, 0);
    return out_;
  }

 private:
  static const PolicyDecl* FindPolicy(const Module& m, const void* ptr) {
    for (const PolicyDecl& p : m.policies) {
      if (&p == ptr) return &p;
    }
    return nullptr;
  }

  int LineOf(uint32_t offset) const { return file_.Locate(offset).line; }

  // Writes own-line comments that start before `offset`.
  void FlushComments(uint32_t offset, int indent) {
    while (next_comment_ < comments_.size() && comments_[next_comment_].offset < offset) {
      const Comment& c = comments_[next_comment_++];
      BlankIfGap(LineOf(c.offset));
      out_ += std::string(indent * 2, ' ') + c.text + "\n";
      last_line_ = LineOf(c.offset);
    }
  }

  void BlankIfGap(int line) {
    if (!out_.empty() && (blank_pending_ || (last_line_ > 0 && line > last_line_ + 1)) && !after_open_) {
      out_ += "\n";
    }
    blank_pending_ = false;
    after_open_ = false;
  }

  // Writes one construct with its leading and trailing comments.
  void Emit(int indent, const Construct& c, bool first = false) {
    const uint32_t begin = c.range.valid() ? c.range.begin : 0;
    FlushComments(begin, indent);
    if (!first) BlankIfGap(LineOf(begin));
    out_ += std::string(indent * 2, ' ') + c.text;
    const int end_line = LineOf(c.range.end > c.range.begin ? c.range.end - 1 : c.range.begin);
    if (next_comment_ < comments_.size() && LineOf(comments_[next_comment_].offset) == end_line &&
        comments_[next_comment_].offset >= begin) {
      out_ += "  " + comments_[next_comment_++].text;
    }
    out_ += "\n";
    last_line_ = end_line;
  }

  void Open(int indent, const SourceRange& header_range, const std::string& text) {
    Emit(indent, {header_range, text + " {"});
    after_open_ = true;
  }

  void Close(int indent, const SourceRange& whole) {
    const uint32_t brace = whole.end > 0 ? whole.end - 1 : 0;
    FlushComments(brace, indent + 1);
    after_open_ = false;
    out_ += std::string(indent * 2, ' ') + "}";
    if (next_comment_ < comments_.size() && LineOf(comments_[next_comment_].offset) == LineOf(brace) &&
        comments_[next_comment_].offset > brace) {
      out_ += "  " + comments_[next_comment_++].text;
    }
    out_ += "\n";
    last_line_ = LineOf(brace);
  }

  static std::string ParamsText(const PolicyDecl& p) {
    if (p.params.empty()) return "";
    std::string out = "(";
    for (size_t i = 0; i < p.params.size(); ++i) {
      const Param& param = p.params[i];
      out += (i ? ", " : "") + param.name + ": " + param.type_name;
      if (param.default_value) out += " = " + PrintLiteral(*param.default_value);
    }
    return out + ")";
  }

  static std::string UseText(const Use& u) {
    std::string out = "use " + u.target;
    if (u.args.empty()) return out;
    out += "(";
    for (size_t i = 0; i < u.args.size(); ++i) {
      out += (i ? ", " : "") + u.args[i].name + " = " + PrintLiteral(u.args[i].value);
    }
    return out + ")";
  }

  void FormatPolicy(const PolicyDecl& p) {
    std::vector<Construct> items;
    if (p.doc) items.push_back({p.doc_range, "doc " + PrintLiteral(Literal{Literal::Kind::kString, *p.doc, 0, false, {}})});
    for (const Item& item : p.items) {
      if (item.kind == Item::Kind::kRule) {
        items.push_back({item.rule.range, std::string(DecisionName(item.rule.decision)) + " when " +
                                              PrintExpr(*item.rule.condition)});
      } else {
        items.push_back({item.use.range, UseText(item.use)});
      }
    }
    if (p.default_decision) items.push_back({p.default_range, std::string("default ") + DecisionName(*p.default_decision)});
    for (const ConfigSetting& c : p.config) items.push_back({c.range, "config " + c.knob + " = " + PrintLiteral(c.value)});
    if (p.stance) {
      items.push_back({p.stance->range, fmt::format("stance {} after {} calls", p.stance->stance, p.stance->after_calls)});
    }
    if (p.on_error) items.push_back({p.on_error_item_range, std::string("on_error ") + OnErrorName(*p.on_error)});
    std::stable_sort(items.begin(), items.end(),
                     [](const Construct& a, const Construct& b) { return a.range.begin < b.range.begin; });
    const SourceRange header{p.range.file, p.range.begin, p.name_range.end};
    Open(0, header, std::string(p.is_unsafe ? "unsafe " : "") + "policy " + p.name + ParamsText(p));
    for (const Construct& c : items) Emit(1, c);
    Close(0, p.range);
  }

  void FormatTest(const TestDecl& t) {
    Open(0, {t.range.file, t.range.begin, t.range.begin + 1}, "test " + t.target);
    for (const Expectation& ex : t.expectations) {
      std::string fields;
      for (size_t i = 0; i < ex.fields.size(); ++i) {
        fields += (i ? ", " : "") + ex.fields[i].path + ": " + PrintLiteral(ex.fields[i].value);
      }
      Emit(1, {ex.range, fields.empty() ? fmt::format("expect {} {{}}", DecisionName(ex.decision))
                                        : fmt::format("expect {} {{ {} }}", DecisionName(ex.decision), fields)});
    }
    Close(0, t.range);
  }

  const SourceFile& file_;
  std::vector<Comment> comments_;
  size_t next_comment_ = 0;
  std::string out_;
  int last_line_ = 0;
  bool blank_pending_ = false;
  bool after_open_ = false;
};

}  // namespace

FormatResult Format(SourceFilePtr file, const CompileOptions& options) {
  FormatResult result;
  ParseResult parsed = Parse(file, options);
  result.diagnostics = std::move(parsed.diagnostics);
  if (!parsed.module || result.diagnostics.HasErrors()) return result;
  result.text = Formatter(*file, ScanComments(file->text())).Run(*parsed.module);
  return result;
}

}  // namespace guardpolicy
