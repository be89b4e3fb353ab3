/* Products on a GGUF's own quantized blocks (babelspec.forward.qmm): out = x @ W^T for a block of
 * rows x (bf16) and a weight W held as the file holds it, an integer code per weight and a scale
 * (and for Q4_K an offset) per group of 16 or 32 inputs, repacked at load into panels that stream.
 *
 * Each weight panel is read from memory once per call for every row of the block, and each
 * output's arithmetic is fixed whatever the block, the thread count or the instruction set:
 *   - each row is quantized on its own, per group of G inputs, to int8 (d = amax / 127, q = x / d
 *     rounded to nearest even), as llama.cpp quantizes activations (its Q8_0, finer than Q8_K);
 *   - a group's dot product of codes is a sum of integers: exact in any order (I = sum u*q - z*Q,
 *     Q = sum q, |I| < 2^24);
 *   - the float steps follow in one order, without contraction into FMA (-ffp-contract=off):
 *     t = s*d; v = t*I; [v = v - (o*d)*Q]; acc = acc + v, over the groups in ascending order;
 *   - the sum rounds to bf16 to nearest even.
 * So a row of any block gets the bits of the row alone, and the AVX-512 VNNI, AVX2 and portable
 * paths (and the torch form in qmm.py) give the same bits. Threads (torch's OpenMP ones) split
 * the output panels, never the inputs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef uint16_t bf16;
typedef int32_t quad __attribute__((may_alias, aligned(1))); /* 4 int8 activations read as one */
#define PANEL 16   /* output columns of a panel: one vector of 16 int32 or float lanes */
#define ROW_TILE 8 /* the most rows of a pass over a panel; more re-read the panel from cache */
/* Tiles of at least PREFETCH_ROWS rows spend longer on a group's dot products than its codes take
 * to arrive, so they prefetch the codes PREFETCH bytes ahead (a Zen 4, the head's product:
 * 8 rows 15% and 16 rows 20% faster; 1-5 rows, memory-bound, gain nothing from it:
 * benchmarks/qmm_variants.py) */
#define PREFETCH 8192
#define PREFETCH_ROWS 6
#define MAX_PARTS 4
#define MAX_THREADS 64

