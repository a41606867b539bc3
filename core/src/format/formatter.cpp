// formatter.cpp: AST + comments -> canonical text.
#include "guardpolicy/formatter.h"

#include <algorithm>
#include <map>

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

// One item of a bracketed list laid out one per line (a parameter, a set member, a test
// field, a `use` argument).
struct ListItem {
  SourceRange range;
  std::string text;
};

// A bracketed list of a construct: its items and the source offsets of its brackets.
struct BracketList {
  std::string head;  // the construct's text up to and including the opening bracket
  std::vector<ListItem> items;
  uint32_t open = 0, close = 0;  // offsets of the brackets
  std::string tail;              // from the closing bracket on
};

// One line of output tied to the source range it came from. When comments lie inside the
// range, `lists` (the construct's bracketed lists, if any) are laid out one item per line
// so each comment stays beside what it followed; a comment elsewhere inside keeps the
// construct as written.
struct Construct {
  SourceRange range;
  std::string text;
  std::vector<BracketList> lists;
};

class Formatter {
 public:
  Formatter(const SourceFile& file, std::vector<Comment> comments)
      : file_(file), comments_(std::move(comments)) {}

  std::string Run(const Module& m) {
    Emit(0, {m.version_range, fmt::format("guardpolicy {}", m.version), {}}, true);
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
  static std::string Indent(int indent) { return std::string(indent * 2, ' '); }

  // Offset of the first `c` in [from, to) outside comments and string literals, or `to`.
  uint32_t FindCode(char c, uint32_t from, uint32_t to) const {
    const std::string& s = file_.text();
    for (uint32_t i = from; i < to && i < s.size(); ++i) {
      if (const Comment* k = CommentAt(i)) {
        i = k->offset + static_cast<uint32_t>(k->text.size()) - 1;
      } else if (s[i] == '"') {
        for (++i; i < s.size() && s[i] != '"' && s[i] != '\n' && s[i] != '\r'; ++i) {
          if (s[i] == '\\') ++i;
        }
      } else if (s[i] == c) {
        return i;
      }
    }
    return to;
  }
  // Offset of the last `c` in [from, to) outside comments, or `to`.
  uint32_t RFindCode(char c, uint32_t from, uint32_t to) const {
    uint32_t found = to;
    for (uint32_t i = FindCode(c, from, to); i < to; i = FindCode(c, i + 1, to)) found = i;
    return found;
  }
  const Comment* CommentAt(uint32_t offset) const {
    auto it = std::lower_bound(comments_.begin(), comments_.end(), offset,
                               [](const Comment& k, uint32_t o) { return k.offset < o; });
    return it != comments_.end() && it->offset == offset ? &*it : nullptr;
  }

  // Writes own-line comments that start before `offset`.
  void FlushComments(uint32_t offset, int indent) {
    while (next_comment_ < comments_.size() && comments_[next_comment_].offset < offset) {
      const Comment& c = comments_[next_comment_++];
      BlankIfGap(LineOf(c.offset));
      out_ += Indent(indent) + c.text + "\n";
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

  // The comments with offsets in [from, to), as indices.
  std::vector<size_t> CommentsIn(uint32_t from, uint32_t to) const {
    std::vector<size_t> out;
    for (size_t i = next_comment_; i < comments_.size() && comments_[i].offset < to; ++i) {
      if (comments_[i].offset >= from) out.push_back(i);
    }
    return out;
  }

  // `list` one item per line, each comment of `placed` beside what it followed: after the
  // opening bracket, after an item (on its line), or on its own line before the next item
  // or the closing bracket. Comments inside an item are not placed.
  std::string ListLayout(const BracketList& list, int indent, std::vector<size_t>& placed) const {
    const int open_line = LineOf(list.open);
    std::string head_comment;
    std::vector<std::string> trailing(list.items.size());
    std::vector<std::vector<std::string>> before(list.items.size() + 1);
    for (const size_t i : CommentsIn(list.open + 1, list.close)) {
      const Comment& c = comments_[i];
      size_t next = 0;  // the first item after the comment
      while (next < list.items.size() && list.items[next].range.begin < c.offset) ++next;
      if (next > 0 && list.items[next - 1].range.end > c.offset) continue;  // inside an item
      const bool after_prev = next > 0 && LineOf(list.items[next - 1].range.end - 1) == LineOf(c.offset);
      if (next == 0 && LineOf(c.offset) == open_line) {
        head_comment = "  " + c.text;
      } else if (after_prev && trailing[next - 1].empty()) {
        trailing[next - 1] = "  " + c.text;
      } else {
        before[next].push_back(c.text);
      }
      placed.push_back(i);
    }
    std::string out = list.head + head_comment + "\n";
    for (size_t k = 0; k <= list.items.size(); ++k) {
      for (const std::string& c : before[k]) out += Indent(indent + 1) + c + "\n";
      if (k < list.items.size()) out += Indent(indent + 1) + list.items[k].text + "," + trailing[k] + "\n";
    }
    return out + Indent(indent) + list.tail;
  }

  // The construct as written (line ends made `\n`, trailing blanks dropped): for comments
  // inside it that no list layout can keep in place.
  std::string Verbatim(const SourceRange& range) const {
    const std::string_view src = std::string_view(file_.text()).substr(range.begin, range.end - range.begin);
    std::string out;
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r' || src[i] == '\n') {
        while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
        out += '\n';
        if (src[i] == '\r' && i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        out += src[i];
      }
    }
    return out;
  }

  // The text of `c` at `indent`, keeping the comments inside its range in place.
  std::string Layout(int indent, const Construct& c) {
    const uint32_t begin = c.range.valid() ? c.range.begin : 0;
    const std::vector<size_t> inside = CommentsIn(begin, c.range.end);
    if (inside.empty()) return c.text;
    std::vector<size_t> placed;
    std::string text;
    bool ok = !c.lists.empty();
    for (size_t k = 0; ok && k < c.lists.size(); ++k) {
      const BracketList& list = c.lists[k];
      ok = list.open < list.close && list.close < c.range.end;
      if (ok) text = ListLayout(list, indent, placed);
    }
    // One list: its head and tail carry the rest of the construct's text.
    if (!ok || c.lists.size() != 1 || placed.size() != inside.size()) text = Verbatim(c.range);
    next_comment_ = inside.back() + 1;
    return text;
  }

  // Writes one construct with its leading and trailing comments.
  void Emit(int indent, const Construct& c, bool first = false) {
    const uint32_t begin = c.range.valid() ? c.range.begin : 0;
    FlushComments(begin, indent);
    if (!first) BlankIfGap(LineOf(begin));
    out_ += Indent(indent) + Layout(indent, c);
    const int end_line = LineOf(c.range.end > c.range.begin ? c.range.end - 1 : c.range.begin);
    if (next_comment_ < comments_.size() && LineOf(comments_[next_comment_].offset) == end_line &&
        comments_[next_comment_].offset >= begin) {
      out_ += "  " + comments_[next_comment_++].text;
    }
    out_ += "\n";
    last_line_ = end_line;
  }

  void Open(int indent, const Construct& header) {
    Emit(indent, header);
    after_open_ = true;
  }

  void Close(int indent, const SourceRange& whole) {
    const uint32_t brace = whole.end > 0 ? whole.end - 1 : 0;
    FlushComments(brace, indent + 1);
    after_open_ = false;
    out_ += Indent(indent) + "}";
    if (next_comment_ < comments_.size() && LineOf(comments_[next_comment_].offset) == LineOf(brace) &&
        comments_[next_comment_].offset > brace) {
      out_ += "  " + comments_[next_comment_++].text;
    }
    out_ += "\n";
    last_line_ = LineOf(brace);
  }

  static std::string ParamText(const Param& param) {
    return param.name + ": " + param.type_name + (param.default_value ? " = " + PrintLiteral(*param.default_value) : "");
  }

  static std::string Joined(const std::vector<ListItem>& items) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i].text;
    return out;
  }

