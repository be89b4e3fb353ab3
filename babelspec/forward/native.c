/* babelspec's row-wise glue between a bf16 decoder layer's matrix products, one call each where
 * the eager forward spends 8-20 small torch operations (babelspec/native.py says why and how
 * it is built). Every function works row by row with the same arithmetic for every row, so a
 * row gets the same bits alone as in any block. Values round to bfloat16 where the composite
 * torch operations round (round to nearest even), and are computed in float32 in between. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

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
 * order; a double sum is nearer the exact one than either float32 order): four sums, of the
 * elements i = 0, 1, 2, 3 mod 4, added in that order at the end, so the adds overlap */
static inline float inv_rms(const bf16 *x, long n, float eps) {
    double sum[4] = {0.0, 0.0, 0.0, 0.0};
    long i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++) {
            float v = to_f(x[i + l]);
            sum[l] += (double)(v * v);
        }
    for (int l = 0; i < n; i++, l++) {
        float v = to_f(x[i]);
        sum[l] += (double)(v * v);
    }
    double total = ((sum[0] + sum[1]) + sum[2]) + sum[3];
    return 1.0f / sqrtf((float)(total / (double)n) + eps);
}

/* Rows of a block are shared among torch's threads (the OpenMP runtime torch loaded, so its
 * threads, not new ones) where a block has at least this many; each row's arithmetic is the
 * same on any thread. */
#define GLUE_THREAD_ROWS 2