static inline float to_f(bf16 b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline bf16 to_bf(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (bf16)(u >> 16);
}

/* One weight as repacked (qmm.py): n outputs (a multiple of 16), k inputs, groups of g (16 or 32).
 * A quad's codes: 64 bytes, byte c*4+t the code of column c, input t of the quad's 4. bits 8: codes
 * uint8 [n/16][k/4][64] (panel, input quad, byte). bits 4 or 5: two quads share 64 bytes, the
 * first's codes in the low nibbles, the second's in the high ones, [n/16][k/8][64]; bits 5 adds
 * high: uint64 [n/16][k/4], bit i of a quad's word the fifth bit of its byte i. scales:
 * [n/16][k/g][16] as float16 (half != 0) or float32; offsets: float32 like scales, or NULL; zero:
 * the code of 0. */
typedef struct {
    long n, k, g, zero, half, bits;
    const uint8_t *codes;
    const uint64_t *high;
    const void *scales;
    const float *offsets;
} qweight;

/* A block's rows quantized per group of g: q [m][k] int8, d [m][k/g] float, sums [m][k/g] int32. */
typedef struct {
    long m, k, g;
    const int8_t *q;
    const float *d;
    const int32_t *sums;
    const int32_t *zsums; /* [m][k/g]: -zero * sums for the weight at hand (each part its own) */
    const float *fsums;   /* [m][k/g]: the sums as floats */
} qrows;

static void quantize_rows(long m, long k, long g, const bf16 *x, long stride, int8_t *q, float *d, int32_t *sums) {
    for (long r = 0; r < m; r++) {
        for (long b = 0; b < k / g; b++) {
            const bf16 *xs = x + r * stride + b * g;
            float amax = 0.0f;
            for (long i = 0; i < g; i++) {
                float a = to_f(xs[i]);
                a = a < 0 ? -a : a;
                amax = a > amax ? a : amax;
            }
            float scale = amax / 127.0f;
            float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
            int32_t sum = 0;
            for (long i = 0; i < g; i++) {
                float v = __builtin_rintf(to_f(xs[i]) * inv); /* nearest even under the default mode */
                v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
                q[r * k + b * g + i] = (int8_t)v;
                sum += (int32_t)v;
            }
            d[r * (k / g) + b] = scale;
            sums[r * (k / g) + b] = sum;
        }
    }
}

static inline float scale_of(const qweight *w, long index) {
    if (w->half) {
        uint16_t h = ((const uint16_t *)w->scales)[index];
#if defined(__x86_64__) && defined(__F16C__)
        return _cvtsh_ss(h);
#else
        uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
        if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);
        else if (exp != 0) u = sign | ((exp + 112) << 23) | (man << 13);
        else if (man == 0) u = sign;
        else { /* subnormal half: normalise */
            exp = 113;
            while (!(man & 0x400)) man <<= 1, exp--;
            u = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
        float f;
        memcpy(&f, &u, 4);
        return f;
#endif
    }
    return ((const float *)w->scales)[index];
}

/* The code of byte i of quad j of panel p. */
static inline int32_t code_at(const qweight *w, long p, long j, long i) {
    if (w->bits == 8) return w->codes[(p * (w->k / 4) + j) * 64 + i];
    uint8_t pair = w->codes[(p * (w->k / 8) + j / 2) * 64 + i];
    int32_t code = j % 2 ? pair >> 4 : pair & 0x0f;
    if (w->bits == 5) code |= (int32_t)((w->high[p * (w->k / 4) + j] >> i) & 1) << 4;
    return code;
}

/* Panels p0..p1 of w for every row, portable C: the reference order of operations. */
static void panels_portable(const qweight *w, const qrows *a, long p0, long p1, void *out, long out_stride, int out_f32) {
    long groups = w->k / w->g;
    for (long p = p0; p < p1; p++) {
        for (long r = 0; r < a->m; r++) {
            float acc[PANEL] = {0};
            for (long b = 0; b < groups; b++) {
                float d = a->d[r * groups + b];
                int32_t qsum = a->sums[r * groups + b];
                for (long c = 0; c < PANEL; c++) {
                    int32_t isum = 0;
                    for (long i = 0; i < w->g; i++) {
                        long kk = b * w->g + i;
                        isum += code_at(w, p, kk / 4, c * 4 + kk % 4) * (int32_t)a->q[r * w->k + kk];
                    }
                    isum -= (int32_t)w->zero * qsum;
                    long at = (p * groups + b) * PANEL + c;
                    float t = scale_of(w, at) * d;
                    float v = t * (float)isum;
                    if (w->offsets) {
                        float t2 = w->offsets[at] * d;
                        v = v - t2 * (float)qsum;
                    }
                    acc[c] = acc[c] + v;
                }
            }
            for (long c = 0; c < PANEL; c++) {
                if (out_f32) ((float *)out)[r * out_stride + p * PANEL + c] = acc[c];
                else ((bf16 *)out)[r * out_stride + p * PANEL + c] = to_bf(acc[c]);
            }
        }
    }
}

/* The body of a panels_*_bits: every panel p0..p1, its rows in the fewest tiles of at most
 * ROW_TILE, of sizes as equal as they can be (9 rows: 5 and 4, not 8 and 1), each tile's row
 * count a constant the compiler sees (so its sums stay in registers). */
#define PANEL_TILES(tile)                                                                                   \
    for (long p = p0; p < p1; p++) {                                                                        \
        long tiles = (a->m + ROW_TILE - 1) / ROW_TILE, r0 = 0;                                              \
        for (long t = 0; t < tiles; t++) {                                                                  \
            long rows = a->m / tiles + (t < a->m % tiles);                                                  \
            switch (rows) {                                                                                 \
            case 1: tile(w, a, p, r0, 1, bits, out, out_stride, out_f32); break;                           \
            case 2: tile(w, a, p, r0, 2, bits, out, out_stride, out_f32); break;                           \
            case 3: tile(w, a, p, r0, 3, bits, out, out_stride, out_f32); break;                           \
            case 4: tile(w, a, p, r0, 4, bits, out, out_stride, out_f32); break;                           \
            case 5: tile(w, a, p, r0, 5, bits, out, out_stride, out_f32); break;                           \
            case 6: tile(w, a, p, r0, 6, bits, out, out_stride, out_f32); break;                           \
            case 7: tile(w, a, p, r0, 7, bits, out, out_stride, out_f32); break;                           \
            default: tile(w, a, p, r0, ROW_TILE, bits, out, out_stride, out_f32); break;                   \
            }                                                                                               \
            r0 += rows;                                                                                     \
        }                                                                                                   \
    }

#if defined(__x86_64__) && defined(__GNUC__)
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"), always_inline)) inline
#define AVX512_ENTRY __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"), noinline))
#define AVX2 __attribute__((target("avx2,f16c,fma"), always_inline)) inline
#define AVX2_ENTRY __attribute__((target("avx2,f16c,fma"), noinline))

static AVX512 __m512 scales16_512(const qweight *w, long index) {
    if (w->half) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w->scales + index)));
    return _mm512_loadu_ps((const float *)w->scales + index);
}

