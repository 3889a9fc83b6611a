/* test_pipeline.c - the text pipeline end to end: exact shards against the reference token ids,
 * byte-identical output for any worker count, sharding, dedup, bad input, and what is left
 * behind by failures and earlier runs. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "dataset/dataset.h"
#include "preprocess/preprocess.h"

static ig_ctx *g_ctx;
static ig_tokenizer *g_gpt2;

static int setup(void **state) {
    (void)state;
    ig_err err = {0};
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 2;
    o.log_level = IG_LOG_ERROR;
    if (ig_ctx_create(&g_ctx, &o, &err) != IG_OK) return -1;
    const char *dir = igt_fmt("%s/data/gpt2", igt_source_dir());
    if (ig_tokenizer_load(&g_gpt2, g_ctx, dir, NULL, &err) != IG_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ig_tokenizer_free(g_gpt2);
    ig_ctx_free(g_ctx);
    return 0;
}

/* Runs the pipeline over inputs with the given thread count (1: all on this thread; N: N threads
 * that read and tokenize, this one also writing); returns the status. */
static ig_status run(const char *const *inputs, size_t n, const char *out, int threads,
                     ig_preprocess_opts *extra, ig_preprocess_stats *st, ig_err *err) {
    ig_preprocess_opts o = extra ? *extra : ig_preprocess_opts_default();
    o.inputs = inputs;
    o.n_inputs = n;
    o.output_prefix = out;
    if (!o.tokenizer) o.tokenizer = g_gpt2;
    o.threads = threads;
    ig_preprocess_stats local = {0};
    ig_status s = ig_preprocess_text(g_ctx, &o, st ? st : &local, err);
    if (!st) ig_preprocess_stats_clear(&local);
    return s;
}

static void assert_same_file(const char *a, const char *b) {
    size_t la, lb;
    char *da = igt_read(a, &la), *db = igt_read(b, &lb);
    if (la != lb) fail_msg("%s has %zu bytes, %s has %zu", a, la, b, lb);
    if (memcmp(da, db, la) != 0) {
        size_t i = 0;
        while (da[i] == db[i]) i++;
        fail_msg("%s and %s differ at byte %zu", a, b, i);
    }
    free(da);
    free(db);
}

/* The shard of each shared corpus, read as .jsonl and as .jsonl.zst, is byte-for-byte the
 * reference GPT-2 ids (u16, each document followed by <|endoftext|>). */
static void test_exact_against_reference(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    const char *corpora[] = {"tinyshakespeare", "udhr_multilingual", "c_code", "emoji_test",
                             "edge_cases"};
    char *dir = igt_mkdtemp();
    for (size_t c = 0; c < 5; c++) {
        for (int zst = 0; zst < 2; zst++) {
            const char *in =
                igt_fmt("%s/text/%s.jsonl%s", igt_shared_data(), corpora[c], zst ? ".zst" : "");
            const char *out = igt_fmt("%s/%s%d", dir, corpora[c], zst);
            ig_err err = {0};
            ig_preprocess_opts o = ig_preprocess_opts_default();
            o.append_eod = 1;
            ig_preprocess_stats st = {0};
            ig_status s = run(&in, 1, out, 2, &o, &st, &err);
            if (s != IG_OK) fail_msg("%s: %s", in, err.msg);
            assert_same_file(igt_fmt("%s.bin", out),
                             igt_fmt("%s/tokens/%s.gpt2.u16.bin", igt_shared_data(), corpora[c]));
            assert_int_equal(st.docs_read, st.docs_written);
            ig_preprocess_stats_clear(&st);
            assert_int_equal(ig_shard_verify(g_ctx, out, &err), IG_OK);
        }
    }
    igt_rmtree(dir);
    free(dir);
}

