/* Causal attention over f32 host memory through the C API (the README's C example). */
#include <flashattn/flashattn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  const int64_t b = 2, s = 128, h = 8, d = 64, n = b * s * h * d;
  float *q = malloc(n * sizeof(float)), *k = malloc(n * sizeof(float));
  float *v = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) q[i] = k[i] = v[i] = (float)(i % 17) / 17.0f - 0.5f;
  const int64_t shape[4] = {b, s, h, d};

  flashattn_fwd_params p;
  flashattn_fwd_params_init(&p);
  p.q = flashattn_make_tensor(q, FLASHATTN_F32, 4, shape);
  p.k = flashattn_make_tensor(k, FLASHATTN_F32, 4, shape);
  p.v = flashattn_make_tensor(v, FLASHATTN_F32, 4, shape);
  p.out = flashattn_make_tensor(out, FLASHATTN_F32, 4, shape);
  p.opts.causal = 1;
  flashattn_status st = flashattn_fwd(&p);
  if (st != FLASHATTN_SUCCESS) fprintf(stderr, "%s: %s\n", flashattn_status_string(st), flashattn_last_error());
  else printf("out[0] = %f\n", out[0]);
  free(q); free(k); free(v); free(out);
  return st == FLASHATTN_SUCCESS ? 0 : 1;
}
