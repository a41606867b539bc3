// parse_fuzzer.cpp: source bytes -> parser (diagnostics, never a crash or a hang).
#include <cstddef>
#include <cstdint>

#include "guardpolicy/parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = std::make_shared<const guardpolicy::SourceFile>(
      "fuzz.gpol", std::string(reinterpret_cast<const char*>(data), size));
  guardpolicy::Parse(file);
  return 0;
}
