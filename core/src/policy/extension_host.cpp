// extension_host.cpp: running plugin extractors and filters over core field values.
#include "guardpolicy/extension_host.h"

#include "guardpolicy/plugin_values.h"

namespace guardpolicy {
namespace {

// The `reads` of a declaration for one entry, as ABI values (absent fields read as their
// zero value; an absent enum as no member).
std::vector<gp_value> Reads(const Schema& schema, const std::vector<int>& reads, const FieldValues& entry) {
  std::vector<gp_value> out;
  for (const int index : reads) {
    const FieldInfo& f = schema.fields()[index];
    auto it = entry.find(f.name);
    Value v = it != entry.end() ? it->second : Value{};
    if (it == entry.end() && f.type.kind == TypeKind::kEnum) v.i = -1;
    out.push_back(ToAbi(v));
  }
  return out;
}

// Plugin field `f` of one entry given by core values (no Python entry).
Value ExtractField(const FieldInfo& f, const Schema& schema, const FieldValues& entry, HostStrings& strings) {
  const std::vector<gp_value> reads = Reads(schema, f.reads, entry);
  const gp_entry_view view = strings.View(reads.data(), static_cast<uint32_t>(reads.size()), nullptr);
  gp_value out{};
  f.plugin->Extract(static_cast<size_t>(f.decl), view, out);
  Value v = FromAbi(out, f.type, schema);
  if (!v.s.empty()) v.s = strings.Keep(v.s);
  return v;
}

void FillFilter(const Program& program, size_t slot, const Schema& schema, const std::vector<FieldValues>& entries,
                std::vector<std::vector<Value>>& views, HostStrings& strings) {
  const FunctionInfo& fn = schema.functions()[schema.FindFunction(program.image().fields[slot])];
  std::vector<gp_value> params;
  for (const Constant& c : program.image().FieldArgs(slot)) params.push_back(ToAbi(Value{c.i, c.bits, c.s}));
  std::vector<std::vector<gp_value>> reads;
  std::vector<gp_entry_view> entry_views;
  for (const FieldValues& e : entries) reads.push_back(Reads(schema, fn.reads, e));
  for (const auto& r : reads) entry_views.push_back(strings.View(r.data(), static_cast<uint32_t>(r.size()), nullptr));
  std::vector<uint8_t> keep(entries.size(), 1);
  fn.plugin->RunFilter(static_cast<size_t>(fn.decl), params.data(), entry_views.data(),
                       static_cast<uint32_t>(entry_views.size()), keep.data());
  for (size_t i = 0; i < entries.size(); ++i) views[i][slot] = Value{keep[i] ? 0 : 1, 0, {}};
}

void FillFilterSlots(const Program& program, const Schema& schema, const std::vector<FieldValues>& entries,
                     std::vector<std::vector<Value>>& views, HostStrings& strings) {
  for (size_t slot = 0; slot < program.image().fields.size(); ++slot) {
    if (schema.FindField(program.image().fields[slot]) < 0 && schema.FindFunction(program.image().fields[slot]) >= 0) {
      FillFilter(program, slot, schema, entries, views, strings);
    }
  }
}

// A VM entry view over one entry's slot-ordered values (filter slots filled): a plugin
// field the entry does not give is extracted the first time the program reads it.
class HostEntryView {
 public:
  HostEntryView(const Program& program, const Schema& schema, const FieldValues& entry, std::vector<Value>& values,
                HostStrings& strings)
      : schema_(schema), entry_(entry), values_(values), strings_(strings), pending_(program.image().fields.size()) {
    for (size_t slot = 0; slot < program.image().fields.size(); ++slot) {
      const int field = schema.FindField(program.image().fields[slot]);
      if (field >= 0 && schema.fields()[field].plugin && !entry.count(program.image().fields[slot])) {
        pending_[slot] = &schema.fields()[field];
      }
    }
  }

  const Value& Get(int32_t slot) {
    const size_t s = static_cast<size_t>(slot);
    if (const FieldInfo* f = pending_[s]) {
      values_[s] = ExtractField(*f, schema_, entry_, strings_);  // may throw: then still pending
      pending_[s] = nullptr;
    }
    return values_[s];
  }

 private:
  const Schema& schema_;
  const FieldValues& entry_;
  std::vector<Value>& values_;
  HostStrings& strings_;
  std::vector<const FieldInfo*> pending_;  // slot -> plugin field still to extract, or null
};

}  // namespace

std::vector<Outcome> EvaluateEntries(const Program& program, const Schema& schema,
                                     const std::vector<FieldValues>& entries, HostStrings& strings) {
  std::vector<std::vector<Value>> views;
  for (const FieldValues& entry : entries) {
    views.push_back(Snapshot::View(program, entry));
    for (size_t slot = 0; slot < program.image().fields.size(); ++slot) {
      if (program.image().field_types[slot].kind == TypeKind::kEnum && !entry.count(program.image().fields[slot])) {
        views.back()[slot].i = -1;  // no member
      }
    }
  }
  FillFilterSlots(program, schema, entries, views, strings);
  std::vector<Outcome> outcomes;
  for (size_t i = 0; i < entries.size(); ++i) {
    HostEntryView view(program, schema, entries[i], views[i], strings);
    outcomes.push_back(EvaluateView(program, view));
  }
  return outcomes;
}

}  // namespace guardpolicy