/* out = bf16(x * rsqrt(mean(x^2) + eps) * scale): Gemma-3's RMSNorm, scale = 1 + weight. */
void bs_rms(long rows, long n, const bf16 *x, long stride, const float *scale, float eps, bf16 *out) {
#pragma omp parallel for schedule(static) if (rows >= GLUE_THREAD_ROWS)
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
#pragma omp parallel for schedule(static) if (rows >= GLUE_THREAD_ROWS)
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
    if (dim > 1024) return;
#pragma omp parallel for schedule(static) if (rows >= GLUE_THREAD_ROWS)
    for (long r = 0; r < rows; r++) {
        bf16 t[1024];
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
 * why it is exact). The approximate logits are a = a1 t1 + a2 t2 (the int8 sums of the two
 * activation levels under their scales), each within
 *   b = w + extra + 2^-18 (|a1 t1| + |a2 t2| + w + extra),   w = e hr + s ho + c dn
 * of the exact one (per token: e, s, c, in bf16 rounded up; per row: hr, ho, dn, extra); the
 * last term is more than every float32 rounding on the way, in any order of the sums. Tokens
 * left out come with a1 = -2^100 (their bounds then lie far below any logit). L is at most the
 * k-th largest lower bound a - b: the k-th largest of the maxima of blocks of 128 tokens (k
 * blocks hold a token at least that high), or of all lower bounds where there are few blocks.
 * The candidates are the tokens whose upper bound a + b reaches L - 2^-6 (|L| + 1); only
 * blocks whose largest upper bound reaches it are read again. Writes their ids to ``out`` in
 * ascending order and returns how many, or -1 once more than ``cap`` would be written (the
 * caller then takes the full head). ``scratch`` holds v + 2 * (v / 128 + 2) floats. */
#define CERTIFY_BLOCK 128

typedef struct {
    const float *a1, *a2;
    const bf16 *e, *s, *c;
    float t1, t2, hr, ho, dn, extra;
} bound_args;

/* the lower and upper bound of token i (inlined into the vectorised loops below; the bounds'
 * slack covers any order of the sums) */
#define BF16_TO_F(x) (((union { uint32_t u; float f; }){.u = (uint32_t)(x) << 16}).f)
#define CERTIFY_BOUNDS(g, i, lo, hi)                                                                      \
    float x1 = (g)->a1[i] * (g)->t1, x2 = (g)->a2[i] * (g)->t2;                                         \
    float w = BF16_TO_F((g)->e[i]) * (g)->hr + BF16_TO_F((g)->s[i]) * (g)->ho + BF16_TO_F((g)->c[i]) * (g)->dn; \
    float b = w + (g)->extra + 0x1p-18f * (fabsf(x1) + fabsf(x2) + w + (g)->extra);                      \
    float lo = x1 + x2 - b, hi = x1 + x2 + b

/* the largest lower and upper bounds of tokens [start, end) */
__attribute__((optimize("O3", "fast-math"))) static void block_bounds(const bound_args *g, long start, long end,
                                                                    float *low_max, float *up_max) {
    float low = -FLT_MAX, up = -FLT_MAX;
    for (long i = start; i < end; i++) {
        CERTIFY_BOUNDS(g, i, lo, hi);
        low = lo > low ? lo : low;
        up = hi > up ? hi : up;
    }
    *low_max = low;
    *up_max = up;
}

/* every token's lower bound into lower[0..v) */
__attribute__((optimize("O3", "fast-math"))) static void all_lower(const bound_args *g, long v, float *lower) {
    for (long i = 0; i < v; i++) {
        CERTIFY_BOUNDS(g, i, lo, hi);
        (void)hi;
        lower[i] = lo;
    }
}

/* the k-th largest of x[0..n) (k <= n), reordering x: quickselect */
static float kth_largest(float *x, long n, long k) {
    long lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = x[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (x[i] > pivot) i++;
            while (x[j] < pivot) j--;
            if (i <= j) {
                float t = x[i];
                x[i++] = x[j];
                x[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return x[want];
    }
    return x[want];
}

long bs_certify(long v, long k, const float *a1, const float *a2, float t1, float t2, const bf16 *e,
                const bf16 *s, const bf16 *c, float hr, float ho, float dn, float extra, float *scratch, long cap,
                long *out) {
    bound_args g = {a1, a2, e, s, c, t1, t2, hr, ho, dn, extra};
    long blocks = (v + CERTIFY_BLOCK - 1) / CERTIFY_BLOCK, few = blocks < 4 * k;
    float *lower_max = scratch + v, *upper_max = scratch + v + blocks + 1;
    for (long j = 0; j < blocks; j++) {
        long end = (j + 1) * CERTIFY_BLOCK < v ? (j + 1) * CERTIFY_BLOCK : v;
        block_bounds(&g, j * CERTIFY_BLOCK, end, lower_max + j, upper_max + j);
    }
    if (few) all_lower(&g, v, scratch);
    long n = few ? v : blocks;
    if (k > n) return -1;
    float L = kth_largest(few ? scratch : lower_max, n, k);
    float threshold = L - 0x1p-6f * (fabsf(L) + 1.0f);
    n = 0;
    for (long j = 0; j < blocks; j++) {
        if (!(upper_max[j] >= threshold)) continue;
        long end = (j + 1) * CERTIFY_BLOCK < v ? (j + 1) * CERTIFY_BLOCK : v;
        for (long i = j * CERTIFY_BLOCK; i < end; i++) {
            CERTIFY_BOUNDS(&g, i, lo, hi);
            (void)lo;
            if (hi >= threshold) {
                if (n == cap) return -1;
                out[n++] = i;
            }
        }
    }
    return n;
}

#define DOT_LANES 16

/* Each function below is built for AVX-512, AVX2 with FMA and the baseline, and the loader picks
 * one for the CPU once: every call in a process runs the same instructions, so a row's bits do
 * not depend on the block around it (the clones may differ from each other, by FMA). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* GCC 11 (Ubuntu 22.04's) dispatches on instruction sets, not on x86-64 levels */
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

typedef struct {
    long n, groups, dim, past, span;
    const bf16 *q;
    const bf16 *keys, *values;
    const long *lo;
    const unsigned char *mask;
    float scaling;
    bf16 *out;
    long heads, kv, first_row, row_step;
    long head0, nheads; /* the query heads of key/value head kv this job computes: head0 .. head0 + nheads */
    int failed;
} attend_job;

/* 16 floats side by side (GCC's vector extensions: each lane its own sequence of operations,
 * lowered to whatever vectors the clone's target has) */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float f32x16 __attribute__((vector_size(64)));

static inline __attribute__((always_inline)) f32x16 load16(const float *x) {
    f32x16 f;
    memcpy(&f, x, sizeof f);
    return f;
}

/* 16 bf16 values as floats (exact: a bf16 is a float's upper half) */
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
static inline __attribute__((always_inline)) f32x16 load16b(const bf16 *x) {
    u16x16 h;
    memcpy(&h, x, sizeof h);
    u32x16 w = __builtin_convertvector(h, u32x16) << 16;
    f32x16 f;
    memcpy(&f, &w, sizeof f);
    return f;
}

/* the sum of one dot product's 16 partial sums, in lane order */
static inline __attribute__((always_inline)) float lane_sum(f32x16 p) {
    float sum = 0.0f;
    for (int l = 0; l < DOT_LANES; l++) sum += p[l];
    return sum;
}

/* q . k: 16 partial sums over dim (lane l takes elements l, l + 16, ...), then lane_sum; the
 * forms below run several of these side by side, each with the same operations as alone. */
static inline __attribute__((always_inline)) float dot1(const float *q, const bf16 *k, long dim) {
    f32x16 p = {0};
    long d = 0;
    for (; d + DOT_LANES <= dim; d += DOT_LANES) p += load16(q + d) * load16b(k + d);
    for (int l = 0; d < dim; d++, l++) p[l] += q[d] * to_f(k[d]);
    return lane_sum(p);
}

#define VALUE_CHUNK 64 /* output elements accumulated in registers over every key */
#define HEADS 4           /* query heads of one key/value head computed side by side */

/* scores of ``HEADS`` query heads (q: [HEADS, dim]) against two keys: eight dot products side by
 * side, each with dot1's operations */
static inline __attribute__((always_inline)) void dot_heads2(const float *q, const bf16 *k0, const bf16 *k1,
                                                             long dim, float *s, long stride) {
    f32x16 p[2][HEADS] = {{{0}}};
    long d = 0;
    for (; d + DOT_LANES <= dim; d += DOT_LANES) {
        f32x16 x0 = load16b(k0 + d), x1 = load16b(k1 + d);
        for (int h = 0; h < HEADS; h++) {
            f32x16 y = load16(q + h * dim + d);
            p[0][h] += y * x0;
            p[1][h] += y * x1;
        }
    }
    for (int h = 0; h < HEADS; h++) {
        for (long e = d, l = 0; e < dim; e++, l++) {
            p[0][h][l] += q[h * dim + e] * to_f(k0[e]);
            p[1][h][l] += q[h * dim + e] * to_f(k1[e]);
        }
        s[h * stride] = lane_sum(p[0][h]);
        s[h * stride + 1] = lane_sum(p[1][h]);
    }
}

/* One row: its ``groups`` query heads (float, [groups, dim]) over the keys ``idx[0..count)``
 * (ascending cache positions): scores, exp(s - max), their sum, and the weighted values, each
 * element's sum over the keys in key order, times 1 / sum, to bf16 in ``out`` [groups, dim].
 * Heads run HEADS at a time where they can, one at a time otherwise: the same operations. */
static inline __attribute__((always_inline)) void attend_row(const attend_job *j, const float *qf, const long *idx,
                                                             long count, float *s, bf16 *out) {
    long dim = j->dim, groups = j->nheads, h = 0;
    for (; h + HEADS <= groups; h += HEADS) {
        long c = 0;
        for (; c + 2 <= count; c += 2)
            dot_heads2(qf + h * dim, j->keys + idx[c] * dim, j->keys + idx[c + 1] * dim, dim, s + h * count + c, count);
        for (; c < count; c++)
            for (long g = h; g < h + HEADS; g++) s[g * count + c] = dot1(qf + g * dim, j->keys + idx[c] * dim, dim);
    }
    for (; h < groups; h++)
        for (long c = 0; c < count; c++) s[h * count + c] = dot1(qf + h * dim, j->keys + idx[c] * dim, dim);
    float inv[64];
    for (h = 0; h < groups; h++) {
        float *sh = s + h * count, m = -INFINITY, total = 0.0f;
        for (long c = 0; c < count; c++) {
            sh[c] *= j->scaling;
            m = sh[c] > m ? sh[c] : m;
        }
        for (long c = 0; c < count; c++) {
            sh[c] = expf(sh[c] - m);
            total += sh[c];
        }
        inv[h] = 1.0f / total;
    }
    long d0 = 0;
    for (; d0 + VALUE_CHUNK <= dim; d0 += VALUE_CHUNK) {
        h = 0;
        for (; h + HEADS <= groups; h += HEADS) {
            f32x16 a[HEADS][4] = {{{0}}};
            for (long c = 0; c < count; c++) {
                const bf16 *v = j->values + idx[c] * dim + d0;
                f32x16 v0 = load16b(v), v1 = load16b(v + 16), v2 = load16b(v + 32), v3 = load16b(v + 48);
                for (int g = 0; g < HEADS; g++) {
                    f32x16 e = {0};
                    e += s[(h + g) * count + c];
                    a[g][0] += e * v0, a[g][1] += e * v1, a[g][2] += e * v2, a[g][3] += e * v3;
                }
            }
            for (int g = 0; g < HEADS; g++)
                for (int q = 0; q < 4; q++)
                    for (int l = 0; l < DOT_LANES; l++)
                        out[(h + g) * dim + d0 + 16 * q + l] = to_bf(a[g][q][l] * inv[h + g]);
        }
        for (; h < groups; h++) {
            f32x16 a[4] = {{0}};
            for (long c = 0; c < count; c++) {
                const bf16 *v = j->values + idx[c] * dim + d0;
                f32x16 e = {0};
                e += s[h * count + c];
                a[0] += e * load16b(v), a[1] += e * load16b(v + 16), a[2] += e * load16b(v + 32), a[3] += e * load16b(v + 48);
            }
            for (int q = 0; q < 4; q++)
                for (int l = 0; l < DOT_LANES; l++) out[h * dim + d0 + 16 * q + l] = to_bf(a[q][l] * inv[h]);
        }
    }
    for (; d0 < dim; d0++)
        for (h = 0; h < groups; h++) {
            float a = 0.0f;
            for (long c = 0; c < count; c++) a += s[h * count + c] * to_f(j->values[idx[c] * dim + d0]);
            out[h * dim + d0] = to_bf(a * inv[h]);
        }
}

CLONES static void attend_rows(attend_job *j) {
    long groups = j->groups, dim = j->dim, n = j->n;
    float *qf = malloc(sizeof(float) * groups * dim);
    float *scores = malloc(sizeof(float) * groups * j->span);
    long *idx = malloc(sizeof(long) * j->span);
    if (!qf || !scores || !idx) {
        j->failed = 1;
        goto done;
    }
    for (long i = j->first_row; i < n; i += j->row_step) {
        long count = 0;
        for (long p = j->lo[i]; p < j->past; p++) idx[count++] = p;
        for (long b = 0; b < n; b++)
            if (j->mask[i * n + b]) idx[count++] = j->past + b;
        for (long h = 0; h < j->nheads; h++) {
            const bf16 *qr = j->q + ((j->kv * groups + j->head0 + h) * n + i) * dim;
            for (long d = 0; d < dim; d++) qf[h * dim + d] = to_f(qr[d]);
        }
        attend_row(j, qf, idx, count, scores, j->out + (i * j->heads + j->kv * groups + j->head0) * dim);
    }
done:
    free(qf), free(scores), free(idx);
}

/* jobs[0..threads) on torch's OpenMP threads, one each; where fewer are granted, in turn on one */
static void run_attend(attend_job *jobs, long threads) {
#if defined(_OPENMP)
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
        {
            if (omp_get_num_threads() == threads) attend_rows(&jobs[omp_get_thread_num()]);
            else if (omp_get_thread_num() == 0)
                for (long t = 0; t < threads; t++) attend_rows(&jobs[t]);
        }
        return;
    }
#endif
    for (long t = 0; t < threads; t++) attend_rows(&jobs[t]);
}

/* Attention of a block's n query rows over a float32 cache of bf16 keys and values, each row with a decode step's
 * arithmetic: row i's scores, softmax and weighted sum run over the keys it sees in ascending
 * cache order, with the same operations in the same order whatever n is, which other rows the
 * block holds, which thread computes it and how many keys are cached after the row's own. So a
 * row of a verification chain, a token tree, a prefill chunk or a batched slot gets the bits of
 * the same row computed alone after the same cache.
 *
 * q: [kv_heads * groups, n, dim] bf16 (query heads of key/value head g are g*groups ..);
 * keys, values: [kv_heads, cap, dim] bf16, the block's own keys already cached at past .. past+n (each
 * read as the float it is exactly: the arithmetic is float32's);
 * row i sees cache positions p in [lo[i], past) and block entries j (at past + j) with
 * mask[i * n + j] != 0; out: [n, kv_heads * groups, dim] bf16. Scores are (q . k) * scaling in
 * float32, exp(s - max) by expf, summed in key order; the output is sum_p e_p v_p in key order,
 * times 1 / sum. The rows of a block of 2 or more are shared among ``threads`` threads (torch's OpenMP
 * ones); a lone row's query heads are. Returns 0, or -1 when memory could not be had. */
int bs_attend(long n, long kv_heads, long groups, long dim, const bf16 *q, const bf16 *keys, const bf16 *values,
              long cap, long past, const long *lo, const unsigned char *mask, float scaling, bf16 *out,
              long threads) {
    if (groups > 64) return -1;
    /* a lone row (a decode step) shares its query heads among the threads instead: each head's
     * arithmetic is the same whichever thread runs it and with whichever heads beside it */
    int by_heads = n < GLUE_THREAD_ROWS;
    if (threads > (by_heads ? groups : n)) threads = by_heads ? groups : n;
    if (threads > 64) threads = 64;
    if (threads < 1) threads = 1;
    attend_job jobs[64];
    int failed = 0;
    for (long kv = 0; kv < kv_heads; kv++) {
        for (long t = 0; t < threads; t++) {
            long h0 = by_heads ? t * groups / threads : 0, h1 = by_heads ? (t + 1) * groups / threads : groups;
            jobs[t] = (attend_job){n, groups, dim, past, past + n, q, keys + kv * cap * dim, values + kv * cap * dim,
                                   lo, mask, scaling, out, kv_heads * groups, kv, by_heads ? 0 : t,
                                   by_heads ? 1 : threads, h0, h1 - h0, 0};
        }
        run_attend(jobs, threads);
        for (long t = 0; t < threads; t++) failed |= jobs[t].failed;
    }
    return failed ? -1 : 0;
}

/* One row through a decoder layer, in two calls around the activation (GELU times up stays
 * torch's): the same functions, on the same buffers and in the same order, as the lean forward's
 * glued layers run them for a block of one row, so a decode step's bits are those of that path.
 * ``qmm`` is the quantized product's entry (``bs_qmm`` of babelspec/forward/qmm.c, passed in as a
 * pointer: another library), ``isa`` and ``threads`` as that path passes them. */
typedef int (*qmm_fn)(const void *, long, const bf16 *, long, void *, long, long, long, long);

typedef struct {
    qmm_fn qmm;
    long isa, threads;
    const void *qkv, *o, *gate_up;
    long qkv_n, gate_up_n, hidden, heads, kv_heads, dim;
    const float *qk_scale;
    float qk_eps;
    const bf16 *cos, *sin;
    bf16 *keys, *values;
    long cap, past;
    const long *lo;
    float scaling;
    const float *post_scale, *pre_scale;
    float post_eps, pre_eps;
} layer_args;

/* The attention half of a layer for one row: from ``h`` (the input norm of ``x``), the q/k/v
 * product, the queries' and key's norm and rotation, the key and value cached at ``past``, the
 * row's attention over the cache, the output product, the residual add and the feed-forward
 * norm (``x`` and ``h`` in place), then the gate/up product into ``gate_up``. ``scratch``: bf16
 * of at least qkv_n + (heads + kv_heads + 2 * heads) * dim + hidden. Returns 0, or -1. */
int bs_layer_attention(const layer_args *a, bf16 *x, bf16 *h, bf16 *gate_up, bf16 *scratch) {
    long dim = a->dim, heads = a->heads, kv = a->kv_heads;
    bf16 *qkv = scratch, *qk = qkv + a->qkv_n, *attn = qk + (heads + kv) * dim, *o = attn + heads * dim;
    if (a->qmm(a->qkv, 1, h, a->hidden, qkv, a->qkv_n, 0, a->threads, a->isa) != 0) return -1;
    bs_qk_rope(1, heads + kv, dim, qkv, a->qkv_n, a->qk_scale, a->qk_eps, a->cos, a->sin, qk);
    const bf16 *v = qkv + (heads + kv) * dim;
    for (long g = 0; g < kv; g++) {
        memcpy(a->keys + (g * a->cap + a->past) * dim, qk + (heads + g) * dim, sizeof(bf16) * dim);
        memcpy(a->values + (g * a->cap + a->past) * dim, v + g * dim, sizeof(bf16) * dim);
    }
    const unsigned char self_visible = 1;
    if (bs_attend(1, kv, heads / kv, dim, qk, a->keys, a->values, a->cap, a->past, a->lo, &self_visible, a->scaling,
                  attn, a->threads) != 0)
        return -1;
    if (a->qmm(a->o, 1, attn, heads * dim, o, a->hidden, 0, a->threads, a->isa) != 0) return -1;
    bs_add_rms(1, a->hidden, x, o, a->post_scale, a->post_eps, a->pre_scale, a->pre_eps, x, h);
    return a->qmm(a->gate_up, 1, h, a->hidden, gate_up, a->gate_up_n, 0, a->threads, a->isa);
}

/* The feed-forward half's end for one row: the down product of ``act`` (``k`` wide), the
 * residual add and the next norm (``x`` and ``h`` in place). ``scratch``: bf16 of ``hidden``. */
int bs_layer_down(qmm_fn qmm, long isa, long threads, const void *down, long k, long hidden, const bf16 *act,
                  const float *post_scale, float post_eps, const float *next_scale, float next_eps, bf16 *x, bf16 *h,
                  bf16 *scratch) {
    if (qmm(down, 1, act, k, scratch, hidden, 0, threads, isa) != 0) return -1;
    bs_add_rms(1, hidden, x, scratch, post_scale, post_eps, next_scale, next_eps, x, h);
    return 0;
}
