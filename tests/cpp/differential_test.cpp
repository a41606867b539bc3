// differential_test.cpp: random policies x random entries decide the same in the -O1 VM,
// the -O0 VM and the reference AST interpreter (property-based, seeded, reproducible).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>

#include "reference_interpreter.h"
#include "test_util.h"

namespace guardpolicy {
namespace {

using testing::FieldValues;

// Small pools so that conditions match often.
const std::vector<std::string> kNames = {"x", "self.fc", "G['CONFIG']", "self.layers3.weight", "kv_cache", ""};
const std::vector<std::string> kKinds = {"LocalSource", "AttrSource", "GlobalSource", "DictGetItemSource"};
const std::vector<std::string> kPatterns = {"^self\\\\.", "cache$", "G\\\\['(CONFIG|FLAGS)'\\\\]", "layers[0-9]"};
const std::vector<std::string> kGlobs = {"self.*", "*cache", "self.layers[0-9].*", "?"};

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  std::string Policy() {
    std::string out = "guardpolicy 1\nunsafe policy p(flag: bool = " + std::string(Coin() ? "true" : "false") +
                      ", limit: int = " + std::to_string(Pick(6)) + ") {\n";
    const int rules = 1 + Pick(6);
    for (int i = 0; i < rules; ++i) {
      if (Pick(8) == 0) {
        out += "  use " + std::string(Coin() ? "skip_guard_on_globals" : "keep_tensor_guards(keep_parameters = true)") + "\n";
        continue;
      }
      out += std::string("  ") + DecisionWord() + " when " + Cond(3) + "\n";
    }
    out += std::string("  default ") + DecisionWord() + "\n}\n";
    return out;
  }

  // keep, drop or watch: no pass may merge a watch with a keep.
  const char* DecisionWord() { return DecisionName(static_cast<Decision>(Pick(kDecisionCount))); }

  FieldValues Entry(std::deque<std::string>& store) {
    const Schema& s = *testing::TestSchema();
    FieldValues v;
    auto str = [&](const std::string& text) { return std::string_view(store.emplace_back(text)); };
    for (const FieldInfo& f : s.fields()) {
      switch (f.type.kind) {
        case TypeKind::kBool: v[f.name] = Value{Coin() ? 1 : 0, 0, {}}; break;
        case TypeKind::kInt: v[f.name] = Value{static_cast<int64_t>(Pick(8)) - 1, 0, {}}; break;
        case TypeKind::kString:
          v[f.name] = Value{0, 0, str(f.name == "source.kind" || f.name == "source.root" ? kKinds[Pick(kKinds.size())]
                                                                                        : kNames[Pick(kNames.size())])};
          break;
        case TypeKind::kEnum: {
          const auto& members = s.enums()[f.type.enum_index].members;
          if (Pick(10) == 0) v[f.name] = Value{-1, 0, str("_vendor_MATCH")};
          else {
            const int m = Pick(members.size());
            v[f.name] = Value{m, 0, str(members[m])};
          }
          break;
        }
        case TypeKind::kEnumSet: {
          Value set;
          for (int k = 0; k < 3; ++k) set.bits |= uint64_t{1} << Pick(s.enums()[f.type.enum_index].members.size());
          if (Coin()) set.s = str(std::string(kSetSeparator) + "_vendor_MATCH" + kSetSeparator);
          v[f.name] = set;
          break;
        }
        case TypeKind::kError: break;
      }
    }
    return v;
  }

 private:
  int Pick(size_t n) { return static_cast<int>(std::uniform_int_distribution<size_t>(0, n - 1)(rng_)); }
  bool Coin() { return Pick(2) == 0; }
  template <typename T>
  const T& One(const std::vector<T>& v) { return v[Pick(v.size())]; }

  std::string GuardType() {
    static const std::vector<std::string> types = {"TENSOR_MATCH", "ID_MATCH", "SHAPE_ENV", "GLOBAL_STATE",
                                                   "TYPE_MATCH", "CONSTANT_MATCH", "_vendor_MATCH"};
    return One(types);
  }
  std::string GuardSource() {
    static const std::vector<std::string> sources = {"LOCAL", "GLOBAL", "LOCAL_UNSPECIALIZED_NN_MODULE",
                                                     "LOCAL_UNSPECIALIZED_BUILTIN_NN_MODULE", "SHAPE_ENV"};
    return One(sources);
  }
  std::string Quote(const std::string& s) { return "\"" + s + "\""; }

