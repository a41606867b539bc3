// ast_builder.h: ANTLR parse tree -> Module. Null-safe on trees with syntax errors.
#pragma once

#include <memory>
#include <vector>

#include "GuardPolicyParser.h"
#include "guardpolicy/ast.h"
#include "guardpolicy/diagnostic.h"

namespace guardpolicy::parser_internal {

// Maps ANTLR's code-point indices to byte offsets of the UTF-8 source.
class OffsetMap {
 public:
  explicit OffsetMap(const std::string& utf8);
  uint32_t ToByte(size_t code_point_index) const;

 private:
  std::vector<uint32_t> byte_of_;
};

// Conditions deeper than `max_expr_depth` are cut there with a GP0003 diagnostic.
std::unique_ptr<Module> BuildModule(gp_antlr::GuardPolicyParser::File_Context* tree,
                                    const SourceFilePtr& file, const OffsetMap& offsets,
                                    int max_expr_depth, Diagnostics& diags);

}  // namespace guardpolicy::parser_internal
