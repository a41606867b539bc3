// diag_codes.h: every stable diagnostic code in one place (documented in docs/diagnostics.md).
//
// GP0xxx input and limits, GP1xxx syntax, GP2xxx names and types, GP3xxx policy analysis,
// GP4xxx policy selection and parameters at load time, GP9xxx defects of guardpolicy itself.
#pragma once

namespace guardpolicy::codes {

inline constexpr const char kIoError[] = "GP0001";           // file missing or unreadable
inline constexpr const char kSourceTooLarge[] = "GP0002";    // over CompileOptions::max_source_bytes
inline constexpr const char kNestingTooDeep[] = "GP0003";    // over CompileOptions::max_depth
inline constexpr const char kBadEncoding[] = "GP0004";       // invalid UTF-8 or a NUL byte
inline constexpr const char kTooManyRules[] = "GP0005";      // over CompileOptions::max_rules
inline constexpr const char kBadArtifact[] = "GP0006";       // a .gpolc refused on load

inline constexpr const char kSyntax[] = "GP1001";            // the parser rejected a token
inline constexpr const char kVersion[] = "GP1002";           // unsupported `guardpolicy N`
inline constexpr const char kBadEscape[] = "GP1003";         // unknown `\x` escape in a string
inline constexpr const char kIntRange[] = "GP1004";          // integer literal out of int64 range

inline constexpr const char kUnknownField[] = "GP2001";
inline constexpr const char kUnknownEnumLiteral[] = "GP2002";
inline constexpr const char kTypeMismatch[] = "GP2003";
inline constexpr const char kConditionNotBool[] = "GP2004";
inline constexpr const char kUnknownPolicy[] = "GP2005";
inline constexpr const char kBadParameter[] = "GP2006";      // unknown type, bad default, bad arg
inline constexpr const char kDuplicatePolicy[] = "GP2007";
inline constexpr const char kUseCycle[] = "GP2008";
inline constexpr const char kBadRegex[] = "GP2009";
// unknown knob, or a value below its `min`
inline constexpr const char kUnknownConfig[] = "GP2010";
inline constexpr const char kUnknownStance[] = "GP2011";
inline constexpr const char kUnknownGuardType[] = "GP2012";  // warning: open enum
inline constexpr const char kDuplicateItem[] = "GP2013";     // two `default`, `doc`, `stance`...
inline constexpr const char kUnknownOnError[] = "GP2014";
inline constexpr const char kUnknownTestField[] = "GP2015";
inline constexpr const char kUnknownFunction[] = "GP2016";    // no such plugin function/filter
inline constexpr const char kBadCall[] = "GP2017";            // argument count or type
inline constexpr const char kBadVerify[] = "GP2018";          // `verify every 0 calls`, unknown on_violation
inline constexpr const char kUnknownDispatch[] = "GP2019";    // `dispatch` mode not in the schema
inline constexpr const char kReleaseMember[] = "GP2020";      // note: a member only newer torch produces
inline constexpr const char kConfigRisk[] = "GP2021";  // warning: a risky value (schema `risks`)

inline constexpr const char kDropsWithoutUnsafe[] = "GP3001";
inline constexpr const char kUnsafeNeverDrops[] = "GP3002";  // warning
inline constexpr const char kShadowedRule[] = "GP3003";      // warning: earlier rules cover it
inline constexpr const char kAlwaysTrue[] = "GP3004";        // warning
inline constexpr const char kAlwaysFalse[] = "GP3005";       // warning: the rule never fires
inline constexpr const char kDuplicateRule[] = "GP3006";     // warning
inline constexpr const char kNoOpDrop[] = "GP3007";          // warning: GLOBAL_STATE covers it
inline constexpr const char kRiskyDrop[] = "GP3008";         // warning: what can go stale
inline constexpr const char kDropsEverything[] = "GP3009";   // warning
inline constexpr const char kUnusedParameter[] = "GP3010";   // warning
inline constexpr const char kImpossibleName[] = "GP3011";    // warning: `name` torch never spells so
inline constexpr const char kUnwatchableWatch[] = "GP3012";  // warning: a watch honoured as keep

inline constexpr const char kPolicySelection[] = "GP4001";   // no/ambiguous/unknown policy=
inline constexpr const char kParamValue[] = "GP4002";        // bad **params at load time

inline constexpr const char kInternal[] = "GP9001";          // a compiler defect: never the author's

}  // namespace guardpolicy::codes
