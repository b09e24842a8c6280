/* One LSTM / LN-LSTM time step after its product W_h h_{t-1}, forward and backward, float32; the batch
 * rows are split over OpenMP threads (torch's own libgomp when loaded next to torch).
 *
 * workers/engine/native.py compiles this file with the machine's C compiler on first use and calls it
 * through ctypes; workers/engine/lstm_seq.py calls one forward and one backward function per step (the
 * products stay in oneDNN). Per batch row b, with G = 4H and gate order (f, i, o, g):
 *
 *   a   = LN(hh; gh, bh) + xx          (or hh + xx without LN on W_h h)
 *   f, i, o = σ(a_f, a_i, a_o),  g = tanh(a_g)
 *   c_t = f ⊙ c_{t-1} + i ⊙ g,  y = LN(c_t; gc, bc) (or c_t),  h_t = o ⊙ tanh(y)
 *
 * tanh(z) = 2σ(2z) − 1 as in the torch path. σ uses its own exp (Cephes' polynomial, ≈ 1 ulp), written so
 * that the compiler vectorizes it; sums use 16 fixed lanes, so the results never depend on threads.
 * LayerNorm: population variance (eq. 15), two passes (mean, then squared deviations).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LANES 16

typedef struct {
    int64_t T, B, H, S;           /* S: steps the work buffers hold (T, or 1 without a backward) */
    int64_t threads;              /* OpenMP threads over the batch rows (results do not depend on it) */
    float eps;
    const float *xx;              /* T×B×G: LN(W_x x) + b for every step */
    const float *gh, *bh;         /* G: LN on W_h h (NULL: none) */
    const float *gc, *bc;         /* H: LN on c_t (NULL: none) */
    const float *c0;              /* B×H */
    float *gates;                 /* S×B×G: σ(f), σ(i), σ(o), tanh(g) */
    float *cells;                 /* S×B×H: c_t */
    float *tanh_c;                /* S×B×H: tanh(y) */
    float *hs;                    /* T×B×H: h_t */
    float *hh;                    /* S×B×G: raw W_h h_{t-1} (NULL without LN on it); the backward
                                     writes dL/d(W_h h_{t-1}) over it */
    float *mean_h, *rstd_h;       /* S×B */
    float *mean_c, *rstd_c;       /* S×B */
    float *d_a;                   /* T×B×G: dL/da_t (also dL/dxx_t) */
    float *dc;                    /* B×H: dL/dc_t running back in time (in: from step t+1) */
    float *d_gh, *d_bh;           /* B×G: gradient sums per batch row (lstm_sum_rows adds them up) */
    float *d_gc, *d_bc;           /* B×H */
    float *scratch;               /* B×H */
} lstm_ctx;

static inline float exp_f(float x) {
    /* exp(x) for float: 2^n · p(r), x = n ln2 + r, |r| ≤ ln2/2 (Cephes expf). NaN stays NaN. */
    x = x > 88.3762626647949f ? 88.3762626647949f : x;
    x = x < -87.3365478515625f ? -87.3365478515625f : x;
    float fx = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - fx * 0.693359375f;
    r = r + fx * 2.12194440e-4f;
    float z = r * r;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    int32_t n = (int32_t)fx + 127;
    n = n < 1 ? 1 : n;
    union { uint32_t u; float f; } p;  /* 2^n from its bits (a union, not memcpy: it vectorizes) */
    p.u = (uint32_t)n << 23;
    return y * p.f;
}

static inline float sigm(float z) { return 1.0f / (1.0f + exp_f(-z)); }

static float sum_f(const float *x, int64_t n) {
    float acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; ++l) acc[l] += x[j + l];
    float s = 0.0f;
    for (; j < n; ++j) s += x[j];
    for (int l = 0; l < LANES; ++l) s += acc[l];
    return s;
}

static float sqdev_f(const float *x, int64_t n, float m) {
    float acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; ++l) { float d = x[j + l] - m; acc[l] += d * d; }
    float s = 0.0f;
    for (; j < n; ++j) { float d = x[j] - m; s += d * d; }
    for (int l = 0; l < LANES; ++l) s += acc[l];
    return s;
}

/* Σ dy·γ and Σ dy·γ·x̂ over a row, x̂ = (x − m)·r: the two means LN's backward needs. */
static void ln_back_sums(const float *dy, const float *g, const float *x, float m, float r, int64_t n,
                         float *s1, float *s2) {
    float a1[LANES] = {0}, a2[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; ++l) {
            float dx = dy[j + l] * g[j + l];
            a1[l] += dx;
            a2[l] += dx * ((x[j + l] - m) * r);
        }
    float t1 = 0.0f, t2 = 0.0f;
    for (; j < n; ++j) { float dx = dy[j] * g[j]; t1 += dx; t2 += dx * ((x[j] - m) * r); }
    for (int l = 0; l < LANES; ++l) { t1 += a1[l]; t2 += a2[l]; }
    *s1 = t1;
    *s2 = t2;
}

/* LayerNorm's backward over one row of n: x its input (mean m, inverse deviation r), dy the gradient of
 * its output. Adds the row's dγ, dβ and writes dL/dx to dx, which may be dy or x itself (each element is
 * read before it is written). */
static void ln_back_row(const float *dy, const float *g, const float *x, float m, float r, int64_t n,
                        float *d_g, float *d_b, float *dx) {
    float s1, s2;
    ln_back_sums(dy, g, x, m, r, n, &s1, &s2);
    s1 /= (float)n;
    s2 /= (float)n;
#pragma GCC ivdep /* element j reads and writes index j only */
    for (int64_t j = 0; j < n; ++j) {
        float xh = (x[j] - m) * r, d = dy[j];
        d_g[j] += d * xh;
        d_b[j] += d;
        dx[j] = r * (d * g[j] - s1 - xh * s2);
    }
}

