/* mt19937.c - numpy's legacy random generator (numpy.random.RandomState: MT19937 seeded with
 * init_genrand) and the two operations Megatron-Core's GPTDataset takes from it: bounded integers
 * by masked rejection (numpy's random_interval) and the in-place Fisher-Yates shuffle of a 1-d
 * array (RandomState.shuffle). Written from the published MT19937 algorithm (Matsumoto &
 * Nishimura 1998) and checked output for output against numpy (tests/test_gpt_index.c).
 *
 * Speed: the shuffles of a 10^8-sample index are bound by the random swaps, one cache miss each.
 * The random positions depend only on the generator, never on the array, so they are drawn a
 * fixed distance ahead and prefetched; the swaps still happen in exactly numpy's order.
 */
#include "sampling_internal.h"

#define MT_M        397
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UPPER    0x80000000u
#define MT_LOWER    0x7fffffffu

void ig_mt19937_seed(ig_mt19937 *mt, uint32_t seed) {
    mt->key[0] = seed;
    for (uint32_t i = 1; i < IG_MT_N; i++) {
        uint32_t prev = mt->key[i - 1];
        mt->key[i] = 1812433253u * (prev ^ (prev >> 30)) + i;
    }
    mt->pos = IG_MT_N;
}

static inline uint32_t mt_mix(uint32_t a, uint32_t b, uint32_t m) {
    uint32_t y = (a & MT_UPPER) | (b & MT_LOWER);
    return m ^ (y >> 1) ^ ((0u - (y & 1u)) & MT_MATRIX_A);
}

/* Regenerates the whole state block (the "twist"). */
static void mt_twist(ig_mt19937 *mt) {
    uint32_t *k = mt->key;
    int i = 0;
    for (; i < IG_MT_N - MT_M; i++) k[i] = mt_mix(k[i], k[i + 1], k[i + MT_M]);
    for (; i < IG_MT_N - 1; i++) k[i] = mt_mix(k[i], k[i + 1], k[i + MT_M - IG_MT_N]);
    k[IG_MT_N - 1] = mt_mix(k[IG_MT_N - 1], k[0], k[MT_M - 1]);
    mt->pos = 0;
}

static inline uint32_t mt_next(ig_mt19937 *mt) {
    if (mt->pos == IG_MT_N) mt_twist(mt);
    uint32_t y = mt->key[mt->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint32_t ig_mt19937_next32(ig_mt19937 *mt) {
    return mt_next(mt);
}

uint64_t ig_mt19937_next64(ig_mt19937 *mt) {
    uint64_t hi = mt_next(mt);
    uint64_t lo = mt_next(mt);
    return hi << 32 | lo;
}

/* The smallest all-ones mask covering max. */
static inline uint64_t mask_for(uint64_t max) {
    uint64_t m = max;
    m |= m >> 1;
    m |= m >> 2;
    m |= m >> 4;
    m |= m >> 8;
    m |= m >> 16;
    m |= m >> 32;
    return m;
}

static inline uint64_t interval_masked(ig_mt19937 *mt, uint64_t max, uint64_t mask) {
    uint64_t v;
    if (max == 0) return 0;
    if (max <= 0xffffffffu) {
        do v = mt_next(mt) & mask;
        while (v > max);
    } else {
        do v = ig_mt19937_next64(mt) & mask;
        while (v > max);
    }
    return v;
}

uint64_t ig_mt19937_interval(ig_mt19937 *mt, uint64_t max) {
    return interval_masked(mt, max, mask_for(max));
}

/* How many positions ahead of the swaps are drawn and prefetched: enough misses in flight to
 * cover memory latency, few enough for the core's fill buffers. */
#define SHUFFLE_AHEAD 32

/* Fisher-Yates as numpy: for at = n-1 .. 1, swap a[at] and a[random_interval(at)]. The draws for
 * at - SHUFFLE_AHEAD are made (in the same descending order) while at is swapped. */
#define DEFINE_SHUFFLE(NAME, T)                                                                    \
    void NAME(ig_mt19937 *mt, T *a, uint64_t n) {                                                  \
        uint64_t ring[SHUFFLE_AHEAD];                                                              \
        if (n < 2) return;                                                                         \
        uint64_t draw = n - 1; /* the next position to draw for */                                 \
        uint64_t mask = mask_for(draw);                                                            \
        for (int t = 0; t < SHUFFLE_AHEAD && draw >= 1; t++, draw--) {                             \
            if (draw <= (mask >> 1)) mask >>= 1;                                                   \
            ring[t] = interval_masked(mt, draw, mask);                                             \
            __builtin_prefetch(&a[ring[t]], 1, 0);                                                 \
        }                                                                                          \
        unsigned slot = 0;                                                                         \
        for (uint64_t at = n - 1; at >= 1; at--) {                                                 \
            uint64_t j = ring[slot];                                                               \
            T tmp = a[j];                                                                          \
            a[j] = a[at];                                                                          \
            a[at] = tmp;                                                                           \
            if (draw >= 1) {                                                                       \
                if (draw <= (mask >> 1)) mask >>= 1; /* mask_for(draw): draw only decreases */     \
                ring[slot] = interval_masked(mt, draw, mask);                                      \
                __builtin_prefetch(&a[ring[slot]], 1, 0);                                          \
                draw--;                                                                            \
            }                                                                                      \
            slot = (slot + 1) % SHUFFLE_AHEAD;                                                     \
        }                                                                                          \
    }

DEFINE_SHUFFLE(ig_mt19937_shuffle_i32, int32_t)
DEFINE_SHUFFLE(ig_mt19937_shuffle_i64, int64_t)
