/* test_loader.c - the loader (loader/loader.h) over a synthetic sample source: the distributed
 * proxy sampler layout (dp-union), exact resume (also with another dp), the infinite stream of
 * blocks, prefetch settings that must not change the output, error propagation and shutdown while
 * the threads are busy.
 *
 * The synthetic source: block b holds `n` samples; sample i of block b is the original sample
 * o = perm_b(i) (a seeded shuffle of 0..n-1 per block) and its tokens are o*(L+1)+t, t = 0..L.
 * So every block holds the same samples in its own order, and a token row tells which original it
 * is. */
#include "loader/loader.h"
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct synth {
    uint64_t n;
    uint32_t seq_len;
    uint64_t seed;
    int64_t fail_block; /* -1: never */
    int64_t fail_sample;
    int64_t fail_make_block; /* -1: never */
    unsigned sleep_us;       /* per get */
    pthread_mutex_t mu;
    int live_blocks; /* made and not yet freed */
    int made;
} synth;

typedef struct synth_block {
    synth *sy;
    uint64_t block;
    uint64_t *perm;
} synth_block;

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t sb_num(void *self) {
    return ((synth_block *)self)->sy->n;
}

static ig_status sb_get(void *self, uint64_t i, int32_t *out, ig_err *err) {
    synth_block *b = self;
    if (b->sy->sleep_us) usleep(b->sy->sleep_us);
    if ((int64_t)b->block == b->sy->fail_block && (int64_t)i == b->sy->fail_sample)
        return ig_err_set(err, IG_ERR_IO, "synthetic failure at block %llu sample %llu",
                          (unsigned long long)b->block, (unsigned long long)i);
    uint64_t o = b->perm[i];
    for (uint32_t t = 0; t <= b->sy->seq_len; t++) out[t] = (int32_t)(o * (b->sy->seq_len + 1) + t);
    return IG_OK;
}

static void sb_free(void *self) {
    synth_block *b = self;
    pthread_mutex_lock(&b->sy->mu);
    b->sy->live_blocks--;
    pthread_mutex_unlock(&b->sy->mu);
    free(b->perm);
    free(b);
}

static ig_status synth_make(void *user, uint64_t block, ig_sample_source *out, ig_err *err) {
    synth *sy = user;
    if ((int64_t)block == sy->fail_make_block)
        return ig_err_set(err, IG_ERR_FORMAT, "synthetic factory failure for block %llu",
                          (unsigned long long)block);
    synth_block *b = calloc(1, sizeof *b);
    b->sy = sy;
    b->block = block;
    b->perm = malloc(sy->n * sizeof *b->perm);
    for (uint64_t i = 0; i < sy->n; i++) b->perm[i] = i;
    uint64_t x = sy->seed * 1000003u + block;
    for (uint64_t i = sy->n ? sy->n - 1 : 0; i > 0; i--) {
        uint64_t j = splitmix(&x) % (i + 1), t = b->perm[i];
        b->perm[i] = b->perm[j];
        b->perm[j] = t;
    }
    *out = (ig_sample_source){.num_samples = sb_num,
                              .get = sb_get,
                              .free = sb_free,
                              .self = b,
                              .seq_len = sy->seq_len,
                              .key = ig_xxh3_64(&sy->seed, sizeof sy->seed) ^ sy->n};
    pthread_mutex_lock(&sy->mu);
    sy->live_blocks++;
    sy->made++;
    pthread_mutex_unlock(&sy->mu);
    return IG_OK;
}

static void synth_init(synth *sy, uint64_t n, uint32_t seq_len, uint64_t seed) {
    memset(sy, 0, sizeof *sy);
    sy->n = n;
    sy->seq_len = seq_len;
    sy->seed = seed;
    sy->fail_block = sy->fail_sample = sy->fail_make_block = -1;
    pthread_mutex_init(&sy->mu, NULL);
}

static void synth_done(synth *sy) {
    assert_int_equal(sy->live_blocks, 0);
    pthread_mutex_destroy(&sy->mu);
}

/* The original sample behind global sample g (a reference independent of the loader). */
static uint64_t synth_original(synth *sy, uint64_t g) {
    ig_sample_source s;
    assert_int_equal(synth_make(sy, g / sy->n, &s, NULL), IG_OK);
    uint64_t o = ((synth_block *)s.self)->perm[g % sy->n];
    s.free(s.self);
    return o;
}