/* cl100k through a .tiktoken file: int32 shards equal the u32 reference ids. */
static void test_exact_cl100k(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    ig_err err = {0};
    ig_tokenizer *tok = NULL;
    const char *path = igt_fmt("%s/tiktoken/cl100k_base.tiktoken", igt_shared_data());
    if (ig_tokenizer_load(&tok, g_ctx, path, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    char *dir = igt_mkdtemp();
    const char *in = igt_fmt("%s/text/udhr_multilingual.jsonl.zst", igt_shared_data());
    const char *out = igt_fmt("%s/udhr", dir);
    ig_preprocess_opts o = ig_preprocess_opts_default();
    o.tokenizer = tok;
    o.append_eod = 1;
    if (run(&in, 1, out, 2, &o, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_same_file(igt_fmt("%s.bin", out),
                     igt_fmt("%s/tokens/udhr_multilingual.cl100k.u32.bin", igt_shared_data()));
    ig_shard *sh = NULL;
    assert_int_equal(ig_shard_open(&sh, g_ctx, out, &err), IG_OK);
    assert_int_equal(ig_shard_dtype(sh), IG_DTYPE_I32);
    assert_int_equal(ig_shard_documents(sh), 96);
    ig_shard_close(sh);
    ig_tokenizer_free(tok);
    igt_rmtree(dir);
    free(dir);
}

/* The bundled corpus with 1, 2 and 3 workers gives identical .bin, .idx and manifests. */
static void test_deterministic_across_workers(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *in = igt_fmt("%s/data/tinyshakespeare.jsonl", igt_source_dir());
    ig_err err = {0};
    ig_preprocess_opts o = ig_preprocess_opts_default();
    o.append_eod = 1;
    o.tokenizer_path = "data/gpt2";
    for (int w = 1; w <= 3; w++) {
        ig_preprocess_stats st = {0};
        const char *out = igt_fmt("%s/w%d", dir, w);
        if (run(&in, 1, out, w, &o, &st, &err) != IG_OK) fail_msg("%s", err.msg);
        assert_int_equal(st.docs_written, 7222);
        assert_int_equal(st.tokens, 330807);
        ig_preprocess_stats_clear(&st);
    }
    for (int w = 2; w <= 3; w++)
        for (int e = 0; e < 2; e++) {
            const char *ext = e ? ".idx" : ".bin";
            assert_same_file(igt_fmt("%s/w1%s", dir, ext), igt_fmt("%s/w%d%s", dir, w, ext));
        }
    ig_manifest m1 = {0}, m3 = {0};
    assert_int_equal(ig_manifest_read(&m1, igt_fmt("%s/w1", dir), &err), IG_OK);
    assert_int_equal(ig_manifest_read(&m3, igt_fmt("%s/w3", dir), &err), IG_OK);
    assert_true(m1.bin_xxh3 == m3.bin_xxh3 && m1.idx_xxh3 == m3.idx_xxh3);
    assert_int_equal(m1.documents, 7222);
    assert_string_equal(m1.tokenizer, "gpt2");
    ig_manifest_clear(&m1);
    ig_manifest_clear(&m3);
    igt_rmtree(dir);
    free(dir);
}

/* --shard-size splits at document boundaries; the shards together are the unsplit output. */
static void test_shard_size(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    /* igt_fmt's buffers rotate: keep the input path in memory of its own */
    char *in_path = strdup(igt_fmt("%s/data/tinyshakespeare.jsonl", igt_source_dir()));
    const char *in = in_path;
    ig_err err = {0};
    ig_preprocess_opts o = ig_preprocess_opts_default();
    o.append_eod = 1;
    if (run(&in, 1, igt_fmt("%s/whole", dir), 2, &o, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    o.shard_size = 200000; /* bytes of .bin: 661,614 in all -> 4 shards */
    ig_preprocess_stats st = {0};
    if (run(&in, 1, igt_fmt("%s/part", dir), 2, &o, &st, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(st.shards, 4);
    size_t whole_len;
    char *whole = igt_read(igt_fmt("%s/whole.bin", dir), &whole_len);
    size_t pos = 0;
    uint64_t docs = 0;
    for (size_t i = 0; i < st.n_shard_prefixes; i++) {
        assert_string_equal(st.shard_prefixes[i], igt_fmt("%s/part_%05zu", dir, i));
        assert_int_equal(ig_shard_verify(g_ctx, st.shard_prefixes[i], &err), IG_OK);
        size_t len;
        char *part = igt_read(igt_fmt("%s.bin", st.shard_prefixes[i]), &len);
        assert_true(pos + len <= whole_len);
        assert_memory_equal(part, whole + pos, len);
        pos += len;
        free(part);
        ig_shard *sh = NULL;
        assert_int_equal(ig_shard_open(&sh, g_ctx, st.shard_prefixes[i], &err), IG_OK);
        docs += ig_shard_documents(sh);
        /* every shard ends with a whole document: its last token is <|endoftext|> */
        int32_t last;
        uint64_t n = ig_shard_sequences(sh);
        assert_int_equal(ig_shard_read_tokens(sh, n - 1,
                                              (uint64_t)ig_shard_seq_length(sh, n - 1) - 1, 1,
                                              &last, &err),
                         IG_OK);
        assert_int_equal(last, 50256);
        ig_shard_close(sh);
    }
    assert_int_equal(pos, whole_len);
    assert_int_equal(docs, 7222);
    /* the shard list names them all by the one prefix */
    char **names = NULL;
    size_t n_names = 0;
    assert_int_equal(ig_shard_list_expand(igt_fmt("%s/part", dir), &names, &n_names, &err), IG_OK);
    assert_int_equal(n_names, st.n_shard_prefixes);
    for (size_t i = 0; i < n_names; i++) assert_string_equal(names[i], st.shard_prefixes[i]);
    ig_shard_list_free(names, n_names);
    size_t checked = 0;
    assert_int_equal(ig_shard_list_verify(g_ctx, igt_fmt("%s/part", dir), &checked, &err), IG_OK);
    assert_int_equal(checked, 4);
    /* a dataset opened by the list's prefix holds every shard, in order */
    ig_dataset *ds = NULL;
    const char *list_prefix = igt_fmt("%s/part", dir);
    assert_int_equal(ig_dataset_open(&ds, g_ctx, &list_prefix, 1, &err), IG_OK);
    assert_int_equal(ig_dataset_num_shards(ds), 4);
    assert_int_equal(ig_dataset_documents(ds), 7222);
    assert_int_equal(ig_dataset_tokens(ds), 330807);
    ig_dataset_close(ds);
    /* the list counts as a complete output: no rerun over it without --force */
    ig_preprocess_stats again = {0};
    assert_int_equal(run(&in, 1, igt_fmt("%s/part", dir), 2, &o, &again, &err), IG_ERR_EXISTS);
    ig_preprocess_stats_clear(&again);
    free(whole);
    free(in_path);
    ig_preprocess_stats_clear(&st);
    igt_rmtree(dir);
    free(dir);
}

/* --dedup exact drops repeated texts and counts them; several keys give one output each. */
static void test_dedup_and_keys(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *in = igt_fmt("%s/in.jsonl", dir);
    const char *text = "{\"text\": \"hello world\", \"title\": \"a\"}\n"
                       "{\"text\": \"second\", \"title\": \"b\"}\n"
                       "{\"text\": \"hello world\", \"title\": \"a\"}\n"
                       "{\"text\": \"hello world\", \"title\": \"c\"}\n";
    igt_write(in, text, strlen(text));
    ig_err err = {0};
    ig_preprocess_opts o = ig_preprocess_opts_default();
    o.dedup_exact = 1;
    ig_preprocess_stats st = {0};
    if (run(&in, 1, igt_fmt("%s/d", dir), 1, &o, &st, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(st.docs_read, 4);
    assert_int_equal(st.docs_duplicate, 2);
    assert_int_equal(st.docs_written, 2);
    ig_preprocess_stats_clear(&st);

    static const char *const keys[] = {"text", "title"};
    o.json_keys = keys;
    o.n_keys = 2;
    if (run(&in, 1, igt_fmt("%s/k", dir), 2, &o, &st, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(st.docs_duplicate, 1); /* both fields together decide */
    assert_int_equal(st.n_shard_prefixes, 2);
    assert_string_equal(st.shard_prefixes[0], igt_fmt("%s/k_text", dir));
    assert_string_equal(st.shard_prefixes[1], igt_fmt("%s/k_title", dir));
    ig_shard *sh = NULL;
    assert_int_equal(ig_shard_open(&sh, g_ctx, st.shard_prefixes[1], &err), IG_OK);
    assert_int_equal(ig_shard_documents(sh), 3);
    ig_shard_close(sh);
    ig_preprocess_stats_clear(&st);
    igt_rmtree(dir);
    free(dir);
}

/* A bad record fails the run with file:line and leaves nothing; --on-error skip counts it. */
static void test_bad_input(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *in = igt_fmt("%s/bad.jsonl", dir);
    const char *text = "{\"text\": \"fine\"}\n"
                       "{\"text\": \"also fine\"}\n"
                       "{\"text\": broken\n"
                       "{\"other\": \"no text key\"}\n"
                       "{\"text\": 42}\n"
                       "{\"text\": \"ok \\ud83d\\ude0d\"}\n";
    igt_write(in, text, strlen(text));
    ig_err err = {0};
    ig_status s = run(&in, 1, igt_fmt("%s/out", dir), 2, NULL, NULL, &err);
    assert_int_equal(s, IG_ERR_FORMAT);
    if (!strstr(err.msg, "bad.jsonl:3")) fail_msg("message lacks file:line: %s", err.msg);
    /* the library names the option that would let the run go on, never a flag */
    assert_string_equal(err.fix_option, "on_error");
    assert_string_equal(err.fix_value, "skip");
    assert_null(strstr(err.msg, "--"));
    assert_int_equal(igt_count_entries(dir), 1); /* only the input: nothing else left */

    ig_preprocess_opts o = ig_preprocess_opts_default();
    o.on_error = IG_ON_ERROR_SKIP;
    ig_preprocess_stats st = {0};
    if (run(&in, 1, igt_fmt("%s/out", dir), 2, &o, &st, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(st.docs_read, 6);
    assert_int_equal(st.docs_skipped, 3);
    assert_int_equal(st.docs_written, 3);
    assert_int_equal(st.n_reported, 3);
    assert_non_null(strstr(st.reported[0], "bad.jsonl:3"));
    assert_non_null(strstr(st.reported[1], "bad.jsonl:4"));
    assert_non_null(strstr(st.reported[2], "bad.jsonl:5"));
    ig_preprocess_stats_clear(&st);
    assert_int_equal(ig_shard_verify(g_ctx, igt_fmt("%s/out", dir), &err), IG_OK);

    /* a corrupt .zst is fatal without skip, and names the file; with skip it is skipped from where
     * it breaks, counted and reported like a bad record */
    const char *zin = igt_fmt("%s/trunc.jsonl.zst", dir);
    size_t bound = ZSTD_compressBound(strlen(text));
    char *z = malloc(bound);
    size_t zn = ZSTD_compress(z, bound, text, strlen(text), 3);
    assert_false(ZSTD_isError(zn));
    igt_write(zin, z, zn - 5);
    free(z);
    s = run(&zin, 1, igt_fmt("%s/z", dir), 2, NULL, NULL, &err);
    assert_int_equal(s, IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "trunc.jsonl.zst"));
    assert_false(ig_file_exists(igt_fmt("%s/z.bin", dir)));
    const char *two[] = {zin, in};
    s = run(two, 2, igt_fmt("%s/z", dir), 2, &o, &st, &err);
    if (s != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(st.docs_skipped, 4); /* the file, and bad.jsonl's three */
    assert_non_null(strstr(st.reported[0], "trunc.jsonl.zst: corrupt or truncated zstd data"));
    assert_non_null(strstr(st.reported[0], "(the rest of this file is skipped)"));
    assert_non_null(strstr(st.reported[1], "bad.jsonl:3"));
    ig_preprocess_stats_clear(&st);
    assert_int_equal(ig_shard_verify(g_ctx, igt_fmt("%s/z", dir), &err), IG_OK);
    igt_rmtree(dir);
    free(dir);
}

/* No overwrite without --force; --force replaces; an incomplete earlier output (data without a
 * manifest, as a killed run leaves it) is replaced without --force. */
static void test_existing_outputs(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *in = igt_fmt("%s/in.jsonl", dir);
    const char *one = "{\"text\": \"one\"}\n";
    igt_write(in, one, strlen(one));
    const char *out = igt_fmt("%s/o", dir);
    ig_err err = {0};
    assert_int_equal(run(&in, 1, out, 1, NULL, NULL, &err), IG_OK);
    size_t before_len;
    char *before = igt_read(igt_fmt("%s.bin", out), &before_len);
    const char *two = "{\"text\": \"two words\"}\n";
    igt_write(in, two, strlen(two));
    assert_int_equal(run(&in, 1, out, 1, NULL, NULL, &err), IG_ERR_EXISTS);
    assert_string_equal(err.fix_option, "overwrite");
    size_t same_len;
    char *same = igt_read(igt_fmt("%s.bin", out), &same_len);
    assert_int_equal(before_len, same_len);
    free(same);
    free(before);
    ig_preprocess_opts o = ig_preprocess_opts_default();
    o.overwrite = 1;
    if (run(&in, 1, out, 1, &o, NULL, &err) != IG_OK) fail_msg("--force: %s", err.msg);
    assert_int_equal(ig_shard_verify(g_ctx, out, &err), IG_OK);

    /* shards nobody can vouch for (no manifest, no run marker: e.g. Megatron's) are never
     * deleted without --force */
    char *f = strdup(igt_fmt("%s/foreign", dir));
    igt_write(igt_fmt("%s.bin", f), "data", 4);
    igt_write(igt_fmt("%s.idx", f), "index", 5);
    assert_int_equal(run(&in, 1, f, 1, NULL, NULL, &err), IG_ERR_EXISTS);
    assert_string_equal(err.fix_option, "overwrite");
    assert_true(ig_file_exists(igt_fmt("%s.bin", f)) && ig_file_exists(igt_fmt("%s.idx", f)));
    assert_false(ig_run_marker_exists(f));

    /* what a killed run leaves: its run marker, a shard with its manifest, data of another, a
     * temporary of a dead process. Its shards are refused; a rerun removes it all. */
    char *k = strdup(igt_fmt("%s/killed", dir));
    char *k0 = strdup(igt_fmt("%s_00000", k));
    o = ig_preprocess_opts_default();
    o.shard_size = 1;
    if (run(&in, 1, k, 1, &o, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_shard_verify(g_ctx, k0, &err), IG_OK);
    assert_int_equal(ig_run_marker_create(k, &err), IG_OK); /* as if killed before the end */
    igt_write(igt_fmt("%s_00003.idx", k), "junk", 4);
    igt_write(igt_fmt("%s.bin.tmp.999999999.0", k), "junk", 4);
    assert_int_equal(ig_shard_verify(g_ctx, k0, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "unfinished"));
    size_t checked = 0;
    assert_int_equal(ig_shard_list_verify(g_ctx, k, &checked, &err), IG_ERR_FORMAT);
    ig_dataset *ds = NULL;
    assert_int_equal(ig_dataset_open(&ds, g_ctx, (const char *const *)&k, 1, &err), IG_ERR_FORMAT);
    assert_int_equal(run(&in, 1, k, 1, NULL, NULL, &err), IG_OK); /* no --force needed */
    assert_int_equal(ig_shard_verify(g_ctx, k, &err), IG_OK);
    assert_false(ig_run_marker_exists(k));
    assert_false(ig_file_exists(igt_fmt("%s_00003.idx", k)));
    assert_false(ig_file_exists(igt_fmt("%s.json", k0)));
    assert_false(ig_file_exists(igt_fmt("%s.shards.json", k)));
    assert_false(ig_file_exists(igt_fmt("%s.bin.tmp.999999999.0", k)));

    /* a marker whose process is alive on this host is a run still going: left alone */
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    assert_true(child > 0);
    char host[256];
    assert_int_equal(gethostname(host, sizeof host), 0);
    char marker[512];
    int ml = snprintf(marker, sizeof marker,
                      "{\"format\": \"ingot-run-marker\", \"host\": \"%s\", \"pid\": %ld}", host,
                      (long)child);
    /* a marker naming two pids (duplicate keys, refused as in every JSON file) names none */
    char twice[600];
    int tl = snprintf(twice, sizeof twice, "{\"pid\": 0, %s", marker + 1);
    igt_write(igt_fmt("%s.incomplete", k), twice, (size_t)tl);
    assert_int_equal(ig_run_marker_live(k), 0);
    igt_write(igt_fmt("%s.incomplete", k), marker, (size_t)ml);
    assert_int_equal(ig_run_marker_live(k), (long)child);
    assert_int_equal(run(&in, 1, k, 1, NULL, NULL, &err), IG_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "right now"));
    assert_true(ig_file_exists(igt_fmt("%s.bin", k))); /* its files are untouched */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    assert_int_equal(ig_run_marker_live(k), 0); /* now it is a killed run's: cleaned up */
    assert_int_equal(run(&in, 1, k, 1, NULL, NULL, &err), IG_OK);
    assert_int_equal(ig_shard_verify(g_ctx, k, &err), IG_OK);

    /* a run holding the marker (as the first of two runs started at the same moment does) keeps
     * every other run out, before it touches anything: even one of this process, and even before
     * the holder has written a file; a marker let go without removing it is a killed run's */
    char *h = strdup(igt_fmt("%s/held", dir));
    ig_run_marker *held = NULL, *second = NULL;
    int had_old = -1;
    assert_int_equal(ig_run_marker_acquire(&held, h, &had_old, &err), IG_OK);
    assert_int_equal(had_old, 0);
    assert_int_equal(ig_run_marker_acquire(&second, h, &had_old, &err), IG_ERR_EXISTS);
    assert_null(second);
    assert_int_equal(ig_run_marker_live(h), (long)getpid());
    igt_write(igt_fmt("%s.bin", h), "winner", 6); /* the holder's data, not yet committed */
    assert_int_equal(run(&in, 1, h, 1, NULL, NULL, &err), IG_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "right now"));
    o = ig_preprocess_opts_default();
    o.overwrite = 1; /* --force does not get past a run still going either */
    assert_int_equal(run(&in, 1, h, 1, &o, NULL, &err), IG_ERR_EXISTS);
    assert_true(ig_file_exists(igt_fmt("%s.bin", h)));
    assert_true(ig_run_marker_exists(h));
    assert_int_equal(ig_run_marker_release(held, 0, &err), IG_OK); /* as if killed */
    assert_int_equal(ig_run_marker_live(h), 0);
    assert_int_equal(run(&in, 1, h, 1, NULL, NULL, &err), IG_OK);
    assert_int_equal(ig_shard_verify(g_ctx, h, &err), IG_OK);
    assert_false(ig_run_marker_exists(h));
    free(h);

    /* glob characters in the prefix are literal: nothing else is matched, let alone removed */
    char *g = strdup(igt_fmt("%s/out[1]", dir));
    igt_write(igt_fmt("%s/out1.bin", dir), "precious", 8);
    igt_write(igt_fmt("%s/out1.json", dir), "precious", 8);
    assert_int_equal(run(&in, 1, g, 1, NULL, NULL, &err), IG_OK);
    assert_int_equal(run(&in, 1, g, 1, NULL, NULL, &err), IG_ERR_EXISTS);
    assert_true(ig_file_exists(igt_fmt("%s/out1.bin", dir)));
    assert_true(ig_file_exists(igt_fmt("%s/out1.json", dir)));
    assert_int_equal(ig_shard_verify(g_ctx, g, &err), IG_OK);
    free(g);
    free(k0);
    free(k);
    free(f);
    igt_rmtree(dir);
    free(dir);
}

/* .txt inputs: whole files or lines; a directory expands to its files in sorted order. */
static void test_txt_inputs(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    char *sub = strdup(igt_fmt("%s/in", dir));
    assert_int_equal(mkdir(sub, 0755), 0);
    igt_write(igt_fmt("%s/b.txt", sub), "second file\nline two\n", 21);
    igt_write(igt_fmt("%s/a.txt", sub), "first file", 10);
    ig_err err = {0};
    const char *inputs[] = {sub};
    ig_preprocess_stats st = {0};
    if (run(inputs, 1, igt_fmt("%s/docs", dir), 2, NULL, &st, &err) != IG_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(st.files, 2);
    assert_int_equal(st.docs_written, 2);
    ig_preprocess_stats_clear(&st);
    ig_preprocess_opts o = ig_preprocess_opts_default();
    o.txt_lines = 1;
    if (run(inputs, 1, igt_fmt("%s/lines", dir), 2, &o, &st, &err) != IG_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(st.docs_written, 3);
    ig_preprocess_stats_clear(&st);
    /* the first document of "docs" is a.txt: "first file" */
    ig_shard *sh = NULL;
    assert_int_equal(ig_shard_open(&sh, g_ctx, igt_fmt("%s/docs", dir), &err), IG_OK);
    int32_t ids[8];
    int32_t n = ig_shard_seq_length(sh, 0);
    assert_true(n > 0 && n <= 8);
    assert_int_equal(ig_shard_read_tokens(sh, 0, 0, (uint64_t)n, ids, &err), IG_OK);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    assert_int_equal(ig_tokenizer_decode(g_gpt2, ids, (size_t)n - 1, &buf, &len, &cap, &err),
                     IG_OK);
    assert_int_equal(len, 10);
    assert_memory_equal(buf, "first file", 10);
    free(buf);
    ig_shard_close(sh);
    free(sub);
    igt_rmtree(dir);
    free(dir);
}

/* Every allocation of a small run failing in turn (the k-th alone, for every k up to the number a
 * run makes): the run either succeeds with the same output as without failures, or fails with
 * IG_ERR_NOMEM leaving nothing in the output directory; nothing leaks (ASan). Two keys, two
 * shards each, a .zst input, dedup and a skipped bad record exercise most of the paths; with 1
 * thread (reading, tokenizing and writing on the caller) and with 3. */
static void test_allocation_failures(void **state) {
    (void)state;
    char *dir = igt_mkdtemp(), *out_dir = strdup(igt_fmt("%s/out", dir));
    assert_int_equal(mkdir(out_dir, 0755), 0);
    char text[2][8192];
    size_t len[2] = {0, 0};
    for (int f = 0; f < 2; f++)
        for (int d = 0; d < 60; d++)
            len[f] += (size_t)snprintf(
                text[f] + len[f], sizeof text[f] - len[f],
                d == 17 ? "{\"text\": broken %d}\n"
                        : "{\"text\": \"document %d says hello\", \"title\": \"t%d\"}\n",
                d % 45 + 100 * f, d % 7);
    char *in_a = strdup(igt_fmt("%s/a.jsonl", dir)), *in_b = strdup(igt_fmt("%s/b.jsonl.zst", dir));
    igt_write(in_a, text[0], len[0]);
    size_t bound = ZSTD_compressBound(len[1]);
    char *z = malloc(bound);
    size_t zn = ZSTD_compress(z, bound, text[1], len[1], 3);
    assert_false(ZSTD_isError(zn));
    igt_write(in_b, z, zn);
    free(z);
    const char *inputs[] = {in_a, in_b};
    static const char *const keys[] = {"text", "title"};

    igt_flaky fl;
    /* one thread; three threads; three threads reading two ranges of a.jsonl (700 bytes) at once */
    const int cfg_threads[] = {1, 3, 3}, cfg_readers[] = {0, 0, 2};
    for (int cfg = 0; cfg < 3; cfg++) {
        int threads = cfg_threads[cfg];
        ig_ctx *ctx = igt_flaky_ctx(&fl, threads);
        ig_tokenizer *tok = NULL;
        ig_err err = {0};
        if (ig_tokenizer_load(&tok, ctx, igt_fmt("%s/data/gpt2", igt_source_dir()), NULL, &err) !=
            IG_OK)
            fail_msg("%s", err.msg);
        ig_preprocess_opts o = ig_preprocess_opts_default();
        o.inputs = inputs;
        o.n_inputs = 2;
        o.tokenizer = tok;
        o.json_keys = keys;
        o.n_keys = 2;
        o.threads = threads;
        o.readers = cfg_readers[cfg];
        o.split_size = cfg_readers[cfg] > 1 ? 700 : 0;
        o.shard_size = 400;
        o.dedup_exact = 1;
        o.on_error = IG_ON_ERROR_SKIP;
        o.append_eod = 1;
        /* the reference, and how many allocations it takes */
        char *ref = strdup(igt_fmt("%s/ref%d", dir, cfg));
        o.output_prefix = ref;
        igt_flaky_arm(&fl, 0);
        ig_preprocess_stats st = {0};
        if (ig_preprocess_text(ctx, &o, &st, &err) != IG_OK) fail_msg("%s", err.msg);
        long calls = atomic_load(&fl.calls);
        assert_true(calls > 40);
        assert_true(st.shards >= 4);
        assert_int_equal(st.docs_skipped, 2);
        ig_preprocess_stats ref_st = st;
        char *out = strdup(igt_fmt("%s/o", out_dir));
        o.output_prefix = out;
        int nomem = 0, ok = 0;
        /* threads make the count vary a little from run to run: a margin past it */
        for (long k = 1; k <= calls + (threads > 1 ? 20 : 0); k++) {
            igt_flaky_arm(&fl, k);
            ig_status s = ig_preprocess_text(ctx, &o, &st, &err);
            ig_preprocess_stats_clear(&st);
            if (s != IG_OK) {
                if (s != IG_ERR_NOMEM) fail_msg("allocation %ld: %s", k, err.msg);
                assert_int_equal(atomic_load(&fl.failed), 1);
                if (igt_count_entries(out_dir) != 0)
                    fail_msg("allocation %ld failed: files left in the output directory", k);
                nomem++;
                continue;
            }
            ok++;
            /* a failure the run could absorb (a shrink of a buffer) changes nothing */
            for (size_t i = 0; i < ref_st.n_shard_prefixes; i++)
                for (int e = 0; e < 2; e++) {
                    const char *ext = e ? ".idx" : ".bin";
                    const char *name = ref_st.shard_prefixes[i] + strlen(ref);
                    assert_same_file(igt_fmt("%s%s%s", ref, name, ext),
                                     igt_fmt("%s%s%s", out, name, ext));
                }
            igt_rmtree(out_dir);
            assert_int_equal(mkdir(out_dir, 0755), 0);
        }
        assert_true(nomem >= calls / 2);
        print_message("threads %d, readers %d: %ld allocations, %d runs failed cleanly, %d "
                      "succeeded\n",
                      threads, cfg_readers[cfg], calls, nomem, ok);
        ig_preprocess_stats_clear(&ref_st);
        ig_tokenizer_free(tok);
        ig_ctx_free(ctx);
        free(out);
        free(ref);
    }
    free(in_a);
    free(in_b);
    free(out_dir);
    igt_rmtree(dir);
    free(dir);
}

/* A ~300 KB .jsonl of lines of many lengths with multi-byte UTF-8 (so that ranges of a few KB
 * split inside lines and inside characters), CRLF ends, blank lines and repeated documents; with
 * bad, a malformed record and one with invalid UTF-8 near its end. */
static void write_big_jsonl(const char *path, int bad) {
    size_t cap = 1u << 20, n = 0;
    char *t = malloc(cap);
    assert_non_null(t);
    for (int i = 0; i < 2600; i++) {
        int d = i % 50 == 49 ? i - 10 : i; /* a repeat, for dedup */
        if (bad && i == 2300)
            n += (size_t)snprintf(t + n, cap - n, "{\"text\": broken %d}\n", i);
        else if (bad && i == 2450)
            n += (size_t)snprintf(t + n, cap - n, "{\"text\": \"bad \xff byte\"}\n");
        else {
            n += (size_t)snprintf(t + n, cap - n, "{\"text\": \"doc %d caf\xC3\xA9 \xE2\x82\xAC%d ",
                                  d, d % 9);
            for (int k = 0; k < (d * 37) % 160; k++)
                n += (size_t)snprintf(t + n, cap - n, "%s", k % 11 == 3 ? "\xF0\x9F\x98\x80" : "w");
            n += (size_t)snprintf(t + n, cap - n, "\"}%s", i % 7 == 0 ? "\r\n" : "\n");
        }
        if (i % 13 == 0) n += (size_t)snprintf(t + n, cap - n, "\n");
    }
    assert_true(n < cap - 64);
    igt_write(path, t, n);
    free(t);
}

static void write_zst(const char *path, const char *text, size_t len, size_t cut) {
    size_t bound = ZSTD_compressBound(len);
    char *z = malloc(bound);
    size_t zn = ZSTD_compress(z, bound, text, len, 3);
    assert_false(ZSTD_isError(zn));
    igt_write(path, z, zn - cut);
    free(z);
}

static void assert_same_stats(const ig_preprocess_stats *a, const ig_preprocess_stats *b,
                              const char *what) {
    if (a->docs_read != b->docs_read || a->docs_written != b->docs_written ||
        a->docs_skipped != b->docs_skipped || a->docs_duplicate != b->docs_duplicate ||
        a->tokens != b->tokens || a->bytes_in != b->bytes_in || a->text_bytes != b->text_bytes ||
        a->shards != b->shards || a->n_reported != b->n_reported)
        fail_msg("%s: stats differ: read %llu/%llu, written %llu/%llu, skipped %llu/%llu, tokens "
                 "%llu/%llu, bytes in %llu/%llu, shards %llu/%llu",
                 what, (unsigned long long)a->docs_read, (unsigned long long)b->docs_read,
                 (unsigned long long)a->docs_written, (unsigned long long)b->docs_written,
                 (unsigned long long)a->docs_skipped, (unsigned long long)b->docs_skipped,
                 (unsigned long long)a->tokens, (unsigned long long)b->tokens,
                 (unsigned long long)a->bytes_in, (unsigned long long)b->bytes_in,
                 (unsigned long long)a->shards, (unsigned long long)b->shards);
    for (size_t i = 0; i < a->n_reported; i++)
        if (strcmp(a->reported[i], b->reported[i]) != 0)
            fail_msg("%s: report %zu: '%s', not '%s'", what, i, b->reported[i], a->reported[i]);
}

/* Several readers, over several files of each kind and one large .jsonl read as byte ranges of
 * a few KB: the same shards, stats and messages as one thread, for 2, 3 and 5 threads and 1, 2
 * and 3 readers; with bad records in later ranges, the same error (file, line) without skip and
 * the same reports with it, a truncated .zst included. */
static void test_readers_and_ranges(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    char *big = strdup(igt_fmt("%s/big.jsonl", dir)), *bad = strdup(igt_fmt("%s/bad.jsonl", dir));
    char *zst = strdup(igt_fmt("%s/small.jsonl.zst", dir));
    char *cut = strdup(igt_fmt("%s/cut.jsonl.zst", dir));
    char *txt = strdup(igt_fmt("%s/doc.txt", dir)), *small = strdup(igt_fmt("%s/small.jsonl", dir));
    write_big_jsonl(big, 0);
    write_big_jsonl(bad, 1);
    char text[16384];
    size_t len = 0;
    for (int d = 0; d < 150; d++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "{\"text\": \"small %d \xC3\xBC\xC3\xB1\xC3\xAF\"}\n", d % 120);
    write_zst(zst, text, len, 0);
    write_zst(cut, text, len, 7);
    size_t small_len = 2000;
    while (text[small_len - 1] != '\n') small_len--; /* whole lines */
    igt_write(small, text, small_len);
    const char *doc = "A text file is one document,\nwith its lines.\r\n\n\xE2\x9C\x93 done\n";
    igt_write(txt, doc, strlen(doc));

    struct {
        const char *inputs[6];
        size_t n;
        int skip, lines;
    } cases[] = {
        {{small, big, zst, txt, big, zst}, 6, 0, 0}, /* a file twice: dedup drops its copy */
        {{txt, big}, 2, 0, 1},                       /* .txt by lines, and no dedup hits */
        {{zst, bad, small}, 3, 0, 0},                /* fails at bad.jsonl's first bad line */
        {{zst, bad, cut, big}, 4, 1, 0},             /* reports both bad lines and the cut .zst */
    };
    const int threads[] = {2, 3, 5}, readers[] = {1, 2, 3};
    const uint64_t splits[] = {4096, 1000 + 7};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ig_preprocess_opts o = ig_preprocess_opts_default();
        o.append_eod = 1;
        o.dedup_exact = 1;
        o.shard_size = 40000;
        o.txt_lines = cases[c].lines;
        o.on_error = cases[c].skip ? IG_ON_ERROR_SKIP : IG_ON_ERROR_FAIL;
        ig_preprocess_stats ref = {0};
        ig_err ref_err = {0};
        const char *ref_out = igt_fmt("%s/ref%zu", dir, c);
        char *ref_prefix = strdup(ref_out);
        ig_status ref_s = run(cases[c].inputs, cases[c].n, ref_prefix, 1, &o, &ref, &ref_err);
        if (c == 2) {
            assert_int_equal(ref_s, IG_ERR_FORMAT);
            assert_non_null(strstr(ref_err.msg, "bad.jsonl:"));
        } else if (ref_s != IG_OK) {
            fail_msg("case %zu: %s", c, ref_err.msg);
        }
        if (c == 3) assert_int_equal(ref.docs_skipped, 3);
        size_t runs = 0;
        for (size_t ti = 0; ti < 3; ti++)
            for (size_t ri = 0; ri < 3; ri++)
                for (size_t si = 0; si < 2; si++) {
                    if (readers[ri] == 1 && si == 1) continue; /* one reader does not split */
                    o.readers = readers[ri];
                    o.split_size = splits[si];
                    ig_preprocess_stats st = {0};
                    ig_err err = {0};
                    const char *what =
                        igt_fmt("case %zu, %d threads, %d readers, split %llu", c, threads[ti],
                                readers[ri], (unsigned long long)splits[si]);
                    char *w = strdup(what);
                    char *out = strdup(igt_fmt("%s/o%zu_%zu_%zu_%zu", dir, c, ti, ri, si));
                    ig_status s = run(cases[c].inputs, cases[c].n, out, threads[ti], &o, &st, &err);
                    if (s != ref_s) fail_msg("%s: status %d, not %d (%s)", w, s, ref_s, err.msg);
                    if (s != IG_OK) {
                        if (strcmp(err.msg, ref_err.msg) != 0)
                            fail_msg("%s: '%s', not '%s'", w, err.msg, ref_err.msg);
                    } else {
                        assert_same_stats(&ref, &st, w);
                        for (size_t i = 0; i < ref.n_shard_prefixes; i++)
                            for (int e = 0; e < 2; e++) {
                                const char *ext = e ? ".idx" : ".bin";
                                const char *name = ref.shard_prefixes[i] + strlen(ref_prefix);
                                assert_same_file(igt_fmt("%s%s%s", ref_prefix, name, ext),
                                                 igt_fmt("%s%s%s", out, name, ext));
                            }
                    }
                    ig_preprocess_stats_clear(&st);
                    free(out);
                    free(w);
                    runs++;
                }
        assert_int_equal(runs, 15);
        ig_preprocess_stats_clear(&ref);
        free(ref_prefix);
    }
    free(big);
    free(bad);
    free(zst);
    free(cut);
    free(txt);
    free(small);
    igt_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_against_reference),
        cmocka_unit_test(test_exact_cl100k),
        cmocka_unit_test(test_deterministic_across_workers),
        cmocka_unit_test(test_shard_size),
        cmocka_unit_test(test_dedup_and_keys),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_existing_outputs),
        cmocka_unit_test(test_txt_inputs),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_readers_and_ranges),
    };
    return cmocka_run_group_tests_name("pipeline", tests, setup, teardown);
}
