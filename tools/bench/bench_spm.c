/* bench_spm.c - SentencePiece encoding throughput: ingot against SentencePiece's own spm_encode on
 * the same text, the same model and the same number of threads, measured in the same run
 * (DESIGN section 7: a figure is a ratio against a peer).
 *
 * usage: bench_spm [--data SHARED_DATA_DIR] [--model M.model]... [--threads N]... [--seconds S]
 *                  [--spm-encode PATH]
 *
 * The text is the five shared corpora (the .txt files of SHARED_DATA_DIR/text; default
 * $IG_SHARED_DATA, else ../shared/data beside the checkout; without them tests/data/spm/sample.txt
 * repeated to 4 MB), encoded line by line as spm_encode reads it. Models: by default the T5-like
 * 32000-piece unigram, the 8000-piece nmt_nfkc unigram and the BPE model of tests/data/spm/.
 * Threads: by default 1 and 2.
 *
 * ingot: N threads, each with its own encoder, over a share of the lines (blocks of 64 kB of lines
 * dealt out in turn, so that each thread gets some of every corpus); each line encoded and its ids
 * printed as text into a buffer (the work spm_encode --output_format=id does), repeated for about
 * S seconds (default 2), the best pass counted. spm_encode: N processes at once, each on the same
 * share of the lines (a file), ids to /dev/null, the best of 3 runs; its start-up (the model
 * load, timed on an empty input) is subtracted. Without spm_encode on PATH (Debian: apt-get
 * install sentencepiece) the peer is skipped with a message. Output: a line per model and
 * thread count, and `spm_bench model=... threads=N ingot_mbps=X spm_mbps=Y ratio=R` for run.sh.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preprocess/preprocess.h"

typedef struct line {
    const char *s;
    size_t n;
} line;

typedef struct job {
    const ig_tokenizer *tok;
    const line *lines;
    size_t n_lines;
    size_t ids; /* out: ids of the last pass */
    int failed;
} job;

static void *encode_share(void *arg) {
    job *j = arg;
    ig_encoder *enc = NULL;
    ig_err err = {0};
    if (ig_encoder_create(&enc, j->tok, &err) != IG_OK) {
        j->failed = 1;
        return NULL;
    }
    ig_tokens out = {0};
    size_t cap = 1 << 20, used = 0, ids = 0;
    char *text = malloc(cap);
    for (size_t i = 0; i < j->n_lines && text; i++) {
        out.n = 0;
        if (ig_encoder_encode(enc, j->lines[i].s, j->lines[i].n, 0, &out, &err) != IG_OK) {
            j->failed = 1;
            break;
        }
        ids += out.n;
        /* the ids as text, as spm_encode prints them (the buffer is reused: never written out) */
        if (cap - used < 12 * out.n + 2) used = 0;
        if (cap - used < 12 * out.n + 2) continue;
        for (size_t k = 0; k < out.n; k++) {
            char tmp[12];
            int v = out.ids[k], l = 0;
            do tmp[l++] = (char)('0' + v % 10), v /= 10;
            while (v);
            if (k) text[used++] = ' ';
            while (l) text[used++] = tmp[--l];
        }
        text[used++] = '\n';
    }
    j->ids = ids;
    free(text);
    ig_tokens_free(&out);
    ig_encoder_free(enc);
    return NULL;
}

/* The lines of each of n threads: blocks of about 64 kB of lines dealt out in turn (so every
 * thread gets some of every corpus), the same shares for ingot and for spm_encode. */
typedef struct shares {
    line *lines[64];
    size_t n[64];
} shares;

static void make_shares(shares *sh, const line *lines, size_t n_lines, int threads) {
    for (int k = 0; k < threads; k++) {
        sh->lines[k] = malloc((n_lines + 1) * sizeof(line));
        sh->n[k] = 0;
    }
    size_t block = 0, bytes = 0;
    for (size_t i = 0; i < n_lines; i++) {
        int k = (int)(block % (size_t)threads);
        sh->lines[k][sh->n[k]++] = lines[i];
        if ((bytes += lines[i].n + 1) >= 65536) bytes = 0, block++;
    }
}

static void free_shares(shares *sh, int threads) {
    for (int k = 0; k < threads; k++) free(sh->lines[k]);
}