  static std::string ArgsText(const std::vector<ListItem>& items) {
    return items.empty() ? "" : "(" + Joined(items) + ")";
  }

  // `policy NAME(PARAMS) extends BASE(ARGS) {`: its range ends at the body's `{`. Its bracketed
  // lists (the parameters, the base's arguments) keep the comments inside them in place.
  Construct PolicyHeader(const PolicyDecl& p) const {
    const std::string head = std::string(p.is_unsafe ? "unsafe " : "") + "policy " + p.name;
    const uint32_t brace =
        FindCode('{', p.extends ? p.extends->range.end : p.name_range.end, p.range.end);
    const uint32_t params_end = p.extends ? p.extends->range.begin : brace;
    std::vector<ListItem> params, args;
    for (const Param& param : p.params) params.push_back({param.range, ParamText(param)});
    if (p.extends) {
      for (const Arg& a : p.extends->args) {
        args.push_back({a.range, a.name + " = " + PrintLiteral(a.value)});
      }
    }
    const std::string base = p.extends ? " extends " + p.extends->target : "";
    Construct c{{p.range.file, p.range.begin, brace + 1},
                head + ArgsText(params) + base + ArgsText(args) + " {",
                {}};
    if (!params.empty()) {
      c.lists.push_back({head + "(", params, FindCode('(', p.name_range.end, params_end),
                         RFindCode(')', p.name_range.end, params_end),
                         ")" + base + ArgsText(args) + " {"});
    }
    if (!args.empty()) {
      const SourceRange& r = p.extends->range;
      c.lists.push_back({head + ArgsText(params) + base + "(", args, FindCode('(', r.begin, r.end),
                         RFindCode(')', r.begin, r.end), ") {"});
    }
    return c;
  }