static AVX512 __m512i bf16_round_512(__m512 f) { /* to_bf on 16 lanes, as 16 uint32 */
    __m512i u = _mm512_castps_si512(f);
    __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    __m512i n = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_mov_epi32(r, nan, n);
}

/* quantize_rows on 16 lanes: the same IEEE steps (a maximum, a division, a reciprocal, a product
 * rounded to nearest even), so the same codes and scales. */
static AVX512 __m512 bf16x16_512(const bf16 *x) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)x)), 16));
}

static AVX512_ENTRY void quantize_rows_512(long m, long k, long g, const bf16 *x, long stride, int8_t *q, float *d,
                                           int32_t *sums) {
    const __m512i hi = _mm512_set1_epi32(127), lo = _mm512_set1_epi32(-127);
    for (long r = 0; r < m; r++) {
        for (long b = 0; b < k / g; b++) {
            const bf16 *xs = x + r * stride + b * g;
            __m512 v0 = bf16x16_512(xs), v1 = g == 32 ? bf16x16_512(xs + 16) : _mm512_setzero_ps();
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            float scale = amax / 127.0f;
            float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
            __m512 vi = _mm512_set1_ps(inv);
            __m512i q0 = _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvt_roundps_epi32(
                _mm512_mul_ps(v0, vi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
            _mm_storeu_si128((__m128i *)(q + r * k + b * g), _mm512_cvtepi32_epi8(q0));
            int32_t sum = _mm512_reduce_add_epi32(q0);
            if (g == 32) {
                __m512i q1 = _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvt_roundps_epi32(
                    _mm512_mul_ps(v1, vi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
                _mm_storeu_si128((__m128i *)(q + r * k + b * g + 16), _mm512_cvtepi32_epi8(q1));
                sum += _mm512_reduce_add_epi32(q1);
            }
            d[r * (k / g) + b] = scale;
            sums[r * (k / g) + b] = sum;
        }
    }
}

/* Quads j and j + 1 of panel p: 16 columns x 4 inputs of codes each. */
static AVX512 void codes_512(const qweight *w, long p, long j, const int bits, __m512i *w0, __m512i *w1) {
    if (bits == 8) {
        const uint8_t *c = w->codes + (p * (w->k / 4) + j) * 64;
        *w0 = _mm512_loadu_si512((const void *)c);
        *w1 = _mm512_loadu_si512((const void *)(c + 64));
        return;
    }
    __m512i v = _mm512_loadu_si512((const void *)(w->codes + (p * (w->k / 8) + j / 2) * 64));
    __m512i low = _mm512_set1_epi8(0x0f);
    *w0 = _mm512_and_si512(v, low);
    *w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    if (bits == 5) {
        const uint64_t *h = w->high + p * (w->k / 4) + j;
        __m512i sixteen = _mm512_set1_epi8(16);
        *w0 = _mm512_mask_add_epi8(*w0, (__mmask64)h[0], *w0, sixteen);
        *w1 = _mm512_mask_add_epi8(*w1, (__mmask64)h[1], *w1, sixteen);
    }
}

/* rt rows (a compile-time constant after inlining, as are bits, the group g and whether the weight
 * has offsets) of one panel; rows r0..r0+rt. A group's codes stay in registers while each row's
 * dot products (two chains, summed: integers) and its float steps run. */
static AVX512 void tile_512(const qweight *w, const qrows *a, long p, long r0, const int rt, const int bits,
                            const int g, const int offs, void *out, long out_stride, int out_f32) {
    const long groups = w->k / g;
    const int quads = g / 4;
    __m512 acc[ROW_TILE];
    for (int r = 0; r < rt; r++) acc[r] = _mm512_setzero_ps();
    for (long b = 0; b < groups; b++) {
        __m512i code[8];
        if (rt >= PREFETCH_ROWS) { /* compute-bound tiles: ask for the codes PREFETCH bytes ahead */
            const char *here = bits == 8 ? (const char *)(w->codes + (p * (w->k / 4) + b * quads) * 64)
                                         : (const char *)(w->codes + (p * (w->k / 8) + b * quads / 2) * 64);
            for (int l = 0; l < (bits == 8 ? quads : quads / 2); l++) _mm_prefetch(here + PREFETCH + 64 * l, _MM_HINT_T0);
        }
        for (int j = 0; j < quads; j += 2) codes_512(w, p, b * quads + j, bits, &code[j], &code[j + 1]);
        long at = (p * groups + b) * PANEL;
        __m512 s = scales16_512(w, at);
        __m512 o = offs ? _mm512_loadu_ps(w->offsets + at) : _mm512_setzero_ps();
        for (int r = 0; r < rt; r++) {
            long ai = (r0 + r) * groups + b;
            const quad *four = (const quad *)(a->q + (r0 + r) * w->k + b * g);
            __m512i even = _mm512_set1_epi32(a->zsums[ai]), odd = _mm512_setzero_si512();
            for (int j = 0; j < quads; j += 2) {
                even = _mm512_dpbusd_epi32(even, code[j], _mm512_set1_epi32(four[j]));
                odd = _mm512_dpbusd_epi32(odd, code[j + 1], _mm512_set1_epi32(four[j + 1]));
            }
            __m512 d = _mm512_set1_ps(a->d[ai]);
            __m512 v = _mm512_mul_ps(_mm512_mul_ps(s, d), _mm512_cvtepi32_ps(_mm512_add_epi32(even, odd)));
            if (offs) v = _mm512_sub_ps(v, _mm512_mul_ps(_mm512_mul_ps(o, d), _mm512_set1_ps(a->fsums[ai])));
            acc[r] = _mm512_add_ps(acc[r], v);
        }
    }
    for (int r = 0; r < rt; r++) {
        if (out_f32) _mm512_storeu_ps((float *)out + (r0 + r) * out_stride + p * PANEL, acc[r]);
        else _mm256_storeu_si256((__m256i *)((bf16 *)out + (r0 + r) * out_stride + p * PANEL),
                                 _mm512_cvtepi32_epi16(bf16_round_512(acc[r])));
    }
}

#define TILE_512(w, a, p, r0, rt, bits, out, out_stride, out_f32) tile_512(w, a, p, r0, rt, bits, g, offs, out, out_stride, out_f32)

static AVX512 void panels_512_kind(const qweight *w, const qrows *a, long p0, long p1, const int bits, const int g,
                                   const int offs, void *out, long out_stride, int out_f32) {
    PANEL_TILES(TILE_512)
}

static AVX512_ENTRY void panels_512(const qweight *w, const qrows *a, long p0, long p1, void *out, long out_stride,
                                     int out_f32) {
    int offs = w->offsets != NULL;
    if (w->bits == 8 && w->g == 16) {
        if (offs) panels_512_kind(w, a, p0, p1, 8, 16, 1, out, out_stride, out_f32);
        else panels_512_kind(w, a, p0, p1, 8, 16, 0, out, out_stride, out_f32);
    } else if (w->bits == 8) {
        if (offs) panels_512_kind(w, a, p0, p1, 8, 32, 1, out, out_stride, out_f32);
        else panels_512_kind(w, a, p0, p1, 8, 32, 0, out, out_stride, out_f32);
    } else if (w->bits == 5) {
        if (offs) panels_512_kind(w, a, p0, p1, 5, 32, 1, out, out_stride, out_f32);
        else panels_512_kind(w, a, p0, p1, 5, 32, 0, out, out_stride, out_f32);
    } else {
        if (offs) panels_512_kind(w, a, p0, p1, 4, 32, 1, out, out_stride, out_f32);
        else panels_512_kind(w, a, p0, p1, 4, 32, 0, out, out_stride, out_f32);
    }
}

/* AVX2: a panel's 16 columns as two halves of 8. The codes widen to int16 (u8 codes times s8
 * activations overflow vpmaddubsw's int16 pairs), vpmaddwd sums input pairs, vphaddd the pairs of
 * pairs: the int32 lanes then hold columns 0 1 4 5 | 2 3 6 7, put in order once per group (the
 * sums are integers, exact in any order). */
static AVX2 __m256 scales8_256(const qweight *w, long index) {
    if (w->half) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w->scales + index)));
    return _mm256_loadu_ps((const float *)w->scales + index);
}

static AVX2 __m256i bf16_round_256(__m256 f) {
    __m256i u = _mm256_castps_si256(f);
    __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    __m256i n = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, n, nan);
}