/* One pass of every line over n threads; its seconds. */
static double ingot_pass(const ig_tokenizer *tok, const shares *sh, int threads, size_t *ids) {
    job jobs[64];
    pthread_t th[64];
    double t0 = ig_now();
    for (int k = 0; k < threads; k++) {
        jobs[k] = (job){tok, sh->lines[k], sh->n[k], 0, 0};
        pthread_create(&th[k], NULL, encode_share, &jobs[k]);
    }
    *ids = 0;
    for (int k = 0; k < threads; k++) {
        pthread_join(th[k], NULL);
        *ids += jobs[k].ids;
        if (jobs[k].failed) return -1;
    }
    return ig_now() - t0;
}

/* Runs n spm_encode processes at once, process k on files[k]; the wall seconds, or -1. */
static double spm_run(const char *spm, const char *model, char **files, int n) {
    pid_t pids[64];
    fflush(stdout); /* or the children's freopen writes the buffered lines again */
    fflush(stderr);
    double t0 = ig_now();
    for (int k = 0; k < n; k++) {
        pids[k] = fork();
        if (pids[k] == 0) {
            if (!freopen(files[k], "rb", stdin) || !freopen("/dev/null", "wb", stdout)) _exit(127);
            execlp(spm, spm, "--model", model, "--output_format=id", (char *)NULL);
            _exit(127);
        }
        if (pids[k] < 0) return -1;
    }
    int ok = 1;
    for (int k = 0; k < n; k++) {
        int status;
        if (waitpid(pids[k], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            ok = 0;
    }
    return ok ? ig_now() - t0 : -1;
}

static int on_path(const char *prog) {
    if (strchr(prog, '/')) return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path) return 0;
    char *copy = strdup(path), *save = NULL;
    int found = 0;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", d, prog);
        found = access(p, X_OK) == 0;
    }
    free(copy);
    return found;
}

