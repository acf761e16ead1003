#include <iostream>

#include "tessera/version.hpp"

int main() {
  std::cout << "tessera " << tessera::version() << "\n";
  return 0;
}