  std::string Atom() {
    static const std::vector<std::string> bools = {
        "is_global", "has_value", "value.is_tensor", "value.is_parameter", "value.is_buffer", "value.is_module",
        "guard_source.is_local", "guard_source.is_unspecialized_nn_module",
        "guard_source.is_unspecialized_builtin_nn_module", "guard_source.is_fsdp_module", "flag"};
    switch (Pick(13)) {
      case 0: return One(bools);
      case 1: return "guard_type " + std::string(Coin() ? "==" : "!=") + " " + GuardType();
      case 2: return "guard_type " + std::string(Coin() ? "in" : "not in") + " {" + GuardType() + ", " + GuardType() + "}";
      case 3: return "guard_source == " + GuardSource();
      case 4: return "guard_source in {" + GuardSource() + ", " + GuardSource() + "}";
      case 5: {
        static const std::vector<std::string> ops = {"==", "!=", "<", "<=", ">", ">="};
        return "source.depth " + One(ops) + " " + (Coin() ? std::to_string(Pick(7) - 1) : std::string("limit"));
      }
      case 6: return "name " + std::string(Coin() ? "==" : "!=") + " " + Quote(One(kNames));
      case 7: {
        static const std::vector<std::string> ops = {"startswith", "endswith", "contains"};
        return "name " + One(ops) + " " + Quote(One(kNames).substr(0, 3));
      }
      case 8: return "name matches " + Quote(One(kPatterns));
      case 9: return "name glob " + Quote(One(kGlobs));
      case 10: return "derived_guard_types contains " + GuardType();
      case 11: return "source.kind in {" + Quote(One(kKinds)) + ", " + Quote(One(kKinds)) + "}";
      default: return Coin() ? "true" : "false";
    }
  }

  std::string Cond(int depth) {
    if (depth == 0 || Pick(3) == 0) return Atom();
    switch (Pick(4)) {
      case 0: return "not (" + Cond(depth - 1) + ")";
      case 1: return "(" + Cond(depth - 1) + ") and (" + Cond(depth - 1) + ")";
      case 2: return "(" + Cond(depth - 1) + ") or (" + Cond(depth - 1) + ")";
      default: return "(" + Cond(depth - 1) + ") == (" + Cond(depth - 1) + ")";
    }
  }

  std::mt19937 rng_;
};

std::vector<Value> View(const Program& p, const FieldValues& entry) {
  std::vector<Value> view;
  for (const std::string& f : p.image().fields) view.push_back(entry.at(f));
  view.emplace_back();
  return view;
}

TEST(Differential, O1AndO0VmAgreeWithTheReferenceInterpreter) {
  constexpr int kPolicies = 1000, kEntries = 100;
  Generator gen(20261129);
  int compared = 0, rules_removed = 0, specialized = 0, watched = 0;
  CompileOptions o0;
  o0.opt_level = 0;
  for (int i = 0; i < kPolicies; ++i) {
    const std::string source = gen.Policy();
    SCOPED_TRACE(source);
    Loader opt1(testing::TestSchema(), testing::kDataDir + "/std");
    Loader opt0(testing::TestSchema(), testing::kDataDir + "/std", o0);
    std::shared_ptr<const CompiledPolicy> p1, p0;
    try {
      p1 = opt1.Load(testing::Src(source), "p", {});
      p0 = opt0.Load(testing::Src(source), "p", {});
    } catch (const PolicyError& e) {
      FAIL() << e.what();
    }
    auto lint = opt1.Lint(testing::Src(source));
    rules_removed += static_cast<int>(lint.analysis.at(&lint.module->policies[0]).unreachable.size());
    // type_dispatch's specialized layout: one DISPATCH, first, and no other.
    const auto& code = p1->program().image().code;
    specialized += !code.empty() && code[0].op == Opcode::kDispatch &&
                   std::count_if(code.begin(), code.end(), [](const Instruction& ins) { return ins.op == Opcode::kDispatch; }) == 1;
    testing::ReferenceInterpreter ref(*testing::TestSchema(), opt1);
    for (int j = 0; j < kEntries; ++j) {
      std::deque<std::string> store;
      const FieldValues entry = gen.Entry(store);
      const Outcome expected = ref.Run(lint.module->policies[0], {}, entry);
      const Outcome a = Evaluate(p1->program(), View(p1->program(), entry).data());
      const Outcome b = Evaluate(p0->program(), View(p0->program(), entry).data());
      ASSERT_EQ(a.decision, expected.decision) << "policy " << i << " entry " << j;
      ASSERT_EQ(b.decision, expected.decision) << "policy " << i << " entry " << j;
      ASSERT_EQ(a.rule, expected.rule) << "policy " << i << " entry " << j;
      ASSERT_EQ(b.rule, expected.rule) << "policy " << i << " entry " << j;
      ++compared;
      watched += a.decision == Decision::kWatch;
    }
  }
  EXPECT_EQ(compared, kPolicies * kEntries);
  EXPECT_GT(rules_removed, 0) << "no generated policy exercised the unreachable_rules pass";
  EXPECT_GT(specialized, 20) << "too few generated policies got type_dispatch's specialized layout";
  EXPECT_GT(watched, kPolicies * kEntries / 10) << "too few entries were watched";
}

}  // namespace
}  // namespace guardpolicy
