/* test_tokenizer_threads.c - one tokenizer shared by threads that meet the same new characters at
 * once: the characters' entries a piece's merge starts from (preprocess/bpe_premerge.c) are made
 * by the first thread to meet each and read by the others, and every thread gets the ids of
 * merging from bytes alone. Then the same with the threads' encoders sharing one cache of merged
 * pieces (preprocess/bpe_encode.c), where one thread adds what the others find. Small enough to
 * run under TSan (Makefile: TSAN_TESTS), which checks that an entry or a cached piece is complete
 * before another thread reads it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preprocess/preprocess.h"
#include "preprocess/tokenizer_internal.h"
#include "script_chars.h"
#include "testutil.h"

/* Words of many scripts (and some bytes that are not UTF-8) separated by spaces and commas: most
 * pieces need merging, and most of those start from premerged characters. */
static size_t multiscript_text(char *buf, size_t cap, uint64_t *x) {
    const char *const *letters = igt_script_chars;
    const size_t n_letters = IGT_N_SCRIPT_CHARS;
    size_t n = 0;
    while (n + 64 < cap) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        size_t script = (size_t)(*x % 12) * 3, len = 2 + (size_t)(*x >> 8) % 9;
        for (size_t i = 0; i < len; i++) {
            *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
            const char *l = letters[(script + *x % 4) % n_letters];
            memcpy(buf + n, l, strlen(l));
            n += strlen(l);
        }
        buf[n++] = *x % 11 == 0 ? ',' : ' ';
    }
    return n;
}

typedef struct encode_job {
    pthread_barrier_t *start;
    ig_tokenizer *t;
    ig_piece_cache *pieces; /* shared by the threads' encoders, or NULL */
    const char *text;
    size_t len;
    ig_tokens out;
    ig_status st;
} encode_job;

static void *encode_thread(void *arg) {
    encode_job *j = arg;
    ig_encoder *enc = NULL;
    ig_err err = {0};
    j->st = ig_encoder_create(&enc, j->t, &err);
    if (j->st == IG_OK) j->st = ig_encoder_share(enc, j->pieces, &err);
    pthread_barrier_wait(j->start); /* all at the text's first characters at once */
    if (j->st == IG_OK) j->st = ig_encoder_encode(enc, j->text, j->len, 0, &j->out, &err);
    ig_encoder_free(enc);
    return NULL;
}

/* One round: path's tokenizer loaded afresh (no entry made yet), threads started together; with
 * share, their encoders share a new cache of merged pieces. */
static void premerge_threads(const char *path, uint64_t seed, int share) {
    ig_tokenizer *t = NULL;
    ig_err err = {0};
    if (ig_tokenizer_load(&t, NULL, path, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    static char text[1 << 15];
    uint64_t x = seed;
    size_t len = multiscript_text(text, sizeof text, &x);
    /* the reference: every piece merged from its bytes (no entry is made) */
    struct ig_seg_table *segs = t->segs;
    t->segs = NULL;
    ig_encoder *enc = NULL;
    ig_tokens want = {0};
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    assert_int_equal(ig_encoder_encode(enc, text, len, 0, &want, &err), IG_OK);
    ig_encoder_free(enc);
    t->segs = segs;
    ig_piece_cache *pieces = NULL;
    if (share) assert_int_equal(ig_piece_cache_create(&pieces, t, 2048, &err), IG_OK);
    enum { THREADS = 4 };
    encode_job jobs[THREADS];
    pthread_t th[THREADS];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (encode_job){.start = &start, .t = t, .pieces = pieces, .text = text, .len = len};
        assert_int_equal(pthread_create(&th[i], NULL, encode_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(jobs[i].st, IG_OK);
        assert_int_equal(jobs[i].out.n, want.n);
        assert_memory_equal(jobs[i].out.ids, want.ids, want.n * sizeof want.ids[0]);
        ig_tokens_free(&jobs[i].out);
    }
    pthread_barrier_destroy(&start);
    ig_piece_cache_free(pieces);
    ig_tokens_free(&want);
    ig_tokenizer_free(t);
}

/* cl100k_base's rank file and GPT-2's merges, several rounds each: threads meet a new character
 * at the same moment only when the scheduler lets them run side by side, which a round does not
 * promise. Rounds 7 and 8 share a cache of merged pieces (2048 of them: it fills). */
static void test_premerge_threads(void **state) {
    (void)state;
    for (uint64_t round = 1; round <= 8; round++) {
        uint64_t seed = 0xD1B54A32D192ED03ull * round;
        int share = round > 6;
        premerge_threads(igt_fmt("%s/tests/data/tokenizer/cl100k_base.tiktoken", igt_source_dir()),
                         seed, share);
        premerge_threads(igt_fmt("%s/data/gpt2/tokenizer.json", igt_source_dir()), seed, share);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_premerge_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
