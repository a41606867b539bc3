// main.cpp: the standalone `guardpolicy` executable.
#include <iostream>

#include "cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return guardpolicy::cli::Run(args, std::cout, std::cerr);
}