/* Half h (columns 8h .. 8h+7) of quad j of panel p: 32 bytes of codes. */
static AVX2 __m256i codes_256(const qweight *w, long p, long j, int h, const int bits) {
    if (bits == 8) return _mm256_loadu_si256((const __m256i *)(w->codes + (p * (w->k / 4) + j) * 64 + h * 32));
    __m256i v = _mm256_loadu_si256((const __m256i *)(w->codes + (p * (w->k / 8) + j / 2) * 64 + h * 32));
    __m256i c = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0f));
    if (bits == 5) { /* byte i gets 16 where bit i of the 32 is set */
        uint32_t x = (uint32_t)(w->high[p * (w->k / 4) + j] >> (32 * h));
        __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x),
                                             _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                                                0x0303030303030303LL));
        __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        c = _mm256_or_si256(c, _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
    return c;
}

static AVX2 void tile_256(const qweight *w, const qrows *a, long p, long r0, const int rt, const int bits,
                          void *out, long out_stride, int out_f32) {
    long groups = w->k / w->g, quads = w->g / 4;
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    for (int half = 0; half < 2; half++) {
        __m256 acc[ROW_TILE];
        for (int r = 0; r < rt; r++) acc[r] = _mm256_setzero_ps();
        for (long b = 0; b < groups; b++) {
            __m256i isum[ROW_TILE];
            for (int r = 0; r < rt; r++) isum[r] = _mm256_setzero_si256();
            for (long j = 0; j < quads; j++) {
                __m256i wj = codes_256(w, p, b * quads + j, half, bits);
                __m256i w03 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(wj));
                __m256i w47 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(wj, 1));
                for (int r = 0; r < rt; r++) {
                    const int8_t *aq = a->q + (r0 + r) * w->k + b * w->g + j * 4;
                    __m256i four = _mm256_set_epi16(aq[3], aq[2], aq[1], aq[0], aq[3], aq[2], aq[1], aq[0], aq[3],
                                                    aq[2], aq[1], aq[0], aq[3], aq[2], aq[1], aq[0]);
                    __m256i s = _mm256_hadd_epi32(_mm256_madd_epi16(w03, four), _mm256_madd_epi16(w47, four));
                    isum[r] = _mm256_add_epi32(isum[r], s);
                }
            }
            for (int r = 0; r < rt; r++) isum[r] = _mm256_permutevar8x32_epi32(isum[r], order);
            long at = (p * groups + b) * PANEL + half * 8;
            __m256 s = scales8_256(w, at);
            __m256 o = w->offsets ? _mm256_loadu_ps(w->offsets + at) : _mm256_setzero_ps();
            for (int r = 0; r < rt; r++) {
                long ai = (r0 + r) * groups + b;
                __m256 d = _mm256_set1_ps(a->d[ai]);
                __m256i i = _mm256_sub_epi32(isum[r], _mm256_set1_epi32((int32_t)w->zero * a->sums[ai]));
                __m256 v = _mm256_mul_ps(_mm256_mul_ps(s, d), _mm256_cvtepi32_ps(i));
                if (w->offsets) v = _mm256_sub_ps(v, _mm256_mul_ps(_mm256_mul_ps(o, d), _mm256_set1_ps((float)a->sums[ai])));
                acc[r] = _mm256_add_ps(acc[r], v);
            }
        }
        for (int r = 0; r < rt; r++) {
            long at = (r0 + r) * out_stride + p * PANEL + half * 8;
            if (out_f32) {
                _mm256_storeu_ps((float *)out + at, acc[r]);
                continue;
            }
            __m256i b16 = bf16_round_256(acc[r]);
            __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(b16), _mm256_extracti128_si256(b16, 1));
            _mm_storeu_si128((__m128i *)((bf16 *)out + at), packed);
        }
    }
}