static ig_ctx *new_ctx(void) {
    ig_ctx *ctx = NULL;
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 1;
    assert_int_equal(ig_ctx_create(&ctx, &o, NULL), IG_OK);
    return ctx;
}

static ig_loader *open_loader(ig_ctx *ctx, synth *sy, uint32_t B, uint32_t A, uint32_t dp,
                              uint32_t rank, int threads, int depth, const ig_loader_state *start) {
    ig_loader_opts o = ig_loader_opts_default();
    o.make_block = synth_make;
    o.block_user = sy;
    o.micro_batch = B;
    o.grad_accum = A;
    o.dp = dp;
    o.rank = rank;
    o.prefetch_threads = threads;
    o.prefetch_depth = depth;
    ig_loader *ld = NULL;
    ig_err err = {0};
    ig_status st = ig_loader_create(&ld, ctx, &o, start, &err);
    if (st != IG_OK) fail_msg("ig_loader_create: %s", err.msg);
    return ld;
}

/* Checks a batch's rows against the reference: row j is global sample ids[j]. */
static void check_rows(synth *sy, const ig_batch *b) {
    for (uint32_t j = 0; j < b->micro_batch; j++) {
        uint64_t o = synth_original(sy, b->sample_ids[j]);
        const int32_t *row = b->tokens + (size_t)j * (sy->seq_len + 1);
        for (uint32_t t = 0; t <= sy->seq_len; t++)
            assert_int_equal(row[t], (int32_t)(o * (sy->seq_len + 1) + t));
    }
}

/* ---- dp-union -------------------------------------------------------------------------------- */

static void test_dp_union(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    synth sy;
    synth_init(&sy, 500, 7, 42);
    const uint32_t G = 48, steps = 25; /* 1200 samples: crosses two block boundaries */
    const uint32_t dps[] = {1, 2, 4, 8}, Bs[] = {6, 4, 2, 2};
    for (int c = 0; c < 4; c++) {
        uint32_t dp = dps[c], B = Bs[c], A = G / (B * dp);
        assert_int_equal(B * dp * A, G);
        ig_loader *lds[8];
        for (uint32_t r = 0; r < dp; r++) lds[r] = open_loader(ctx, &sy, B, A, dp, r, 2, 3, NULL);
        assert_int_equal(ig_loader_global_batch(lds[0]), G);
        for (uint64_t s = 0; s < steps; s++) {
            uint64_t expect = s * G;
            /* Within a step, micro-batch m of every rank in rank order, then m + 1. */
            for (uint32_t r = 0; r < dp; r++) {
                for (uint32_t m = 0; m < A; m++) {
                    ig_batch b;
                    assert_int_equal(ig_loader_next(lds[r], &b, NULL), IG_OK);
                    assert_int_equal(b.step, s);
                    assert_int_equal(b.micro, m);
                    assert_int_equal(b.rank, r);
                    for (uint32_t j = 0; j < B; j++)
                        assert_int_equal(b.sample_ids[j],
                                         ig_loader_sample_id(B, A, dp, r, s, m, j));
                    check_rows(&sy, &b);
                }
            }
            for (uint32_t m = 0; m < A; m++)
                for (uint32_t r = 0; r < dp; r++)
                    for (uint32_t j = 0; j < B; j++)
                        assert_int_equal(ig_loader_sample_id(B, A, dp, r, s, m, j), expect++);
            assert_int_equal(expect, (s + 1) * G);
        }
        for (uint32_t r = 0; r < dp; r++) {
            ig_loader_state st = ig_loader_state_get(lds[r]);
            assert_int_equal(st.consumed_samples, (uint64_t)steps * G);
            ig_loader_free(lds[r]);
        }
    }
    synth_done(&sy);
    ig_ctx_free(ctx);
}

/* ---- recording streams ----------------------------------------------------------------------- */

/* Reads n micro-batches and returns their sample ids and an xxh3 of each batch's tokens. */
static void record(ig_loader *ld, size_t n, uint64_t *ids, uint64_t *hashes, uint32_t B,
                   uint32_t L) {
    for (size_t k = 0; k < n; k++) {
        ig_batch b;
        ig_err err = {0};
        if (ig_loader_next(ld, &b, &err) != IG_OK) fail_msg("ig_loader_next: %s", err.msg);
        memcpy(ids + k * B, b.sample_ids, B * sizeof *ids);
        hashes[k] = ig_xxh3_64(b.tokens, (size_t)B * (L + 1) * sizeof(int32_t));
    }
}

