// Links the installed libflashattn through find_package and makes one call.
#include <flashattn/flashattn.hpp>

#include <cstdio>
#include <vector>

int main() try {
  std::vector<float> q(2 * 4 * 8, 0.5f), out(q.size());
  flashattn::FwdParams p;
  p.q = p.k = p.v = flashattn::tensor(q.data(), {1, 2, 4, 8});
  p.out = flashattn::tensor(out.data(), {1, 2, 4, 8});
  flashattn::fwd(p);
  std::printf("flashattn %s from the installed package: out[0] = %g\n", flashattn_version_string(), out[0]);
  return out[0] == 0.5f ? 0 : 1;  // equal keys and values: every output equals the value
} catch (const flashattn::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