static AVX2 void panels_256_bits(const qweight *w, const qrows *a, long p0, long p1, const int bits, void *out,
                                 long out_stride, int out_f32) {
    PANEL_TILES(tile_256)
}

static AVX2_ENTRY void panels_256(const qweight *w, const qrows *a, long p0, long p1, void *out, long out_stride,
                                  int out_f32) {
    if (w->bits == 8) panels_256_bits(w, a, p0, p1, 8, out, out_stride, out_f32);
    else if (w->bits == 5) panels_256_bits(w, a, p0, p1, 5, out, out_stride, out_f32);
    else panels_256_bits(w, a, p0, p1, 4, out, out_stride, out_f32);
}
#endif

enum { ISA_PORTABLE = 0, ISA_AVX2 = 1, ISA_AVX512 = 2 };

/* The best path this CPU runs (what ``isa < 0`` picks). */
long bs_qmm_best_isa(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return ISA_AVX2;
#endif
    return ISA_PORTABLE;
}

typedef struct {
    long nparts;
    qweight parts[MAX_PARTS];
    const qrows *rows[MAX_PARTS];
    long first_panel[MAX_PARTS + 1]; /* the stacked output's panels, part by part */
    void *out;
    long out_stride, out_f32, isa, threads;
} job_t;

static void run_slice(const job_t *job, long t) {
    long total = job->first_panel[job->nparts];
    long p0 = total * t / job->threads, p1 = total * (t + 1) / job->threads;
    for (long part = 0; part < job->nparts; part++) {
        long lo = job->first_panel[part], hi = job->first_panel[part + 1];
        long a = p0 > lo ? p0 : lo, b = p1 < hi ? p1 : hi;
        if (a >= b) continue;
        const qweight *w = &job->parts[part];
        /* the part's first column in the stacked output */
        void *out = (char *)job->out + lo * PANEL * (job->out_f32 ? 4 : 2);
        int f32 = (int)job->out_f32;
#if defined(__x86_64__) && defined(__GNUC__)
        if (job->isa == ISA_AVX512) { panels_512(w, job->rows[part], a - lo, b - lo, out, job->out_stride, f32); continue; }
        if (job->isa == ISA_AVX2) { panels_256(w, job->rows[part], a - lo, b - lo, out, job->out_stride, f32); continue; }
#endif
        panels_portable(w, job->rows[part], a - lo, b - lo, out, job->out_stride, f32);
    }
}