static void test_resume(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    synth sy;
    synth_init(&sy, 97, 5, 7); /* odd block size: batches straddle blocks */
    const uint32_t B = 4, A = 3, dp = 2, r = 1;
    const size_t N = 120;
    uint64_t ids[120 * 4], h[120], ids2[120 * 4], h2[120];
    ig_loader *ld = open_loader(ctx, &sy, B, A, dp, r, 3, 4, NULL);
    record(ld, N, ids, h, B, sy.seq_len);
    ig_loader_free(ld);

    const size_t points[] = {1, 2, 3, 7, 24, 25, 50, 119};
    for (size_t p = 0; p < sizeof points / sizeof points[0]; p++) {
        size_t at = points[p];
        ig_loader *a = open_loader(ctx, &sy, B, A, dp, r, 1, 2, NULL);
        record(a, at, ids2, h2, B, sy.seq_len);
        ig_loader_state st = ig_loader_state_get(a);
        assert_int_equal(st.consumed_samples, (uint64_t)at * B * dp);
        ig_loader_free(a);
        ig_loader *b = open_loader(ctx, &sy, B, A, dp, r, (int)(p % 3), 3, &st);
        record(b, N - at, ids2 + at * B, h2 + at, B, sy.seq_len);
        ig_loader_free(b);
        assert_memory_equal(ids, ids2, N * B * sizeof *ids);
        assert_memory_equal(h, h2, N * sizeof *h);
    }
    synth_done(&sy);
    ig_ctx_free(ctx);
}

/* The stream of a whole job as dp ranks see it, flattened to the global order (micro, rank). */
static void job_stream(ig_ctx *ctx, synth *sy, uint32_t B, uint32_t A, uint32_t dp,
                       const ig_loader_state *start, uint64_t steps, uint64_t *ids,
                       uint64_t *hashes, ig_loader_state *end) {
    ig_loader *lds[8];
    for (uint32_t r = 0; r < dp; r++) lds[r] = open_loader(ctx, sy, B, A, dp, r, 2, 4, start);
    size_t row = sy->seq_len + 1;
    for (uint64_t s = 0; s < steps; s++)
        for (uint32_t m = 0; m < A; m++)
            for (uint32_t r = 0; r < dp; r++) {
                ig_batch b;
                assert_int_equal(ig_loader_next(lds[r], &b, NULL), IG_OK);
                for (uint32_t j = 0; j < B; j++) {
                    *ids++ = b.sample_ids[j];
                    *hashes++ = ig_xxh3_64(b.tokens + j * row, row * sizeof(int32_t));
                }
            }
    for (uint32_t r = 0; r < dp; r++) {
        ig_loader_state st = ig_loader_state_get(lds[r]);
        if (r == 0 && end) *end = st;
        if (end) assert_int_equal(st.consumed_samples, end->consumed_samples);
        ig_loader_free(lds[r]);
    }
}

static void test_resume_other_dp(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    synth sy;
    synth_init(&sy, 300, 3, 99);
    const uint64_t G = 32, steps = 20, cut = 7;
    uint64_t ref_ids[20 * 32], ref_h[20 * 32], ids[20 * 32], h[20 * 32];
    job_stream(ctx, &sy, 32, 1, 1, NULL, steps, ref_ids, ref_h, NULL);
    for (uint64_t i = 0; i < steps * G; i++) assert_int_equal(ref_ids[i], i);

    ig_loader_state st;
    /* dp=2 (B=4, A=4) for `cut` steps, then dp=8 (B=2, A=2), then dp=4 (B=1, A=8). */
    job_stream(ctx, &sy, 4, 4, 2, NULL, cut, ids, h, &st);
    assert_int_equal(st.consumed_samples, cut * G);
    job_stream(ctx, &sy, 2, 2, 8, &st, 5, ids + cut * G, h + cut * G, &st);
    assert_int_equal(st.consumed_samples, (cut + 5) * G);
    job_stream(ctx, &sy, 1, 8, 4, &st, steps - cut - 5, ids + (cut + 5) * G, h + (cut + 5) * G,
               &st);
    assert_memory_equal(ids, ref_ids, sizeof ids);
    assert_memory_equal(h, ref_h, sizeof h);
    synth_done(&sy);
    ig_ctx_free(ctx);
}

/* ---- infinite stream ------------------------------------------------------------------------- */

