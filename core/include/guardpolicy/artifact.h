// artifact.h: the serialized compiled policy, `.gpolc` (docs/bytecode.md, "File format").
//
// Layout (little-endian): magic "GPOLC\0\r\n" (8 bytes), u32 format version, u64 schema
// hash, u64 payload size, u64 FNV-1a-64 checksum of the payload, then the payload: the
// policy's metadata (name, unsafe, doc, on_error, stance, verify, on_violation, on_recompile,
// dispatch, config, bound parameters) and
// its Program (fields with types, constants, sets, regexes, rules, rule entries, code).
// Reading checks magic, version, schema hash, size and checksum, decodes with bounds
// checks, checks field names and types against the schema, compiles the regexes and runs
// the verifier: a bad file is refused with a reason, never run.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "guardpolicy/compiled_policy.h"
#include "guardpolicy/diagnostic.h"
#include "guardpolicy/schema.h"

namespace guardpolicy {

// 5: the `on_recompile` line. 4: the `verify`, `on_violation` and `dispatch` lines. 3: the checksum
// and schema hash use FNV-1a-64's published offset basis (version 2 had a digit missing from it).
// 2: plugin functions and filter slots. A `watch` decision (Decision::kWatch, byte 2) did not
// change the layout, so version 5 holds it too: every version-5 file still loads, and a guardpolicy
// older than `watch` refuses one that watches ("rule decision is neither keep nor drop") rather
// than misreading it.
inline constexpr uint32_t kArtifactFormatVersion = 5;

std::string SerializePolicy(const CompiledPolicy& policy, const Schema& schema);

// Throws PolicyError with one GP0006 diagnostic naming `origin` and the reason.
std::shared_ptr<const CompiledPolicy> DeserializePolicy(const std::string& bytes, const Schema& schema,
                                                        const std::string& origin);

// True when the file `path` holding `bytes` is to be read as a .gpolc: it starts with the
// magic's name `GPOLC` (no policy source does), or `path` ends with `.gpolc` and `bytes` is a
// part of the magic (a file cut inside it, or empty). Loading such a file refuses it with
// GP0006 when it is not a whole, valid artifact.
bool LooksLikeArtifact(std::string_view bytes, std::string_view path = {});

}  // namespace guardpolicy