  Construct UseConstruct(const Use& u) const {
    Construct c{u.range, "use " + u.target, {}};
    if (u.args.empty()) return c;
    BracketList list{c.text + "(", {}, FindCode('(', u.range.begin, u.range.end),
                     RFindCode(')', u.range.begin, u.range.end), ")"};
    for (const Arg& a : u.args) list.items.push_back({a.range, a.name + " = " + PrintLiteral(a.value)});
    c.text = fmt::format("{}({})", c.text, Joined(list.items));
    c.lists.push_back(std::move(list));
    return c;
  }

  // A rule; a set whose members have comments beside them is laid out one member a line.
  Construct RuleConstruct(const Rule& rule, int indent) {
    const std::string head = std::string(DecisionName(rule.decision)) + " when ";
    Construct c{rule.range, head + PrintExpr(*rule.condition), {}};
    if (CommentsIn(rule.range.begin, rule.range.end).empty()) return c;
    std::vector<size_t> placed;
    bool all_in_sets = true;
    const SetPrinter sets = [&](const Expr& in) -> std::string {
      const uint32_t lhs_end = in.kids[0]->range.end;
      BracketList list{"{", {}, FindCode('{', lhs_end, in.range.end), RFindCode('}', lhs_end, in.range.end), "}"};
      for (size_t i = 1; i < in.kids.size(); ++i) list.items.push_back({in.kids[i]->range, PrintExpr(*in.kids[i])});
      if (list.open >= list.close || CommentsIn(list.open + 1, list.close).empty()) return "";
      const size_t before = placed.size();
      std::string text = ListLayout(list, indent, placed);
      all_in_sets = all_in_sets && placed.size() - before == CommentsIn(list.open + 1, list.close).size();
      return text;
    };
    const std::string text = head + PrintExpr(*rule.condition, nullptr, &sets);
    if (all_in_sets && placed.size() == CommentsIn(rule.range.begin, rule.range.end).size()) {
      // Every comment is beside a set member: the layout keeps them all.
      next_comment_ = placed.empty() ? next_comment_ : placed.back() + 1;
      c.text = text;
    }
    return c;  // otherwise Layout keeps the rule as written
  }

