// artifact.h: the serialized compiled policy, `.gpolc` (docs/bytecode.md, "File format").
//
// Layout (little-endian): magic "GPOLC\0\r\n" (8 bytes), u32 format version, u64 schema
// hash, u64 payload size, u64 FNV-1a-64 checksum of the payload, then the payload: the
// policy's metadata (name, unsafe, doc, on_error, stance, config, bound parameters) and
// its Program (fields with types, constants, sets, regexes, rules, rule entries, code).
// Reading checks magic, version, schema hash, size and checksum, decodes with bounds
// checks, checks field names and types against the schema, compiles the regexes and runs
// the verifier: a bad file is refused with a reason, never run.
#pragma once

#include <memory>
#include <string>

#include "guardpolicy/policy.h"

namespace guardpolicy {

inline constexpr uint32_t kArtifactFormatVersion = 2;

std::string SerializePolicy(const CompiledPolicy& policy, const Schema& schema);

// Throws PolicyError with one GP0006 diagnostic naming `origin` and the reason.
std::shared_ptr<const CompiledPolicy> DeserializePolicy(const std::string& bytes, const Schema& schema,
                                                        const std::string& origin);

// True when `bytes` starts with the .gpolc magic.
bool LooksLikeArtifact(const std::string& bytes);

}  // namespace guardpolicy
