/* rng.c - counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel
 * random numbers: as easy as 1, 2, 3", SC 2011), the generator of Random123 and cuRAND.
 *
 * Why counter-based: a model's initial weights must be the same whatever the layout (tensor,
 * pipeline, data parallel) and whatever the thread or device, so element i of tensor NAME gets
 * the numbers of counter i under the key (seed, NAME): any rank, thread or GPU can draw any slice
 * of any tensor without drawing what comes before it, and gets the same bits. No state to carry,
 * nothing to checkpoint but the seed.
 */
#include "core/core.h"

#include <math.h>
#include <string.h>

void ig_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * x0, p1 = (uint64_t)0xCD9E8D57u * x2;
        uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0, y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
        x0 = y0;
        x1 = (uint32_t)p1;
        x2 = y2;
        x3 = (uint32_t)p0;
        k0 += 0x9E3779B9u; /* the Weyl sequence of the key schedule */
        k1 += 0xBB67AE85u;
    }
    out[0] = x0;
    out[1] = x1;
    out[2] = x2;
    out[3] = x3;
}

ig_rng_key ig_rng_key_make(uint64_t seed, const char *name) {
    static const char tag[] = "ingot rng key v1";
    size_t nl = name ? strlen(name) : 0;
    char buf[512];
    uint64_t h;
    if (sizeof tag + 8 + nl <= sizeof buf) {
        memcpy(buf, tag, sizeof tag);
        memcpy(buf + sizeof tag, &seed, 8);
        if (nl) memcpy(buf + sizeof tag + 8, name, nl);
        h = ig_xxh3_64(buf, sizeof tag + 8 + nl);
    } else { /* a very long name: hash it first */
        uint64_t parts[2] = {seed, ig_xxh3_64(name, nl)};
        memcpy(buf, tag, sizeof tag);
        memcpy(buf + sizeof tag, parts, sizeof parts);
        h = ig_xxh3_64(buf, sizeof tag + sizeof parts);
    }
    return (ig_rng_key){{(uint32_t)h, (uint32_t)(h >> 32)}};
}

void ig_rng_u32x4(ig_rng_key key, uint64_t counter, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    ig_philox4x32(ctr, key.k, out);
}

double ig_rng_uniform(ig_rng_key key, uint64_t i) {
    uint32_t w[4];
    ig_rng_u32x4(key, i, w);
    return (double)(((uint64_t)w[0] << 21) ^ (w[1] >> 11)) * 0x1p-53;
}

/* Pair p of normals by Box-Muller from the 4 words of counter p (53-bit uniforms). */
static void normal_pair(ig_rng_key key, uint64_t p, double *z0, double *z1) {
    uint32_t w[4];
    ig_rng_u32x4(key, p, w);
    uint64_t a = ((uint64_t)w[0] << 21) ^ (w[1] >> 11), b = ((uint64_t)w[2] << 21) ^ (w[3] >> 11);
    double u1 = ((double)a + 1.0) * 0x1p-53; /* (0, 1]: the log is finite */
    double u2 = (double)b * 0x1p-53;         /* [0, 1) */
    double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586476925286766559 * u2;
    *z0 = r * cos(t);
    *z1 = r * sin(t);
}

double ig_rng_normal(ig_rng_key key, uint64_t i) {
    double z0, z1;
    normal_pair(key, i >> 1, &z0, &z1);
    return (i & 1) ? z1 : z0;
}

typedef struct fill_job {
    ig_rng_key key;
    uint64_t first;
    float mean, std;
    float *out;
} fill_job;

static void fill_range(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    const fill_job *j = arg;
    size_t k = b;
    if (k < e && ((j->first + k) & 1)) { /* an odd start: the second of its pair */
        j->out[k] = (float)(j->mean + j->std * ig_rng_normal(j->key, j->first + k));
        k++;
    }
    for (; k + 1 < e; k += 2) {
        double z0, z1;
        normal_pair(j->key, (j->first + k) >> 1, &z0, &z1);
        j->out[k] = (float)(j->mean + j->std * z0);
        j->out[k + 1] = (float)(j->mean + j->std * z1);
    }
    if (k < e) j->out[k] = (float)(j->mean + j->std * ig_rng_normal(j->key, j->first + k));
}

void ig_rng_fill_normal(ig_ctx *ctx, ig_rng_key key, uint64_t first, size_t n, float mean,
                        float std, float *out) {
    fill_job j = {key, first, mean, std, out};
    if (ctx)
        ig_parallel_range(ctx, n, 1 << 15, fill_range, &j);
    else
        fill_range(&j, 0, n, 0);
}
