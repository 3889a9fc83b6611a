/* test_clip_loader.c - the clip loader (loader/clip_loader.c) over frame shards: every micro-batch
 * has one shape and its bucket's batch size and holds exactly the clips it names, with each
 * clip's label and caption document (from its record); an epoch holds
 * every clip (padded to whole micro-batches); the union over ranks of a step is the same for any
 * dp; a loader resumed from a saved state - also at another dp - continues exactly; epochs differ
 * and the order is a function of the seed alone. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"
#include "loader/loader.h"

static char *g_dir;
static ig_ctx *g_ctx;
static ig_clip_dataset *g_ds;

/* clip c of the test shard: bucket c % 3 == 2 ? 1 : 0 (bucket 0: 2 frames of 4x6, batch 3;
 * bucket 1: 3 frames of 8x4, batch 2), pixels a function of c */
static const ig_clip_bucket buckets[2] = {{"b0", 2, 4, 6, 3}, {"b1", 3, 8, 4, 2}};
#define N_CLIPS 23

static uint8_t pixel(uint64_t c, size_t i) {
    return (uint8_t)(c * 13 + i * 7);
}

/* clip c's label: 100 + c, none for every fifth; its caption: document c % 4 of shard 0's caption
 * shard (clips 0 .. 10; document d holds the ids 1000 + d, 7), none in shard 1 (no captions) */
#define SHARD0_CLIPS 11
static uint32_t label_of(uint64_t c) {
    return c % 5 == 4 ? IG_CLIP_NONE : (uint32_t)(100 + c);
}
static uint32_t caption_of(uint64_t c) {
    return c < SHARD0_CLIPS ? (uint32_t)(c % 4) : IG_CLIP_NONE;
}

