// artifact_fuzzer.cpp: .gpolc bytes -> load (header, checksum, tables, verifier) -> run.
// The first byte of the input chooses whether the checksum is repaired, so the decoder
// and the verifier see corrupted payloads, not only checksum failures.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "guardpolicy/artifact.h"
#include "guardpolicy/fnv1a.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr size_t kHeader = 36;
  if ((data[0] & 1) && bytes.size() >= kHeader) {
    const uint64_t h = guardpolicy::Fnv1a64(std::string_view(bytes).substr(kHeader));
    for (int k = 0; k < 8; ++k) bytes[28 + k] = static_cast<char>((h >> (8 * k)) & 0xff);
  }
  try {
    auto policy = guardpolicy::DeserializePolicy(bytes, *guardpolicy::fuzz::FuzzSchema(), "fuzz.gpolc");
    guardpolicy::fuzz::RunOnSampleEntries(policy->program());
  } catch (const guardpolicy::PolicyError&) {
  }
  return 0;
}
