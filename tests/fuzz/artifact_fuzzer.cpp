// artifact_fuzzer.cpp: .gpolc bytes -> load (header, checksum, tables, verifier) -> run.
// The first byte of the input chooses whether the checksum is repaired, so the decoder
// and the verifier see corrupted payloads, not only checksum failures.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "guardpolicy/artifact.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr size_t kHeader = 36;
  if ((data[0] & 1) && bytes.size() >= kHeader) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t k = kHeader; k < bytes.size(); ++k) {
      h ^= static_cast<unsigned char>(bytes[k]);
      h *= 1099511628211ULL;
    }
    for (int k = 0; k < 8; ++k) bytes[28 + k] = static_cast<char>((h >> (8 * k)) & 0xff);
  }
  try {
    auto policy = guardpolicy::DeserializePolicy(bytes, *guardpolicy::fuzz::FuzzSchema(), "fuzz.gpolc");
    guardpolicy::fuzz::RunOnSampleEntries(policy->program());
  } catch (const guardpolicy::PolicyError&) {
  }
  return 0;
}