static int setup(void **state) {
    (void)state;
    g_dir = igt_mkdtemp();
    ig_err err = {0};
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 2;
    o.log_level = IG_LOG_ERROR;
    if (ig_ctx_create(&g_ctx, &o, &err) != IG_OK) return -1;
    /* two shards (so clip ids cross a shard boundary) */
    const char *pre[2] = {strdup(igt_fmt("%s/c0", g_dir)), strdup(igt_fmt("%s/c1", g_dir))};
    for (int s = 0; s < 2; s++) {
        ig_video_shard_writer *w = NULL;
        if (ig_video_shard_writer_create(&w, NULL, pre[s], NULL, &err) != IG_OK) return -1;
        for (uint64_t c = s ? SHARD0_CLIPS : 0; c < (s ? N_CLIPS : SHARD0_CLIPS); c++) {
            const ig_clip_bucket *b = &buckets[c % 3 == 2];
            ig_clip_info ci = {.frames = b->frames,
                               .height = b->height,
                               .width = b->width,
                               .fps_num = 25,
                               .fps_den = 1,
                               .source = 0,
                               .caption = caption_of(c),
                               .bucket = c % 3 == 2,
                               .label = label_of(c),
                               .tb_num = 1,
                               .tb_den = 25};
            size_t n = (size_t)b->frames * b->height * b->width * 3;
            uint8_t px[3 * 8 * 6 * 3];
            for (size_t i = 0; i < n; i++) px[i] = pixel(c, i);
            ig_clip_frame fr[3] = {{0, 0}, {1, 1}, {2, 2}};
            if (ig_video_shard_writer_add(w, &ci, fr, px, n, &err) != IG_OK) return -1;
        }
        char *src[] = {"v.mp4"};
        ig_video_shard_meta meta = {.sources = src, .n_sources = 1, .n_buckets = 2};
        meta.buckets = (ig_clip_bucket *)buckets;
        if (s == 0) { /* a caption shard of 4 documents beside shard 0 */
            snprintf(meta.captions, sizeof meta.captions, "c0.captions");
            meta.caption_documents = 4;
            ig_shard_writer *cw = NULL;
            ig_shard_writer_opts co = ig_shard_writer_opts_default();
            if (ig_shard_writer_create(&cw, NULL, igt_fmt("%s/c0.captions", g_dir), &co, &err))
                return -1;
            for (int32_t d = 0; d < 4; d++) {
                int32_t ids[2] = {1000 + d, 7};
                if (ig_shard_writer_add_document(cw, ids, 2, &err) != IG_OK) return -1;
            }
            if (ig_shard_writer_finish(cw, NULL, &err) != IG_OK) return -1;
        }
        ig_video_shard_meta done;
        if (ig_video_shard_writer_finish(w, &meta, &done, &err) != IG_OK ||
            ig_video_shard_meta_write(&done, pre[s], 0, &err) != IG_OK)
            return -1;
        ig_video_shard_meta_clear(&done);
    }
    if (ig_clip_dataset_open(&g_ds, g_ctx, pre, 2, &err) != IG_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    free((char *)pre[0]);
    free((char *)pre[1]);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ig_clip_dataset_close(g_ds);
    ig_ctx_free(g_ctx);
    igt_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static ig_clip_loader *make(uint32_t dp, uint32_t rank, uint32_t accum, uint64_t seed,
                            const ig_loader_state *start, int threads) {
    ig_clip_loader_opts o = ig_clip_loader_opts_default();
    o.dataset = g_ds;
    o.dp = dp;
    o.rank = rank;
    o.grad_accum = accum;
    o.seed = seed;
    o.prefetch_threads = threads;
    ig_clip_loader *l = NULL;
    ig_err err = {0};
    if (ig_clip_loader_create(&l, g_ctx, &o, start, &err) != IG_OK) fail_msg("%s", err.msg);
    return l;
}

/* A batch's clip ids as a 64-bit fingerprint (order included), after checking its contents. */
static uint64_t check_batch(const ig_clip_batch *b) {
    assert_true(b->bucket < 2);
    const ig_clip_bucket *bk = &buckets[b->bucket];
    assert_int_equal(b->n, bk->batch_size);
    assert_int_equal(b->frames_per_clip, bk->frames);
    assert_int_equal(b->height, bk->height);
    assert_int_equal(b->width, bk->width);
    assert_int_equal((uintptr_t)b->frames % 64, 0);
    size_t clip = (size_t)bk->frames * bk->height * bk->width * 3;
    for (uint32_t k = 0; k < b->n; k++) {
        uint64_t c = b->clips[k];
        assert_true(c < N_CLIPS);
        assert_int_equal(c % 3 == 2, b->bucket);
        if (b->labels[k] != label_of(c))
            fail_msg("clip %llu: label %u, expected %u", (unsigned long long)c, b->labels[k],
                     label_of(c));
        if (b->captions[k] != caption_of(c))
            fail_msg("clip %llu: caption %u, expected %u", (unsigned long long)c, b->captions[k],
                     caption_of(c));
        /* the caption document names the clip's tokens */
        int32_t ids[4];
        size_t len = 0;
        ig_err err = {0};
        assert_int_equal(ig_clip_dataset_caption(g_ds, c, ids, 4, &len, &err), IG_OK);
        assert_int_equal(len, b->captions[k] == IG_CLIP_NONE ? 0 : 2);
        if (len) assert_int_equal(ids[0], 1000 + (int32_t)b->captions[k]);
        for (size_t i = 0; i < clip; i++)
            if (b->frames[k * clip + i] != pixel(c, i))
                fail_msg("clip %llu byte %zu", (unsigned long long)c, i);
    }
    return ig_xxh3_64(b->clips, b->n * sizeof *b->clips);
}

static void test_epoch_holds_every_clip(void **state) {
    (void)state;
    ig_clip_loader *l = make(1, 0, 1, 7, NULL, 2);
    /* bucket 0: 16 clips in batches of 3 -> 6 (padded); bucket 1: 7 clips in 2s -> 4 */
    assert_int_equal(ig_clip_loader_epoch_batches(l), 10);
    int seen[N_CLIPS] = {0};
    ig_err err = {0};
    for (int i = 0; i < 10; i++) {
        ig_clip_batch b;
        assert_int_equal(ig_clip_loader_next(l, &b, &err), IG_OK);
        assert_int_equal(b.unit, (uint64_t)i);
        check_batch(&b);
        for (uint32_t k = 0; k < b.n; k++) seen[b.clips[k]]++;
    }
    int total = 0;
    for (int c = 0; c < N_CLIPS; c++) {
        assert_true(seen[c] >= 1);
        total += seen[c];
    }
    assert_int_equal(total, 6 * 3 + 4 * 2); /* padding repeats 2 + 1 clips */
    ig_clip_loader_free(l);
}

/* The fingerprints of steps [0, steps) of a run at dp, A: per step, sorted over ranks and
 * micro-batches. */
static void run_steps(uint32_t dp, uint32_t accum, uint64_t seed, uint64_t from, uint64_t steps,
                      uint64_t *out, int threads) {
    uint64_t per_step = (uint64_t)dp * accum;
    for (uint32_t r = 0; r < dp; r++) {
        ig_loader_state st = {.consumed_samples = from * per_step};
        ig_clip_loader *l = make(dp, r, accum, seed, NULL, threads);
        st.index_key = ig_clip_loader_state(l).index_key;
        ig_clip_loader_free(l);
        l = make(dp, r, accum, seed, from ? &st : NULL, threads);
        ig_err err = {0};
        for (uint64_t s = 0; s < steps; s++)
            for (uint32_t m = 0; m < accum; m++) {
                ig_clip_batch b;
                assert_int_equal(ig_clip_loader_next(l, &b, &err), IG_OK);
                assert_int_equal(b.step, from + s);
                assert_int_equal(b.unit, (from + s) * per_step + m * dp + r);
                out[s * per_step + m * dp + r] = check_batch(&b);
            }
        ig_clip_loader_free(l);
    }
}

static void test_dp_union_and_resume(void **state) {
    (void)state;
    enum { STEPS = 13, G = 4 }; /* 52 micro-batches: five epochs and a bit */
    uint64_t a[STEPS * G], b[STEPS * G], c[STEPS * G];
    run_steps(1, 4, 99, 0, STEPS, a, 2); /* dp 1, A 4 */
    run_steps(2, 2, 99, 0, STEPS, b, 0); /* dp 2, A 2, no prefetch threads */
    run_steps(4, 1, 99, 0, STEPS, c, 1); /* dp 4, A 1 */
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(a, c, sizeof a);
    /* resumed after 5 steps at another dp: the same as uninterrupted */
    uint64_t d[8 * G];
    run_steps(2, 2, 99, 5, 8, d, 2);
    assert_memory_equal(d, a + 5 * G, sizeof d);
    /* epochs differ; another seed gives another order */
    assert_memory_not_equal(a, a + 10, 10 * sizeof *a);
    run_steps(1, 4, 100, 0, STEPS, b, 2);
    assert_memory_not_equal(a, b, sizeof a);
}

static void test_refusals(void **state) {
    (void)state;
    ig_clip_loader *l = make(2, 0, 1, 5, NULL, 1);
    ig_loader_state st = ig_clip_loader_state(l);
    ig_clip_loader_free(l);
    ig_clip_loader_opts o = ig_clip_loader_opts_default();
    o.dataset = g_ds;
    o.dp = 2;
    ig_err err = {0};
    st.consumed_samples = 3; /* not a step boundary at dp 2 */
    assert_int_equal(ig_clip_loader_create(&l, g_ctx, &o, &st, &err), IG_ERR_INVALID_ARG);
    st.consumed_samples = 4;
    st.index_key ^= 1; /* another stream */
    assert_int_equal(ig_clip_loader_create(&l, g_ctx, &o, &st, &err), IG_ERR_INVALID_ARG);
    o.dataset = NULL;
    assert_int_equal(ig_clip_loader_create(&l, g_ctx, &o, NULL, &err), IG_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epoch_holds_every_clip),
        cmocka_unit_test(test_dp_union_and_resume),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
