// structured.cpp: diagnostics as JSON (one object each) and as SARIF 2.1.0.
#include <nlohmann/json.hpp>

#include "guardpolicy/diagnostic.h"

namespace guardpolicy {
namespace {

using nlohmann::json;

json Position(const SourceRange& r) {
  json j = json::object();
  if (!r.valid()) return j;
  const LineCol start = r.start();
  const LineCol end = r.file->Locate(r.end);
  j["file"] = r.file->path();
  j["line"] = start.line;
  j["column"] = start.col;
  j["end_line"] = end.line;
  j["end_column"] = end.col;
  return j;
}

json SarifLocation(const SourceRange& r, const std::string& message = {}) {
  json loc = json::object();
  if (r.valid()) {
    const LineCol start = r.start();
    const LineCol end = r.file->Locate(r.end);
    loc["physicalLocation"] = {
        {"artifactLocation", {{"uri", r.file->path()}}},
        {"region", {{"startLine", start.line}, {"startColumn", start.col},
                    {"endLine", end.line}, {"endColumn", end.col}}}};
  }
  if (!message.empty()) loc["message"] = {{"text", message}};
  return loc;
}

const char* SarifLevel(Severity s) {
  switch (s) {
    case Severity::kError: return "error";
    case Severity::kWarning: return "warning";
    case Severity::kNote: return "note";
  }
  return "error";
}

}  // namespace

std::string RenderJson(const Diagnostics& ds) {
  json out = json::array();
  for (const Diagnostic& d : ds.items()) {
    json j = Position(d.range);
    j["severity"] = SeverityName(d.severity);
    j["code"] = d.code;
    j["message"] = d.message;
    j["help"] = d.help;
    j["related"] = json::array();
    for (const RelatedLocation& r : d.related) {
      json rel = Position(r.range);
      rel["message"] = r.message;
      j["related"].push_back(rel);
    }
    out.push_back(j);
  }
  return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";  // non-UTF-8 paths: U+FFFD
}

std::string RenderSarif(const Diagnostics& ds, const std::string& tool_version) {
  json rules = json::array();
  std::vector<std::string> seen;
  json results = json::array();
  for (const Diagnostic& d : ds.items()) {
    if (std::find(seen.begin(), seen.end(), d.code) == seen.end()) {
      seen.push_back(d.code);
      rules.push_back({{"id", d.code}, {"helpUri", "docs/diagnostics.md#" + d.code}});
    }
    json r = {{"ruleId", d.code},
              {"level", SarifLevel(d.severity)},
              {"message", {{"text", d.help.empty() ? d.message : d.message + " (help: " + d.help + ")"}}},
              {"locations", json::array({SarifLocation(d.range)})}};
    if (!d.related.empty()) {
      r["relatedLocations"] = json::array();
      for (const RelatedLocation& rel : d.related) r["relatedLocations"].push_back(SarifLocation(rel.range, rel.message));
    }
    results.push_back(r);
  }
  json sarif = {
      {"$schema", "https://json.schemastore.org/sarif-2.1.0.json"},
      {"version", "2.1.0"},
      {"runs", json::array({{{"tool", {{"driver", {{"name", "guardpolicy"},
                                                   {"version", tool_version},
                                                   {"informationUri", "docs/diagnostics.md"},
                                                   {"rules", rules}}}}},
                             {"results", results}}})}};
  return sarif.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace guardpolicy
