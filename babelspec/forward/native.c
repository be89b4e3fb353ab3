/* babelspec's row-wise glue between a bf16 decoder layer's matrix products, one call each where
 * the eager forward spends 8-20 small torch operations (babelspec/native.py says why and how
 * it is built). Every function works row by row with the same arithmetic for every row, so a
 * row gets the same bits alone as in any block. Values round to bfloat16 where the composite
 * torch operations round (round to nearest even), and are computed in float32 in between. */
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t bf16;

static inline float to_f(bf16 b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline bf16 to_bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
}

/* 1 / sqrt(mean(x^2) + eps), the squares summed in double (torch sums float32 in its own
 * order; a double sum is nearer the exact one than either float32 order) */
static inline float inv_rms(const bf16 *x, long n, float eps) {
    double sum = 0.0;
    for (long i = 0; i < n; i++) {
        float v = to_f(x[i]);
        sum += (double)(v * v);
    }
    return 1.0f / sqrtf((float)(sum / (double)n) + eps);
}

/* out = bf16(x * rsqrt(mean(x^2) + eps) * scale): Gemma-3's RMSNorm, scale = 1 + weight. */
void bs_rms(long rows, long n, const bf16 *x, long stride, const float *scale, float eps, bf16 *out) {
    for (long r = 0; r < rows; r++) {
        const bf16 *xr = x + r * stride;
        bf16 *o = out + r * n;
        float inv = inv_rms(xr, n, eps);
        for (long i = 0; i < n; i++) o[i] = to_bf(to_f(xr[i]) * inv * scale[i]);
    }
}

/* x = residual + rms(h) * scale1 (the sublayer's output norm and the residual add), then
 * y = rms(x) * scale2 (the next sublayer's input norm). */
void bs_add_rms(long rows, long n, const bf16 *residual, const bf16 *h, const float *scale1, float eps1,
                const float *scale2, float eps2, bf16 *x_out, bf16 *y_out) {
    for (long r = 0; r < rows; r++) {
        const bf16 *res = residual + r * n, *hr = h + r * n;
        bf16 *xo = x_out + r * n, *yo = y_out + r * n;
        float inv = inv_rms(hr, n, eps1);
        for (long i = 0; i < n; i++) xo[i] = to_bf(to_f(res[i]) + to_f(to_bf(to_f(hr[i]) * inv * scale1[i])));
        float inv2 = inv_rms(xo, n, eps2);
        for (long i = 0; i < n; i++) yo[i] = to_bf(to_f(xo[i]) * inv2 * scale2[i]);
    }
}

/* Queries and keys of a stacked q/k/v product, normed per head and rotated: for row r (of
 * ``rows``, stride ``stride``) and head h (of ``heads``, ``dim`` wide, queries then keys),
 * t = rms(row's head) * scale[h], then t * cos + rotate_half(t) * sin, each product rounded to
 * bf16 as torch rounds it. ``cos`` and ``sin`` are [rows, dim]; ``out`` is [heads, rows, dim]. */
void bs_qk_rope(long rows, long heads, long dim, const bf16 *qkv, long stride, const float *scale, float eps,
                const bf16 *cos, const bf16 *sin, bf16 *out) {
    long half = dim / 2;
    bf16 t[1024];
    if (dim > 1024) return;
    for (long r = 0; r < rows; r++) {
        const bf16 *c = cos + r * dim, *s = sin + r * dim;
        for (long h = 0; h < heads; h++) {
            const bf16 *x = qkv + r * stride + h * dim;
            const float *sc = scale + h * dim;
            bf16 *o = out + (h * rows + r) * dim;
            float inv = inv_rms(x, dim, eps);
            for (long i = 0; i < dim; i++) t[i] = to_bf(to_f(x[i]) * inv * sc[i]);
            for (long i = 0; i < dim; i++) {
                float rotated = i < half ? -to_f(t[i + half]) : to_f(t[i - half]);
                float a = to_f(to_bf(to_f(t[i]) * to_f(c[i])));
                float b = to_f(to_bf(rotated * to_f(s[i])));
                o[i] = to_bf(a + b);
            }
        }
    }
}

/* The certified output head's candidate set for one row (babelspec/forward/certified.py says
 * why it is exact). The approximate logits are a = a1 * t1 + a2 * t2 (the int8 product of the
 * two activation levels, in double), each within
 *   b = e * hr + s * ho + c * dn + extra + 2^-20 (|a1 t1| + |a2 t2|)
 * of the exact one (per token: e, s, c; per row: hr, ho, dn, extra). L is the k-th largest
 * lower bound a - b among the tokens not in ``skip`` (a min-heap of k doubles, ``heap``); the
 * candidates are the tokens not in ``skip`` whose upper bound a + b reaches L - 2^-6 (|L| + 1).
 * Writes their ids to ``out`` in ascending order and returns how many, or -1 once more than
 * ``cap`` would be written or fewer than k tokens are outside ``skip`` (the caller then takes
 * the full head). */
typedef struct {
    const float *a1, *a2, *e, *s, *c;
    double t1, t2, hr, ho, dn, extra;
} bound_args;

static void sift_down(double *heap, long k, long i) {
    for (;;) {
        long l = 2 * i + 1, r = l + 1, m = i;
        if (l < k && heap[l] < heap[m]) m = l;
        if (r < k && heap[r] < heap[m]) m = r;
        if (m == i) return;
        double t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

static inline double bound_at(const bound_args *g, long i, double *a) {
    double x1 = (double)g->a1[i] * g->t1, x2 = (double)g->a2[i] * g->t2;
    *a = x1 + x2;
    return (double)g->e[i] * g->hr + (double)g->s[i] * g->ho + (double)g->c[i] * g->dn + g->extra
           + 0x1p-20 * (fabs(x1) + fabs(x2));
}

long bs_certify(long v, long k, const float *a1, const float *a2, double t1, double t2, const float *e,
                const float *s, const float *c, double hr, double ho, double dn, double extra,
                const unsigned char *skip, double *heap, long cap, long *out) {
    bound_args g = {a1, a2, e, s, c, t1, t2, hr, ho, dn, extra};
    long filled = 0;
    for (long i = 0; i < v; i++) {
        if (skip[i]) continue;
        double a, b = bound_at(&g, i, &a);
        double lo = a - b;
        if (filled < k) {
            heap[filled++] = lo;
            if (filled == k)
                for (long j = k / 2 - 1; j >= 0; j--) sift_down(heap, k, j);
        } else if (lo > heap[0]) {
            heap[0] = lo;
            sift_down(heap, k, 0);
        }
    }
    if (filled < k) return -1;
    double threshold = heap[0] - 0x1p-6 * (fabs(heap[0]) + 1.0);
    long n = 0;
    for (long i = 0; i < v; i++) {
        if (skip[i]) continue;
        double a, b = bound_at(&g, i, &a);
        if (a + b >= threshold) {
            if (n == cap) return -1;
            out[n++] = i;
        }
    }
    return n;
}