int main(int argc, char **argv) {
    const char *data = getenv("IG_SHARED_DATA"), *spm = "spm_encode";
    const char *models[16];
    int n_models = 0, threads[8], n_threads = 0;
    double seconds = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc && n_models < 16)
            models[n_models++] = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc && n_threads < 8)
            threads[n_threads++] = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--spm-encode") && i + 1 < argc)
            spm = argv[++i];
        else {
            fprintf(stderr, "usage: bench_spm [--data DIR] [--model M.model]... [--threads N]... "
                            "[--seconds S] [--spm-encode PATH]\n");
            return 2;
        }
    }
    if (!n_models) {
        models[n_models++] = IG_SOURCE_DIR "/tests/data/spm/unigram_t5_32k.model";
        models[n_models++] = IG_SOURCE_DIR "/tests/data/spm/unigram_nfkc_8k.model";
        models[n_models++] = IG_SOURCE_DIR "/tests/data/spm/bpe_4k.model";
    }
    if (!n_threads) threads[n_threads++] = 1, threads[n_threads++] = 2;
    for (int k = 0; k < n_threads; k++)
        if (threads[k] < 1 || threads[k] > 64) threads[k] = 1;
    if (!data) data = IG_SOURCE_DIR "/../shared/data";
    /* the text */
    static const char *corpora[] = {"tinyshakespeare", "udhr_multilingual", "c_code", "emoji_test",
                                    "edge_cases"};
    size_t len = 0, cap = 0;
    char *text = NULL;
    const char *what = "the five shared corpora";
    for (int c = 0; c < 5; c++) {
        char path[4096], *buf = NULL;
        size_t n = 0;
        snprintf(path, sizeof path, "%s/text/%s.txt", data, corpora[c]);
        if (ig_read_file(path, &buf, &n, NULL) != IG_OK) {
            len = 0;
            break;
        }
        if (len + n + 1 > cap) text = realloc(text, cap = 2 * (len + n + 1));
        memcpy(text + len, buf, n);
        len += n;
        if (n && buf[n - 1] != '\n') text[len++] = '\n';
        free(buf);
    }
    if (len == 0) {
        char *buf = NULL;
        size_t n = 0;
        if (ig_read_file(IG_SOURCE_DIR "/tests/data/spm/sample.txt", &buf, &n, NULL) != IG_OK ||
            !n) {
            fprintf(stderr, "bench_spm: no text: neither %s/text nor tests/data/spm/sample.txt\n",
                    data);
            return 1;
        }
        what = "tests/data/spm/sample.txt repeated (no shared corpora)";
        free(text);
        cap = (4u << 20) + n;
        text = malloc(cap);
        for (len = 0; len + n <= 4u << 20; len += n) memcpy(text + len, buf, n);
        free(buf);
    }
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    line *lines = malloc((n_lines + 1) * sizeof *lines);
    n_lines = 0;
    for (size_t i = 0; i < len;) {
        char *nl = memchr(text + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - text) : len;
        lines[n_lines++] = (line){text + i, e - i};
        i = e + 1;
    }
    printf("text: %s, %.2f MB in %zu lines, encoded line by line\n", what, len / 1e6, n_lines);
    int have_spm = on_path(spm);
    if (!have_spm)
        printf("spm_encode: skipped: %s is not installed (Debian: apt-get install sentencepiece)\n",
               spm);
    /* per thread count, the lines split into files for spm_encode (the same shares) */
    char dir[] = "/tmp/ig_bench_spm_XXXXXX";
    if (have_spm && !mkdtemp(dir)) have_spm = 0;
    char *files[8][64] = {{0}};
    char empty[4200];
    snprintf(empty, sizeof empty, "%s/empty.txt", dir);
    if (have_spm) {
        FILE *f = fopen(empty, "wb");
        if (f) fclose(f);
        for (int t = 0; t < n_threads; t++) {
            shares sh;
            make_shares(&sh, lines, n_lines, threads[t]);
            for (int k = 0; k < threads[t]; k++) {
                if (asprintf(&files[t][k], "%s/t%d_%d.txt", dir, threads[t], k) < 0) return 1;
                FILE *o = fopen(files[t][k], "wb");
                for (size_t i = 0; o && i < sh.n[k]; i++) {
                    fwrite(sh.lines[k][i].s, 1, sh.lines[k][i].n, o);
                    fputc('\n', o);
                }
                if (o) fclose(o);
            }
            free_shares(&sh, threads[t]);
        }
    }
    int rc = 0;
    for (int m = 0; m < n_models; m++) {
        ig_tokenizer *tok = NULL;
        ig_err err = {0};
        if (ig_tokenizer_load(&tok, NULL, models[m], NULL, &err) != IG_OK) {
            fprintf(stderr, "bench_spm: %s\n", err.msg);
            rc = 1;
            continue;
        }
        const char *base = strrchr(models[m], '/') ? strrchr(models[m], '/') + 1 : models[m];
        double load0 = -1;
        if (have_spm) { /* spm_encode's start-up: the model load, on an empty input */
            char *e[1] = {empty};
            for (int r = 0; r < 3; r++) {
                double s = spm_run(spm, models[m], e, 1);
                if (s >= 0 && (load0 < 0 || s < load0)) load0 = s;
            }
        }
        for (int t = 0; t < n_threads; t++) {
            size_t ids = 0;
            double best = -1, t0 = ig_now();
            shares sh;
            make_shares(&sh, lines, n_lines, threads[t]);
            do {
                double s = ingot_pass(tok, &sh, threads[t], &ids);
                if (s < 0) {
                    fprintf(stderr, "bench_spm: encoding failed\n");
                    return 1;
                }
                if (best < 0 || s < best) best = s;
            } while (ig_now() - t0 < seconds);
            free_shares(&sh, threads[t]);
            double ours = len / best / 1e6, theirs = 0;
            if (have_spm) {
                double sb = -1;
                for (int r = 0; r < 3; r++) {
                    double s = spm_run(spm, models[m], files[t], threads[t]);
                    if (s >= 0 && (sb < 0 || s < sb)) sb = s;
                }
                if (sb > 0) theirs = len / (sb - (load0 > 0 && load0 < sb ? load0 : 0)) / 1e6;
            }
            printf("%-24s %d thread%s: ingot %7.2f MB/s (%zu ids)", base, threads[t],
                   threads[t] > 1 ? "s" : " ", ours, ids);
            if (theirs > 0)
                printf(", spm_encode %6.2f MB/s: %.2fx (goal >= 3x)\n", theirs, ours / theirs);
            else
                printf(", spm_encode: skipped\n");
            printf("spm_bench model=%s threads=%d ingot_mbps=%.2f spm_mbps=%.2f ratio=%.2f\n", base,
                   threads[t], ours, theirs, theirs > 0 ? ours / theirs : 0);
        }
        ig_tokenizer_free(tok);
    }
    if (have_spm) {
        for (int t = 0; t < n_threads; t++)
            for (int k = 0; k < threads[t]; k++) {
                if (files[t][k]) unlink(files[t][k]);
                free(files[t][k]);
            }
        unlink(empty);
        rmdir(dir);
    }
    free(lines);
    free(text);
    return rc;
}