static void test_infinite_blocks(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    synth sy;
    synth_init(&sy, 64, 2, 5);
    const int nblocks = 6;
    ig_loader *ld = open_loader(ctx, &sy, 8, 1, 1, 0, 2, 4, NULL);
    assert_int_equal(ig_loader_block_size(ld), 64);
    uint64_t orig[6][64];
    for (int k = 0; k < nblocks * 8; k++) {
        ig_batch b;
        assert_int_equal(ig_loader_next(ld, &b, NULL), IG_OK);
        for (uint32_t j = 0; j < 8; j++) {
            uint64_t g = b.sample_ids[j];
            assert_int_equal(g, (uint64_t)k * 8 + j);
            orig[g / 64][g % 64] = (uint64_t)b.tokens[j * 3] / 3;
        }
    }
    ig_loader_free(ld);
    for (int b = 0; b < nblocks; b++) {
        /* each block is a permutation of the originals (an epoch) */
        int seen[64] = {0};
        for (int i = 0; i < 64; i++) {
            assert_true(orig[b][i] < 64);
            seen[orig[b][i]]++;
        }
        for (int i = 0; i < 64; i++) assert_int_equal(seen[i], 1);
        /* and no block repeats another's order */
        for (int c = 0; c < b; c++) assert_true(memcmp(orig[b], orig[c], sizeof orig[b]) != 0);
    }
    synth_done(&sy);
    ig_ctx_free(ctx);
}

/* ---- prefetch settings do not change the output --------------------------------------------- */

static void test_prefetch_variations(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    synth sy;
    synth_init(&sy, 113, 9, 3);
    const uint32_t B = 5;
    const size_t N = 90;
    uint64_t ref_ids[90 * 5], ref_h[90], ids[90 * 5], h[90];
    ig_loader *ld = open_loader(ctx, &sy, B, 2, 3, 2, 0, 1, NULL);
    record(ld, N, ref_ids, ref_h, B, sy.seq_len);
    ig_loader_free(ld);
    const int threads[] = {0, 1, 2, 3, 8}, depths[] = {1, 2, 3, 16};
    for (int t = 0; t < 5; t++)
        for (int d = 0; d < 4; d++) {
            ld = open_loader(ctx, &sy, B, 2, 3, 2, threads[t], depths[d], NULL);
            record(ld, N, ids, h, B, sy.seq_len);
            ig_loader_free(ld);
            assert_memory_equal(ids, ref_ids, sizeof ids);
            assert_memory_equal(h, ref_h, sizeof h);
        }
    synth_done(&sy);
    ig_ctx_free(ctx);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_error_propagation(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    for (int threads = 0; threads <= 3; threads += 3) {
        synth sy;
        synth_init(&sy, 50, 4, 11);
        sy.fail_block = 1;
        sy.fail_sample = 13; /* global sample 63: micro-batch 63 / 4 = 15 with B=4, dp=1 */
        ig_loader *ld = open_loader(ctx, &sy, 4, 1, 1, 0, threads, 6, NULL);
        ig_batch b;
        for (int k = 0; k < 15; k++) assert_int_equal(ig_loader_next(ld, &b, NULL), IG_OK);
        ig_err err = {0};
        assert_int_equal(ig_loader_next(ld, &b, &err), IG_ERR_IO);
        assert_int_equal(err.status, IG_ERR_IO);
        assert_non_null(strstr(err.msg, "synthetic failure at block 1 sample 13"));
        assert_non_null(strstr(err.msg, "global sample 63"));
        assert_null(b.tokens);
        ig_err err2 = {0};
        assert_int_equal(ig_loader_next(ld, &b, &err2), IG_ERR_IO);
        assert_string_equal(err.msg, err2.msg);
        ig_loader_free(ld);
        synth_done(&sy);

        /* a block factory failing */
        synth_init(&sy, 50, 4, 11);
        sy.fail_make_block = 2;
        ld = open_loader(ctx, &sy, 5, 1, 1, 0, threads, 4, NULL);
        for (int k = 0; k < 20; k++) assert_int_equal(ig_loader_next(ld, &b, NULL), IG_OK);
        assert_int_equal(ig_loader_next(ld, &b, &err), IG_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "building block 2"));
        ig_loader_free(ld);
        synth_done(&sy);
    }
    ig_ctx_free(ctx);
}

/* The end of the stream: sample ids are 64-bit, so a loader resumed near 2^64 samples gives the
 * micro-batches whose samples are all below 2^64 - 1, then an error, with any number of prefetch
 * threads (its workers' claims used to wrap around to 0 and the consumer waited forever). */
