/* The public header from plain C99: a tiny dense forward on the CPU reference backend, checked
 * against a softmax written out here in double, and a malformed call that must be rejected. */
#include <stdio.h>
#include <string.h>

#include "flashattn/flashattn.h"

enum { kBatch = 1, kSeq = 3, kHeads = 2, kDim = 4 };
#define kElements (kBatch * kSeq * kHeads * kDim)
#define kScale 0.5 /* 1 / sqrt(kDim) */
/* The reference sums in f64 and rounds once to f32: a few f32 ulps of outputs of size ~1. */
#define kTolerance 1e-5

/* Element offset of (b, i, h, c) in a contiguous [batch, seq, heads, dim] tensor. */
static int at(int b, int i, int h, int c) { return ((b * kSeq + i) * kHeads + h) * kDim + c; }

/* Deterministic, non-trivial inputs in [-1, 1). */
static void fill(float* x, int n, int seed) {
  int e;
  for (e = 0; e < n; ++e) x[e] = (float)((e * 37 + seed * 11) % 29) / 14.5f - 1.0f;
}

static int fail(const char* what, flashattn_status status) {
  printf("test_c_api: %s: %s: %s\n", what, flashattn_status_string(status), flashattn_last_error());
  return 1;
}

/* e^x for the small |x| of this test (|x| < 8), without libm: the test links only libflashattn.
 * The Taylor series of x / 16 (|x / 16| < 0.5: 16 terms reach double precision), squared 4 times.
 */
static double exp_small(double x) {
  double term = 1.0, sum = 1.0;
  int n;
  for (n = 1; n <= 16; ++n) {
    term *= x / 16.0 / n;
    sum += term;
  }
  for (n = 0; n < 4; ++n) sum *= sum;
  return sum;
}

static double distance(double a, double b) { return a > b ? a - b : b - a; }

/* Row i of head h by the definition, softmax(q k^T / sqrt(d)) v: writes out and returns the
 * row's max score in *max and its sum of exp(s - max) in *sum (so lse = max + log(sum)). */
static void expected_row(const float* q, const float* k, const float* v, int i, int h, double* out,
                         double* max, double* sum) {
  double s[kSeq];
  int j, c;
  for (j = 0; j < kSeq; ++j) {
    double dot = 0.0;
    for (c = 0; c < kDim; ++c) dot += (double)q[at(0, i, h, c)] * k[at(0, j, h, c)];
    s[j] = kScale * dot;
    if (j == 0 || s[j] > *max) *max = s[j];
  }
  *sum = 0.0;
  for (j = 0; j < kSeq; ++j) *sum += exp_small(s[j] - *max);
  for (c = 0; c < kDim; ++c) {
    out[c] = 0.0;
    for (j = 0; j < kSeq; ++j) out[c] += exp_small(s[j] - *max) / *sum * v[at(0, j, h, c)];
  }
}

static int check_outputs(const float* q, const float* k, const float* v, const float* out,
                         const float* lse) {
  int i, h, c;
  for (i = 0; i < kSeq; ++i) {
    for (h = 0; h < kHeads; ++h) {
      double want[kDim], max, sum;
      expected_row(q, k, v, i, h, want, &max, &sum);
      for (c = 0; c < kDim; ++c) {
        if (!(distance(out[at(0, i, h, c)], want[c]) <= kTolerance)) {
          printf("test_c_api: out[0][%d][%d][%d] = %.9g, expected %.9g\n", i, h, c,
                 out[at(0, i, h, c)], want[c]);
          return 1;
        }
      }
      /* lse = max + log(sum), checked as exp(lse - max) = sum: no log needed. */
      if (!(distance(exp_small(lse[h * kSeq + i] - max) / sum, 1.0) <= kTolerance)) {
        printf("test_c_api: lse[0][%d][%d] = %.9g, expected log(%.9g) + %.9g\n", h, i,
               lse[h * kSeq + i], sum, max);
        return 1;
      }
    }
  }
  return 0;
}

int main(void) {
  float q[kElements], k[kElements], v[kElements], out[kElements], lse[kBatch * kHeads * kSeq];
  const int64_t shape[4] = {kBatch, kSeq, kHeads, kDim};
  const int64_t lse_shape[3] = {kBatch, kHeads, kSeq};
  flashattn_fwd_params params;
  flashattn_status status;

  fill(q, kElements, 1);
  fill(k, kElements, 2);
  fill(v, kElements, 3);
  memset(out, 0xff, sizeof out); /* NaN: every element must be written */
  memset(lse, 0xff, sizeof lse);

  flashattn_fwd_params_init(&params);
  params.q = flashattn_make_tensor(q, FLASHATTN_F32, 4, shape);
  params.k = flashattn_make_tensor(k, FLASHATTN_F32, 4, shape);
  params.v = flashattn_make_tensor(v, FLASHATTN_F32, 4, shape);
  params.out = flashattn_make_tensor(out, FLASHATTN_F32, 4, shape);
  params.lse = flashattn_make_tensor(lse, FLASHATTN_F32, 3, lse_shape);
  params.exec.backend = FLASHATTN_BACKEND_CPU_REFERENCE;

  status = flashattn_fwd(&params);
  if (status != FLASHATTN_SUCCESS) return fail("valid forward", status);
  if (check_outputs(q, k, v, out, lse) != 0) return 1;

  params.k.data = NULL; /* a required tensor without memory */
  status = flashattn_fwd(&params);
  if (status != FLASHATTN_INVALID_ARGUMENT) return fail("k.data = NULL not rejected", status);
  if (flashattn_last_error()[0] == '\0') {
    printf("test_c_api: INVALID_ARGUMENT came with an empty message\n");
    return 1;
  }
  printf("test_c_api: ok (%s; rejected call said \"%s\")\n", flashattn_version_string(),
         flashattn_last_error());
  return 0;
}