#if defined(_OPENMP)
#include <omp.h>
/* Built with OpenMP, the library shares the OpenMP runtime torch loaded (libgomp.so.1 is loaded
 * once per process): the product's threads are torch's own, which keeps them from contending with
 * torch's threads spinning between operations. */
static void run(job_t *job) {
    if (job->threads == 1) {
        run_slice(job, 0);
        return;
    }
#pragma omp parallel num_threads(job->threads)
    {
        if (omp_get_num_threads() == job->threads) run_slice(job, omp_get_thread_num());
        else if (omp_get_thread_num() == 0) { /* fewer threads granted: the slices follow them */
            job->threads = 1;
            run_slice(job, 0);
        }
    }
}
#else
/* A compiler without OpenMP cannot build the library (qmm.py passes -fopenmp): the slices in turn. */
static void run(job_t *job) {
    for (long t = 0; t < job->threads; t++) run_slice(job, t);
}
#endif

/* A stacked product's weights, checked once (bs_qmm_new) and kept for its calls. */
typedef struct {
    long k, nparts, groups16;
    qweight parts[MAX_PARTS];
} product_t;

/* The parts of a product of inputs k side by side: n, g, zero, half, bits, codes, high (NULL but
 * for bits 5), scales, offsets (NULL for none), as qweight says. NULL where one is malformed. */
