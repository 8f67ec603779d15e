// cuda_probe: prints "<device count> <reason>" (reason "-" when devices exist) and exits 0.
// The e2e script of gradsync-bench --device cuda asks it which behaviour to expect.
#include <cstdio>
#include <string>

#include "cuda/device.hpp"

int main() {
  std::string why;
  const int n = gradsync::cuda_device_count(&why);
  std::printf("%d %s\n", n, n > 0 ? "-" : why.c_str());
  return 0;
}