  // A runtime line (runtime_settings.h) as the formatter writes it, placed by its range.
  static void AddRuntimeLines(const char* line, const std::vector<ConfigSetting>& config,
                              std::vector<Construct>& items) {
    for (const ConfigSetting& c : config)
      items.push_back(
          {c.range, std::string(line) + " " + c.knob + " = " + PrintLiteral(c.value), {}});
  }
  static void AddRuntimeLines(const char* line, const std::optional<StanceSetting>& s,
                              std::vector<Construct>& items) {
    if (s)
      items.push_back(
          {s->range, fmt::format("{} {} after {} calls", line, s->stance, s->after_calls), {}});
  }
  static void AddRuntimeLines(const char* line, const std::optional<VerifySetting>& v,
                              std::vector<Construct>& items) {
    if (v) items.push_back({v->range, fmt::format("{} every {} calls", line, v->every_calls), {}});
  }
  static void AddRuntimeLines(const char* line, const std::optional<OnViolationSetting>& a,
                              std::vector<Construct>& items) {
    if (a) items.push_back({a->range, std::string(line) + " " + a->action, {}});
  }
  static void AddRuntimeLines(const char* line, const std::optional<DispatchSetting>& d,
                              std::vector<Construct>& items) {
    if (d) items.push_back({d->range, std::string(line) + " " + d->mode, {}});
  }
  static void AddRuntimeLines(const char* line, const std::optional<OnErrorSetting>& e,
                              std::vector<Construct>& items) {
    if (e) items.push_back({e->item_range, std::string(line) + " " + OnErrorName(e->action), {}});
  }

  void FormatPolicy(const PolicyDecl& p) {
    std::vector<Construct> items;
    if (p.doc) items.push_back({p.doc_range, "doc " + PrintLiteral(Literal{Literal::Kind::kString, *p.doc, 0, false, {}}), {}});
    for (const Item& item : p.items) {
      if (item.kind == Item::Kind::kRule) {
        items.push_back({item.rule.range, "", {}});  // laid out when emitted, after the comments before it
      } else {
        items.push_back(UseConstruct(item.use));
      }
    }
    if (p.default_decision) items.push_back({p.default_range, std::string("default ") + DecisionName(*p.default_decision), {}});
    VisitRuntimeSettings(p.runtime, [&](const char* line, const auto& setting) {
      AddRuntimeLines(line, setting, items);
    });
    std::map<uint32_t, const Rule*> rules;
    for (const Item& item : p.items) {
      if (item.kind == Item::Kind::kRule) rules[item.rule.range.begin] = &item.rule;
    }
    std::stable_sort(items.begin(), items.end(),
                     [](const Construct& a, const Construct& b) { return a.range.begin < b.range.begin; });
    Open(0, PolicyHeader(p));
    for (Construct& c : items) {
      if (auto it = rules.find(c.range.begin); it != rules.end() && c.text.empty()) {
        FlushComments(c.range.begin, 1);
        c = RuleConstruct(*it->second, 1);
      }
      Emit(1, c);
    }
    Close(0, p.range);
  }

  void FormatTest(const TestDecl& t) {
    Open(0, {{t.range.file, t.range.begin, FindCode('{', t.range.begin, t.range.end) + 1}, "test " + t.target + " {", {}});
    for (const Expectation& ex : t.expectations) {
      const std::string head = fmt::format("expect {} {{", DecisionName(ex.decision));
      BracketList list{head, {}, FindCode('{', ex.range.begin, ex.range.end), ex.range.end - 1, "}"};
      for (const FieldInit& f : ex.fields) list.items.push_back({f.range, f.path + ": " + PrintLiteral(f.value)});
      const std::string text = list.items.empty() ? head + "}" : head + " " + Joined(list.items) + " }";
      Emit(1, {ex.range, text, {std::move(list)}});
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