static void test_end_of_stream(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    synth sy;
    synth_init(&sy, 50, 4, 7);
    const uint32_t Bs[] = {1, 2, 3};
    for (int rep = 0; rep < 20; rep++)
        for (int threads = 0; threads <= 2; threads += 2)
            for (size_t bi = 0; bi < 3; bi++) {
                uint32_t B = Bs[bi];
                uint64_t end = UINT64_MAX / B; /* micro-batches of the stream */
                ig_loader_state st0 = {.consumed_samples = (end - 3) * B};
                ig_loader *probe = open_loader(ctx, &sy, B, 1, 1, 0, 0, 1, NULL);
                st0.index_key = ig_loader_state_get(probe).index_key;
                ig_loader_free(probe);
                ig_loader *ld = open_loader(ctx, &sy, B, 1, 1, 0, threads, 4, &st0);
                ig_batch b;
                ig_err err = {0};
                for (int i = 0; i < 3; i++) {
                    if (ig_loader_next(ld, &b, &err) != IG_OK) fail_msg("%s", err.msg);
                    assert_true(b.sample_ids[B - 1] == (end - 3 + (uint64_t)i) * B + B - 1);
                }
                assert_int_equal(ig_loader_next(ld, &b, &err), IG_ERR_INVALID_ARG);
                assert_non_null(strstr(err.msg, "the sample stream ends at 2^64 - 1 samples"));
                assert_int_equal(ig_loader_next(ld, &b, &err), IG_ERR_INVALID_ARG); /* sticky */
                ig_loader_free(ld);
            }
    synth_done(&sy);
    ig_ctx_free(ctx);
}

static void test_bad_options(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    synth sy;
    synth_init(&sy, 40, 4, 1);
    ig_loader_opts o = ig_loader_opts_default();
    o.make_block = synth_make;
    o.block_user = &sy;
    ig_loader *ld = (ig_loader *)&o; /* must be reset to NULL on failure */
    ig_err err = {0};
    o.dp = 2;
    o.rank = 2;
    assert_int_equal(ig_loader_create(&ld, ctx, &o, NULL, &err), IG_ERR_INVALID_ARG);
    assert_null(ld);
    assert_non_null(strstr(err.msg, "rank 2"));
    o.rank = 1;
    o.micro_batch = 3;
    ig_loader_state st = {.consumed_samples = 12, .index_key = 0};
    assert_int_equal(ig_loader_create(&ld, ctx, &o, &st, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "another index"));
    assert_int_equal(ig_loader_create(&ld, ctx, &o, NULL, &err), IG_OK);
    st = ig_loader_state_get(ld);
    ig_loader_free(ld);
    st.consumed_samples = 10; /* not a multiple of 3 * 2 */
    assert_int_equal(ig_loader_create(&ld, ctx, &o, &st, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "multiple"));
    o.make_block = NULL;
    assert_int_equal(ig_loader_create(&ld, ctx, &o, NULL, &err), IG_ERR_INVALID_ARG);
    o.make_block = synth_make;
    sy.n = 0;
    assert_int_equal(ig_loader_create(&ld, ctx, &o, NULL, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "empty"));
    sy.n = 40;
    sy.fail_make_block = 0;
    assert_int_equal(ig_loader_create(&ld, ctx, &o, NULL, &err), IG_ERR_FORMAT);
    synth_done(&sy);
    ig_ctx_free(ctx);
}

/* ---- shutdown -------------------------------------------------------------------------------- */

static void test_free_mid_flight(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    synth sy;
    synth_init(&sy, 30, 16, 2);
    sy.sleep_us = 300;
    for (int round = 0; round < 6; round++) {
        ig_loader *ld = open_loader(ctx, &sy, 4, 1, 1, 0, 1 + round, 2 + round * 3, NULL);
        for (int k = 0; k < round; k++) {
            ig_batch b;
            assert_int_equal(ig_loader_next(ld, &b, NULL), IG_OK);
        }
        if (round % 2) usleep(1000 * (unsigned)round);
        ig_loader_free(ld); /* threads are mid-batch and crossing into new blocks */
        assert_int_equal(sy.live_blocks, 0);
    }
    ig_loader_free(NULL);
    synth_done(&sy);
    ig_ctx_free(ctx);
}

/* ---- the data stream over real shards -------------------------------------------------------- */