void lstm_fwd_step(lstm_ctx *c, int64_t t, const float *hh_raw) {
    const int64_t B = c->B, H = c->H, G = 4 * H;
    const int64_t s = c->S == 1 ? 0 : t, sp = c->S == 1 ? 0 : t - 1;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (c->threads > 1)
    for (int64_t b = 0; b < B; ++b) {
        const float *hr = hh_raw + b * G, *xr = c->xx + (t * B + b) * G;
        float *ar = c->gates + (s * B + b) * G;
        if (c->gh) {
            float *keep = c->hh + (s * B + b) * G;
            memcpy(keep, hr, (size_t)G * sizeof(float));
            float m = sum_f(hr, G) / (float)G;
            float r = 1.0f / sqrtf(sqdev_f(hr, G, m) / (float)G + c->eps);
            c->mean_h[s * B + b] = m;
            c->rstd_h[s * B + b] = r;
            for (int64_t j = 0; j < G; ++j) ar[j] = (hr[j] - m) * r * c->gh[j] + c->bh[j] + xr[j];
        } else {
            for (int64_t j = 0; j < G; ++j) ar[j] = hr[j] + xr[j];
        }
        for (int64_t j = 0; j < 3 * H; ++j) ar[j] = sigm(ar[j]);
        for (int64_t j = 3 * H; j < G; ++j) ar[j] = 2.0f * sigm(2.0f * ar[j]) - 1.0f;
        const float *f = ar, *in = ar + H, *o = ar + 2 * H, *g = ar + 3 * H;
        const float *cp = t == 0 ? c->c0 + b * H : c->cells + (sp * B + b) * H;
        float *cr = c->cells + (s * B + b) * H, *tc = c->tanh_c + (s * B + b) * H;
        float *hrow = c->hs + (t * B + b) * H;
        for (int64_t k = 0; k < H; ++k) cr[k] = f[k] * cp[k] + in[k] * g[k];
        if (c->gc) {
            float m = sum_f(cr, H) / (float)H;
            float r = 1.0f / sqrtf(sqdev_f(cr, H, m) / (float)H + c->eps);
            c->mean_c[s * B + b] = m;
            c->rstd_c[s * B + b] = r;
            for (int64_t k = 0; k < H; ++k) {
                float y = (cr[k] - m) * r * c->gc[k] + c->bc[k];
                tc[k] = 2.0f * sigm(2.0f * y) - 1.0f;
            }
        } else {
            for (int64_t k = 0; k < H; ++k) tc[k] = 2.0f * sigm(2.0f * cr[k]) - 1.0f;
        }
        for (int64_t k = 0; k < H; ++k) hrow[k] = o[k] * tc[k];
    }
}

/* dh: dL/dh_t (B×H), the output's gradient plus the recurrent part from step t+1. */
void lstm_bwd_step(lstm_ctx *c, int64_t t, const float *dh) {
    const int64_t B = c->B, H = c->H, G = 4 * H;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (c->threads > 1)
    for (int64_t b = 0; b < B; ++b) {
        float *dy = c->scratch + b * H;
        float *d_gh = c->d_gh + b * G, *d_bh = c->d_bh + b * G, *d_gc = c->d_gc + b * H;
        float *d_bc = c->d_bc + b * H;
        const float *ar = c->gates + (t * B + b) * G;
        const float *f = ar, *in = ar + H, *o = ar + 2 * H, *g = ar + 3 * H;
        const float *cr = c->cells + (t * B + b) * H, *tc = c->tanh_c + (t * B + b) * H;
        const float *cp = t == 0 ? c->c0 + b * H : c->cells + ((t - 1) * B + b) * H;
        const float *dhr = dh + b * H;
        float *da = c->d_a + (t * B + b) * G, *dcr = c->dc + b * H;
        for (int64_t k = 0; k < H; ++k) {
            float tk = tc[k], ok = o[k];
            da[2 * H + k] = dhr[k] * tk * ok * (1.0f - ok);
            dy[k] = dhr[k] * ok * (1.0f - tk * tk);
        }
        if (c->gc)  /* LN(c_t) backward; dy becomes dL/dc_t from this step */
            ln_back_row(dy, c->gc, cr, c->mean_c[t * B + b], c->rstd_c[t * B + b], H, d_gc, d_bc, dy);
#pragma GCC ivdep /* the rows written (da's f, i, g blocks; dc) overlap nothing read */
        for (int64_t k = 0; k < H; ++k) {
            float d = dy[k] + dcr[k], fk = f[k], ik = in[k], gk = g[k];
            da[k] = d * cp[k] * fk * (1.0f - fk);
            da[H + k] = d * gk * ik * (1.0f - ik);
            da[3 * H + k] = d * ik * (1.0f - gk * gk);
            dcr[k] = d * fk;
        }
        if (c->gh) {  /* LN(W_h h) backward: dL/d(W_h h_{t-1}) over the stored W_h h_{t-1} */
            float *hr = c->hh + (t * B + b) * G;
            ln_back_row(da, c->gh, hr, c->mean_h[t * B + b], c->rstd_h[t * B + b], G, d_gh, d_bh, hr);
        }
    }
}

/* out[j] = Σ_b rows[b·n + j], b in order: the per-row gradient sums added up the same way every time. */
void lstm_sum_rows(const float *rows, int64_t B, int64_t n, float *out) {
    for (int64_t j = 0; j < n; ++j) out[j] = 0.0f;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < n; ++j) out[j] += rows[b * n + j];
}
