// schema_test.cpp: the YAML schema and its errors.
#include <gtest/gtest.h>

#include "test_util.h"

namespace guardpolicy {
namespace {

TEST(Schema, DeclaresEveryDesignField) {
  const Schema& s = *testing::TestSchema();
  for (const char* f : {"name", "guard_type", "derived_guard_types", "is_global", "has_value",
                        "guard_source", "guard_source.is_local", "guard_source.is_unspecialized_nn_module",
                        "guard_source.is_unspecialized_builtin_nn_module",
                        "guard_source.is_specialized_nn_module", "guard_source.is_fsdp_module",
                        "source.kind", "source.root", "source.depth", "value.type", "value.is_tensor",
                        "value.is_parameter", "value.is_buffer", "value.is_module", "user_frame.file",
                        "user_frame.line", "user_frame.function"}) {
    const int i = s.FindField(f);
    ASSERT_GE(i, 0) << f;
    EXPECT_FALSE(s.fields()[i].doc.empty()) << f;
    EXPECT_FALSE(s.fields()[i].from.empty()) << f;
  }
  EXPECT_EQ(s.fields()[s.FindField("guard_type")].type.kind, TypeKind::kEnum);
  EXPECT_EQ(s.fields()[s.FindField("derived_guard_types")].type.kind, TypeKind::kEnumSet);
  EXPECT_EQ(s.fields()[s.FindField("source.depth")].type.kind, TypeKind::kInt);
  const EnumInfo& gs = s.enums()[s.FindEnum("GuardSource")];
  EXPECT_EQ(gs.members.size(), 17u);
  EXPECT_EQ(gs.Find("TEMP_LOCAL"), 16);
  EXPECT_FALSE(gs.open);
  EXPECT_TRUE(s.enums()[s.FindEnum("GuardType")].open);
  EXPECT_NE(s.FindConfig("install_free_tensors"), nullptr);
}

TEST(Schema, MalformedYamlNamesTheLine) {
  try {
    Schema::FromYaml("fields:\n  name: [unclosed\n", "bad.yaml");
    FAIL() << "no error";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml:"), std::string::npos) << e.what();
  }
}

TEST(Schema, UnknownFieldTypeIsAnError) {
  EXPECT_THROW(Schema::FromYaml("fields:\n  x:\n    type: float\n    doc: d\n    from: f\n", "s.yaml"),
               SchemaError);
}

TEST(Schema, HashChangesWithDeclarations) {
  const char* base = "fields:\n  x:\n    type: bool\n    doc: d\n    from: f\n";
  const char* other = "fields:\n  y:\n    type: bool\n    doc: d\n    from: f\n";
  EXPECT_NE(Schema::FromYaml(base, "a").Hash(), Schema::FromYaml(other, "b").Hash());
  EXPECT_EQ(Schema::FromYaml(base, "a").Hash(), Schema::FromYaml(base, "c").Hash());
}

}  // namespace
}  // namespace guardpolicy