/* Writes a shard of `docs` documents of 20..80 tokens made with tokenizer `tok`. */
static void write_shard(ig_ctx *ctx, const char *prefix, int docs, uint64_t seed, const char *tok) {
    ig_shard_writer *w = NULL;
    ig_shard_writer_opts wo = ig_shard_writer_opts_default();
    ig_err err = {0};
    if (ig_shard_writer_create(&w, ctx, prefix, &wo, &err) != IG_OK) fail_msg("%s", err.msg);
    int32_t doc[80];
    uint64_t x = seed;
    for (int d = 0; d < docs; d++) {
        size_t n = 20 + splitmix(&x) % 61;
        for (size_t i = 0; i < n; i++) doc[i] = (int32_t)(splitmix(&x) % 50000);
        assert_int_equal(ig_shard_writer_add_document(w, doc, n, NULL), IG_OK);
    }
    ig_manifest meta = {0};
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "%s", tok);
    meta.tokenizer_hash = ig_xxh3_64(tok, strlen(tok));
    meta.vocab_size = 50000;
    meta.eod_id = -1;
    if (ig_shard_writer_finish(w, &meta, &err) != IG_OK) fail_msg("%s", err.msg);
}

static void test_data_stream(void **state) {
    (void)state;
    ig_ctx *ctx = new_ctx();
    char *dir = igt_mkdtemp();
    const char *a = igt_fmt("%s/a", dir), *b = igt_fmt("%s/b", dir), *c = igt_fmt("%s/c", dir);
    write_shard(ctx, a, 300, 1, "gpt2");
    write_shard(ctx, b, 200, 2, "gpt2");
    write_shard(ctx, c, 100, 3, "other");
    const char *pre[2] = {a, b};
    double w[2] = {0.7, 0.3};
    ig_data_opts o = ig_data_opts_default();
    o.prefixes = pre;
    o.weights = w;
    o.n = 2;
    o.seq_len = 32;
    o.num_samples = 100;
    ig_data_stream *ds = NULL;
    ig_err err = {0};
    if (ig_data_stream_open(&ds, ctx, &o, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_data_stream_num_samples(ds), 100);
    assert_non_null(ig_data_stream_blend(ds));

    /* block 0 is the blend itself; block 1 a reshuffle of it (another key, another order) */
    ig_sample_source b0, b1;
    assert_int_equal(ig_data_stream_make_block(ds, 0, &b0, NULL), IG_OK);
    assert_int_equal(ig_data_stream_make_block(ds, 1, &b1, NULL), IG_OK);
    assert_int_equal(b0.key, ig_data_stream_key(ds));
    assert_true(b1.key != b0.key);
    assert_int_equal(b1.num_samples(b1.self), 100);
    int32_t x[33], y[33];
    int same = 0;
    for (uint64_t i = 0; i < 100; i++) {
        assert_int_equal(b0.get(b0.self, i, x, NULL), IG_OK);
        assert_int_equal(ig_blend_read(ig_data_stream_blend(ds), i, y, NULL), IG_OK);
        assert_memory_equal(x, y, sizeof x);
        assert_int_equal(b1.get(b1.self, i, y, NULL), IG_OK);
        same += !memcmp(x, y, sizeof x);
    }
    assert_true(same < 10);
    b0.free(b0.self);
    b1.free(b1.self);
    assert_int_equal(ig_data_block_seed(1234, 0), 1234);
    assert_true(ig_data_block_seed(1234, 1) != ig_data_block_seed(1234, 2));

    /* the loader over it: rank 1 of 2 sees the blend's samples at its ids, across blocks */
    ig_loader_opts lo = ig_loader_opts_default();
    lo.make_block = ig_data_stream_make_block;
    lo.block_user = ds;
    lo.micro_batch = 3;
    lo.dp = 2;
    lo.rank = 1;
    ig_loader *ld = NULL;
    assert_int_equal(ig_loader_create(&ld, ctx, &lo, NULL, &err), IG_OK);
    for (int k = 0; k < 20; k++) {
        ig_batch bt;
        assert_int_equal(ig_loader_next(ld, &bt, &err), IG_OK);
        for (uint32_t j = 0; j < 3; j++) {
            uint64_t g = bt.sample_ids[j];
            assert_int_equal(g, (uint64_t)k * 6 + 3 + j);
            if (g < 100) {
                assert_int_equal(ig_blend_read(ig_data_stream_blend(ds), g, y, NULL), IG_OK);
                assert_memory_equal(bt.tokens + j * 33, y, sizeof y);
            }
        }
    }
    ig_loader_state st = ig_loader_state_get(ld);
    assert_int_equal(st.index_key, ig_data_stream_key(ds));
    ig_loader_free(ld);
    ig_data_stream_close(ds);

    /* the saved state does not fit another seed's index */
    o.seed = 99;
    assert_int_equal(ig_data_stream_open(&ds, ctx, &o, &err), IG_OK);
    lo.block_user = ds;
    assert_int_equal(ig_loader_create(&ld, ctx, &lo, &st, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "another index"));
    ig_data_stream_close(ds);

    /* one prefix alone: Megatron's GPTDataset, no blend */
    o.weights = NULL;
    o.n = 1;
    assert_int_equal(ig_data_stream_open(&ds, ctx, &o, &err), IG_OK);
    assert_null(ig_data_stream_blend(ds));
    assert_non_null(ig_data_stream_index(ds));
    assert_true(ig_data_stream_num_samples(ds) >= 100);
    ig_data_stream_close(ds);
    o.n = 2;
    assert_int_equal(ig_data_stream_open(&ds, ctx, &o, &err), IG_ERR_INVALID_ARG);

    /* mixed tokenizers are refused unless allowed */
    pre[1] = c;
    o.weights = w;
    assert_int_equal(ig_data_stream_open(&ds, ctx, &o, &err), IG_ERR_INVALID_ARG);
    assert_string_equal(err.fix_option, "allow_mixed");
    o.allow_mixed = 1;
    assert_int_equal(ig_data_stream_open(&ds, ctx, &o, &err), IG_OK);
    ig_data_stream_close(ds);

    /* a missing shard, and data shorter than one sample */
    pre[1] = igt_fmt("%s/missing", dir);
    assert_int_not_equal(ig_data_stream_open(&ds, ctx, &o, &err), IG_OK);
    assert_null(ds);
    pre[1] = b;
    o.seq_len = 1000000;
    assert_int_equal(ig_data_stream_open(&ds, ctx, &o, &err), IG_ERR_INVALID_ARG);

    /* parsing the data path list */
    const char *pp[4];
    double ww[4];
    size_t n;
    int weighted;
    char *l1[] = {"x"}, *l2[] = {"0.5", "x", "2", "y"}, *l3[] = {"0.5", "x", "y"},
         *l4[] = {"x", "0.5"}, *l5[] = {"0", "x"}, *l6[] = {"3"};
    assert_int_equal(ig_data_parse_paths(l1, 1, pp, ww, &n, &weighted, NULL), IG_OK);
    assert_true(n == 1 && !weighted && !strcmp(pp[0], "x"));
    assert_int_equal(ig_data_parse_paths(l2, 4, pp, ww, &n, &weighted, NULL), IG_OK);
    assert_true(n == 2 && weighted && ww[1] == 2 && !strcmp(pp[1], "y"));
    assert_int_equal(ig_data_parse_paths(l3, 3, pp, ww, &n, &weighted, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_data_parse_paths(l4, 2, pp, ww, &n, &weighted, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "not a weight"));
    assert_int_equal(ig_data_parse_paths(l5, 2, pp, ww, &n, &weighted, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_data_parse_paths(l6, 1, pp, ww, &n, &weighted, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_data_parse_paths(l1, 0, pp, ww, &n, &weighted, &err), IG_ERR_INVALID_ARG);

    igt_rmtree(dir);
    free(dir);
    ig_ctx_free(ctx);
}

typedef struct lazy_reader {
    const ig_dataset *ds;
    uint64_t stride;
    int bad;
} lazy_reader;

static void *read_lazy(void *arg) {
    lazy_reader *r = arg;
    uint64_t n = ig_dataset_sequences(r->ds);
    ig_err err = {0};
    for (int pass = 0; pass < 4; pass++)
        for (uint64_t j = 0; j < n; j++) {
            uint64_t k = (j * r->stride + (uint64_t)pass) % n;
            int32_t got[2];
            if (ig_dataset_read_tokens(r->ds, k, 0, 2, got, &err) != IG_OK ||
                got[0] != (int32_t)k || got[1] != (int32_t)(k * 3 % 60000))
                r->bad++;
        }
    return NULL;
}

/* A dataset of more shards than it keeps open, read by several threads at once: each read opens
 * the shard it needs and the least recently used one no reader holds is closed (run under TSan). */
static void test_lazy_dataset_threads(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    enum { N = IG_DATASET_OPEN_MAX + 64 };
    char **names = calloc(N, sizeof *names);
    assert_non_null(names);
    for (int k = 0; k < N; k++) {
        names[k] = strdup(igt_fmt("%s/t_%05d", dir, k));
        uint16_t ids[2] = {(uint16_t)k, (uint16_t)(k * 3 % 60000)};
        igt_write_tiny_shard(names[k], ids, 2);
    }
    ig_ctx *ctx = NULL;
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 1;
    co.log_level = IG_LOG_ERROR;
    assert_int_equal(ig_ctx_create(&ctx, &co, &err), IG_OK);
    ig_dataset *ds = NULL;
    if (ig_dataset_open(&ds, ctx, (const char *const *)names, N, &err) != IG_OK)
        fail_msg("%s", err.msg);
    lazy_reader r[3] = {{ds, 1, 0}, {ds, 7919, 0}, {ds, 104729, 0}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&t[i], NULL, read_lazy, &r[i]), 0);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) assert_int_equal(r[i].bad, 0);
    ig_dataset_close(ds);
    ig_ctx_free(ctx);
    for (int k = 0; k < N; k++) free(names[k]);
    free(names);
    igt_rmtree(dir);
    free(dir);
}

/* Opens a blend of a and b through ctx and reads `steps` micro-batches with two prefetch threads
 * into out (steps x 4 x 17 tokens). Returns the first failure. */
static ig_status loader_steps(ig_ctx *ctx, const char *a, const char *b, int steps, int32_t *out,
                              ig_err *err) {
    const char *pre[2] = {a, b};
    double w[2] = {0.6, 0.4};
    ig_data_opts o = ig_data_opts_default();
    o.prefixes = pre;
    o.weights = w;
    o.n = 2;
    o.seq_len = 16;
    o.num_samples = 40;
    ig_data_stream *ds = NULL;
    ig_status st = ig_data_stream_open(&ds, ctx, &o, err);
    ig_loader *ld = NULL;
    if (st == IG_OK) {
        ig_loader_opts lo = ig_loader_opts_default();
        lo.make_block = ig_data_stream_make_block;
        lo.block_user = ds;
        lo.micro_batch = 4;
        lo.prefetch_threads = 2;
        lo.prefetch_depth = 3;
        st = ig_loader_create(&ld, ctx, &lo, NULL, err);
    }
    for (int k = 0; k < steps && st == IG_OK; k++) { /* past one block: a second is made */
        ig_batch bt;
        if ((st = ig_loader_next(ld, &bt, err)) == IG_OK)
            memcpy(out + (size_t)k * 4 * 17, bt.tokens, 4 * 17 * sizeof *out);
    }
    ig_loader_free(ld);
    ig_data_stream_close(ds);
    return st;
}

/* Every allocation of opening a blend and loading from it failing in turn (the k-th alone, for
 * every k up to the number a run makes, some in the prefetch threads): each run gives the same
 * batches or fails with IG_ERR_NOMEM, and nothing leaks (ASan) or hangs. */
static void test_allocation_failures(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_ctx *plain = new_ctx();
    char *a = strdup(igt_fmt("%s/a", dir)), *b = strdup(igt_fmt("%s/b", dir));
    write_shard(plain, a, 30, 1, "gpt2");
    write_shard(plain, b, 20, 2, "gpt2");
    ig_ctx_free(plain);
    enum { STEPS = 14 };
    int32_t ref[STEPS * 4 * 17], got[STEPS * 4 * 17];
    igt_flaky fl;
    ig_ctx *ctx = igt_flaky_ctx(&fl, 1);
    ig_err err = {0};
    if (loader_steps(ctx, a, b, STEPS, ref, &err) != IG_OK) fail_msg("%s", err.msg);
    long calls = atomic_load(&fl.calls);
    assert_true(calls > 20);
    int nomem = 0;
    for (long k = 1; k <= calls + 10; k++) {
        igt_flaky_arm(&fl, k);
        ig_status st = loader_steps(ctx, a, b, STEPS, got, &err);
        if (st == IG_OK) {
            assert_memory_equal(ref, got, sizeof ref);
            continue;
        }
        if (st != IG_ERR_NOMEM) fail_msg("allocation %ld: %s", k, err.msg);
        nomem++;
    }
    assert_true(nomem >= calls / 2);
    print_message("%ld allocations, %d failed cleanly\n", calls, nomem);
    ig_ctx_free(ctx);
    free(a);
    free(b);
    igt_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp_union),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_resume_other_dp),
        cmocka_unit_test(test_infinite_blocks),
        cmocka_unit_test(test_prefetch_variations),
        cmocka_unit_test(test_error_propagation),
        cmocka_unit_test(test_end_of_stream),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_free_mid_flight),
        cmocka_unit_test(test_data_stream),
        cmocka_unit_test(test_lazy_dataset_threads),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
