// Grouped-query attention with a sliding window over bf16 host memory, forward and backward,
// through the C++ header (the README's C++ example).
#include <flashattn/flashattn.hpp>
#include <iostream>
#include <vector>

int main() try {
  const int64_t b = 1, s = 256, hq = 8, hkv = 2, d = 128;
  std::vector<flashattn::bfloat16> q(b * s * hq * d, {0x3f80}), k(b * s * hkv * d, {0x3f00}),
      v(k), out(q.size()), dout(q.size(), {0x3f80}), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<float> lse(b * hq * s);

  flashattn::FwdParams f;
  f.q = flashattn::tensor(q.data(), {b, s, hq, d});
  f.k = flashattn::tensor(k.data(), {b, s, hkv, d});
  f.v = flashattn::tensor(v.data(), {b, s, hkv, d});
  f.out = flashattn::tensor(out.data(), {b, s, hq, d});
  f.lse = flashattn::tensor(lse.data(), {b, hq, s});
  f.opts.causal = 1;
  f.opts.window_left = 64;
  flashattn::fwd(f);

  flashattn::BwdParams g;
  g.q = f.q, g.k = f.k, g.v = f.v, g.out = f.out, g.lse = f.lse, g.opts = f.opts;
  g.dout = flashattn::tensor(dout.data(), {b, s, hq, d});
  g.dq = flashattn::tensor(dq.data(), {b, s, hq, d});
  g.dk = flashattn::tensor(dk.data(), {b, s, hkv, d});
  g.dv = flashattn::tensor(dv.data(), {b, s, hkv, d});
  flashattn::bwd(g);
  std::cout << "lse[0] = " << lse[0] << "\n";
  return 0;
} catch (const flashattn::Error& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