void *bs_qmm_new(long k, long nparts, const long *n, const long *g, const long *zero, const long *half,
                 const long *bits, const void *const *codes, const void *const *high, const void *const *scales,
                 const void *const *offsets) {
    if (nparts < 1 || nparts > MAX_PARTS || k % 32 != 0) return NULL;
    product_t *product = calloc(1, sizeof *product);
    if (!product) return NULL;
    product->k = k, product->nparts = nparts;
    for (long i = 0; i < nparts; i++) {
        int ok = n[i] % PANEL == 0 && (g[i] == 16 || g[i] == 32) && (bits[i] == 8 || bits[i] == 4 || bits[i] == 5) &&
                 (bits[i] != 5 || high[i] != NULL) && (bits[i] == 8 || g[i] == 32);
        if (!ok) {
            free(product);
            return NULL;
        }
        product->parts[i] = (qweight){n[i], k, g[i], zero[i], half[i], bits[i], codes[i], high[i], scales[i], offsets[i]};
        product->groups16 |= g[i] == 16;
    }
    return product;
}

void bs_qmm_free(void *product) { free(product); }

/* Per calling thread: the block's quantized rows, grown as blocks grow. */
static __thread char *scratch;
static __thread long scratch_bytes;

/* out[m][columns] (bf16, or float32 where out_f32: the sums before their rounding; rows out_stride
 * apart) = x[m][k] (bf16, rows stride apart) times the product's parts side by side. isa: -1 the
 * best this CPU runs, else 0 portable, 1 AVX2, 2 AVX-512 VNNI. Returns 0, or -1 (an isa the CPU
 * lacks, no memory). */
int bs_qmm(const void *handle, long m, const bf16 *x, long stride, void *out, long out_stride, long out_f32,
           long threads, long isa) {
    const product_t *product = handle;
    static long best = -1;
    if (best < 0) best = bs_qmm_best_isa();
    if (isa < 0) isa = best;
    if (isa > best || m < 1) return -1;
    long k = product->k, nparts = product->nparts;
    long need = (m * k + 3 * m * (k / 16) * 4) * (product->groups16 ? 2 : 1) + nparts * m * (k / 16) * 4 + 64;
    if (need > scratch_bytes) {
        char *grown = realloc(scratch, need);
        if (!grown) return -1;
        scratch = grown, scratch_bytes = need;
    }
    job_t job;
    job.nparts = nparts, job.out = out, job.out_stride = out_stride, job.out_f32 = out_f32, job.isa = isa;
    qrows rows[2]; /* per group of 32, and of 16 where a part needs it */
    qrows part_rows[MAX_PARTS];
    char *s = scratch;
    for (int which = 0; which < 2; which++) {
        long gs = which == 0 ? 32 : 16;
        int used = 0;
        for (long i = 0; i < nparts; i++) used |= product->parts[i].g == gs;
        if (!used) continue;
        int8_t *q = (int8_t *)s;
        s += m * k;
        float *d = (float *)s;
        s += m * (k / gs) * 4;
        int32_t *sums = (int32_t *)s;
        s += m * (k / gs) * 4;
#if defined(__x86_64__) && defined(__GNUC__)
        if (isa == ISA_AVX512) quantize_rows_512(m, k, gs, x, stride, q, d, sums);
        else
#endif
            quantize_rows(m, k, gs, x, stride, q, d, sums);
        float *fsums = (float *)s;
        s += m * (k / gs) * 4;
        for (long c = 0; c < m * (k / gs); c++) fsums[c] = (float)sums[c];
        rows[which] = (qrows){m, k, gs, q, d, sums, NULL, fsums};
    }
    job.first_panel[0] = 0;
    for (long i = 0; i < nparts; i++) {
        job.parts[i] = product->parts[i];
        part_rows[i] = rows[product->parts[i].g == 32 ? 0 : 1];
        long cells = m * (k / part_rows[i].g);
        int32_t *z = (int32_t *)s;
        s += cells * 4;
        for (long c = 0; c < cells; c++) z[c] = -(int32_t)product->parts[i].zero * part_rows[i].sums[c];
        part_rows[i].zsums = z;
        job.rows[i] = &part_rows[i];
        job.first_panel[i + 1] = job.first_panel[i] + product->parts[i].n / PANEL;
    }
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > job.first_panel[nparts]) threads = job.first_panel[nparts];
    job.threads = threads;
    run(&job);
    return 0;
}
