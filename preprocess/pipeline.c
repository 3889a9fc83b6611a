/* pipeline.c - the text pipeline: inputs -> tokens -> Megatron-compatible shards.
 *
 * Three stages, so that the output is byte-identical for any number of workers:
 *   reader thread   reads records in file order and packs them into numbered batches;
 *   worker threads  parse (JSON, UTF-8) and tokenize whole batches, in any order;
 *   writer (caller) takes batches back in their numbered order, drops duplicates and bad
 *                   records, and appends documents to the shard writers.
 * Batches come from a fixed pool, so memory is bounded by the pool size whatever the input size.
 * Manifests are written only once every shard of the run is complete: a run killed at any
 * moment leaves no shard that `ingot verify` accepts.
 */
#include "preprocess/preprocess.h"

#include <errno.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Small batches keep every worker busy to the end of a run (the last batch is the tail each
 * worker waits on) and the writer close behind the workers; the handoff costs a few lock
 * operations per batch, nothing next to tokenizing 256 KiB. */
#define BATCH_BYTES (1u << 18)
#define BATCH_DOCS  1024
/* Record bytes in flight (read, not yet written) above which the reader waits: with documents of
 * tens of MB, the batch count alone would not bound memory. One batch may always be in flight. */
#define INFLIGHT_BYTES ((uint64_t)32 << 20)
/* A batch buffer that grew past this for a huge record goes back to its usual size. */
#define BATCH_SHRINK_BYTES (4 * (size_t)BATCH_BYTES)
#define TOKENS_SHRINK_IDS  ((size_t)1 << 21)
#define POOL_PER_WORKER    4 /* batches in flight per worker: reading ahead and writing behind */

typedef struct batch {
    uint64_t seq;
    size_t file;
    size_t n, cap;
    char *buf; /* the records' bytes, back to back */
    size_t len, bcap;
    size_t *off, *rlen; /* [cap] */
    uint64_t *line;     /* [cap] */
    /* filled by a worker */
    ig_tokens *toks;  /* [n_keys]: ids of every record, back to back */
    size_t *ntok;     /* [cap * n_keys] */
    ig_hash128 *hash; /* [cap] */
    char **msg;       /* [cap]: why a record is bad, NULL when good */
    uint64_t text_bytes;
    uint64_t bytes_in; /* input bytes consumed while filling this batch */
    uint64_t pushed;   /* bytes counted in pipeline.inflight */
    struct batch *next;
} batch;

typedef struct out_key {
    char *base; /* OUT or OUT_KEY (and _rRRRR) */
    ig_shard_writer *w;
    uint64_t shard_no;
    char **prefixes; /* every shard this run opened, the current one last */
    size_t n_prefixes;
    ig_manifest *pending; /* manifests of the finished shards (pending[i] is prefixes[i]) */
    size_t n_pending;
} out_key;

typedef struct pipeline {
    ig_ctx *ctx;
    const ig_preprocess_opts *o;
    const char *const *keys;
    size_t n_keys;
    char **files; /* this rank's files, in order */
    ig_input_kind *kinds;
    size_t n_files;
    int n_workers;

    pthread_mutex_t mu;
    pthread_cond_t cv_free, cv_todo, cv_done;
    batch *pool;
    size_t pool_n;
    uint64_t inflight; /* bytes of the batches pushed and not yet given back */
    batch *free_list, *todo_head, *todo_tail, *done;
    int reader_done;
    uint64_t n_batches;
    int stop;
    ig_status fail;
    ig_err ferr;
    ig_progress *progress;

    out_key *outs;
    ig_manifest meta; /* tokenizer fields, shared by every shard */
    /* dedup: open addressing over 128-bit hashes, (0,0) marks empty */
    ig_hash128 *seen;
    size_t seen_cap, seen_n;
    ig_preprocess_stats *st;
} pipeline;

ig_preprocess_opts ig_preprocess_opts_default(void) {
    static const char *const default_keys[] = {"text"};
    return (ig_preprocess_opts){.json_keys = default_keys,
                                .n_keys = 1,
                                .append_eod = 1,
                                .on_error = IG_ON_ERROR_FAIL,
                                .world = 1};
}

void ig_preprocess_stats_clear(ig_preprocess_stats *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_shard_prefixes; i++) free(st->shard_prefixes[i]);
    free(st->shard_prefixes);
    memset(st, 0, sizeof *st);
}

/* ---- failure and the queues ---------------------------------------------------------------- */

/* Records the first failure and stops every stage. Call with mu held. */
static void fail_locked(pipeline *p, ig_status status, const ig_err *e) {
    if (p->fail == IG_OK) {
        p->fail = status;
        if (e) p->ferr = *e;
        p->ferr.status = status;
    }
    p->stop = 1;
    pthread_cond_broadcast(&p->cv_free);
    pthread_cond_broadcast(&p->cv_todo);
    pthread_cond_broadcast(&p->cv_done);
}

static void fail(pipeline *p, ig_status status, const ig_err *e) {
    pthread_mutex_lock(&p->mu);
    fail_locked(p, status, e);
    pthread_mutex_unlock(&p->mu);
}

static batch *take_free(pipeline *p) {
    pthread_mutex_lock(&p->mu);
    while (!p->stop && (!p->free_list || p->inflight >= INFLIGHT_BYTES))
        pthread_cond_wait(&p->cv_free, &p->mu);
    batch *b = p->stop ? NULL : p->free_list;
    if (b) p->free_list = b->next;
    pthread_mutex_unlock(&p->mu);
    return b;
}

static void give_free(pipeline *p, batch *b) {
    uint64_t pushed = b->pushed;
    b->pushed = 0;
    if (b->bcap > BATCH_SHRINK_BYTES) {
        char *nb = realloc(b->buf, BATCH_BYTES + (BATCH_BYTES >> 2));
        if (nb) {
            b->buf = nb;
            b->bcap = BATCH_BYTES + (BATCH_BYTES >> 2);
        }
    }
    for (size_t k = 0; k < p->n_keys; k++)
        if (b->toks[k].cap > TOKENS_SHRINK_IDS) ig_tokens_free(&b->toks[k]);
    b->n = b->len = 0;
    b->text_bytes = b->bytes_in = 0;
    for (size_t k = 0; k < p->n_keys; k++) b->toks[k].n = 0;
    for (size_t i = 0; i < b->cap; i++) {
        free(b->msg[i]);
        b->msg[i] = NULL;
    }
    pthread_mutex_lock(&p->mu);
    p->inflight -= pushed;
    b->next = p->free_list;
    p->free_list = b;
    pthread_cond_signal(&p->cv_free);
    pthread_mutex_unlock(&p->mu);
}

static void push_todo(pipeline *p, batch *b) {
    pthread_mutex_lock(&p->mu);
    b->seq = p->n_batches++;
    b->next = NULL;
    b->pushed = b->len;
    p->inflight += b->len;
    if (p->todo_tail)
        p->todo_tail->next = b;
    else
        p->todo_head = b;
    p->todo_tail = b;
    pthread_cond_signal(&p->cv_todo);
    pthread_mutex_unlock(&p->mu);
}

/* ---- batches -------------------------------------------------------------------------------- */

static int batch_init(batch *b, size_t n_keys) {
    b->cap = BATCH_DOCS;
    b->bcap = BATCH_BYTES + (BATCH_BYTES >> 2);
    b->buf = malloc(b->bcap);
    b->off = calloc(b->cap, sizeof *b->off);
    b->rlen = calloc(b->cap, sizeof *b->rlen);
    b->line = calloc(b->cap, sizeof *b->line);
    b->toks = calloc(n_keys, sizeof *b->toks);
    b->ntok = calloc(b->cap * n_keys, sizeof *b->ntok);
    b->hash = calloc(b->cap, sizeof *b->hash);
    b->msg = calloc(b->cap, sizeof *b->msg);
    return b->buf && b->off && b->rlen && b->line && b->toks && b->ntok && b->hash && b->msg;
}

static void batch_free(batch *b, size_t n_keys) {
    free(b->buf);
    free(b->off);
    free(b->rlen);
    free(b->line);
    if (b->toks)
        for (size_t k = 0; k < n_keys; k++) ig_tokens_free(&b->toks[k]);
    free(b->toks);
    free(b->ntok);
    free(b->hash);
    if (b->msg)
        for (size_t i = 0; i < b->cap; i++) free(b->msg[i]);
    free(b->msg);
}

static ig_status batch_append(batch *b, const ig_record *rec, ig_err *err) {
    if (b->len + rec->len > b->bcap) {
        size_t cap = b->bcap;
        while (cap < b->len + rec->len) cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (!nb) return ig_err_set(err, IG_ERR_NOMEM, "out of memory buffering a record");
        b->buf = nb;
        b->bcap = cap;
    }
    memcpy(b->buf + b->len, rec->data, rec->len);
    b->off[b->n] = b->len;
    b->rlen[b->n] = rec->len;
    b->line[b->n] = rec->line;
    b->len += rec->len;
    b->n++;
    return IG_OK;
}

/* ---- reader thread -------------------------------------------------------------------------- */

static void *reader_main(void *arg) {
    pipeline *p = arg;
    ig_err err = {0};
    for (size_t f = 0; f < p->n_files; f++) {
        ig_record_reader *r = NULL;
        ig_status st = ig_record_reader_open(&r, p->files[f], p->kinds[f], &err);
        if (st != IG_OK) {
            fail(p, st, &err);
            break;
        }
        batch *b = take_free(p);
        uint64_t consumed = 0;
        while (b) {
            ig_record rec;
            int has = 0;
            st = ig_record_reader_next(r, &rec, &has, &err);
            if (st != IG_OK) {
                fail(p, st, &err);
                give_free(p, b);
                b = NULL;
                break;
            }
            if (!has) break;
            if (b->n == 0) b->file = f;
            if ((st = batch_append(b, &rec, &err)) != IG_OK) {
                fail(p, st, &err);
                give_free(p, b);
                b = NULL;
                break;
            }
            if (b->n == b->cap || b->len >= BATCH_BYTES) {
                uint64_t now = ig_record_reader_bytes_in(r);
                b->bytes_in = now - consumed;
                consumed = now;
                push_todo(p, b);
                b = take_free(p);
            }
        }
        if (b) {
            uint64_t now = ig_record_reader_bytes_in(r);
            b->bytes_in = now - consumed;
            if (b->n > 0) {
                b->file = f;
                push_todo(p, b);
            } else {
                if (p->progress) ig_progress_add(p->progress, b->bytes_in);
                give_free(p, b);
            }
        }
        ig_record_reader_close(r);
        pthread_mutex_lock(&p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
    }
    pthread_mutex_lock(&p->mu);
    p->reader_done = 1;
    pthread_cond_broadcast(&p->cv_done);
    pthread_cond_broadcast(&p->cv_todo);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- workers -------------------------------------------------------------------------------- */

static ig_hash128 doc_hash(const ig_doc *doc) {
    if (doc->n_texts == 1) return ig_xxh3_128(doc->text[0], doc->len[0]);
    ig_hash128 parts[IG_MAX_JSON_KEYS];
    for (size_t k = 0; k < doc->n_texts; k++) parts[k] = ig_xxh3_128(doc->text[k], doc->len[k]);
    return ig_xxh3_128(parts, doc->n_texts * sizeof parts[0]);
}

static ig_status tokenize_batch(pipeline *p, ig_encoder *enc, batch *b, ig_err *err) {
    const ig_preprocess_opts *o = p->o;
    int32_t eod = ig_tokenizer_eod(o->tokenizer);
    int flags = o->allow_special ? IG_ENCODE_ALLOW_SPECIAL : 0;
    for (size_t i = 0; i < b->n; i++) {
        ig_record rec = {b->buf + b->off[i], b->rlen[i], b->line[i], 0};
        ig_doc doc;
        ig_err perr = {0};
        ig_status st = ig_record_parse(&rec, p->kinds[b->file], p->files[b->file], p->keys,
                                       p->n_keys, &doc, &perr);
        if (st == IG_ERR_FORMAT) {
            b->msg[i] = strdup(perr.msg[0] ? perr.msg : "malformed record");
            if (!b->msg[i]) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            for (size_t k = 0; k < p->n_keys; k++) b->ntok[i * p->n_keys + k] = 0;
            continue;
        }
        if (st != IG_OK) {
            *err = perr;
            return st;
        }
        b->hash[i] = doc_hash(&doc);
        for (size_t k = 0; k < p->n_keys; k++) {
            size_t before = b->toks[k].n;
            st = ig_encoder_encode(enc, doc.text[k], doc.len[k], flags, &b->toks[k], err);
            if (st == IG_OK && o->append_eod && eod >= 0) st = ig_tokens_push(&b->toks[k], eod);
            if (st != IG_OK) {
                ig_doc_release(&doc);
                return st;
            }
            b->ntok[i * p->n_keys + k] = b->toks[k].n - before;
            b->text_bytes += doc.len[k];
        }
        ig_doc_release(&doc);
    }
    return IG_OK;
}

static void *worker_main(void *arg) {
    pipeline *p = arg;
    ig_err err = {0};
    ig_encoder *enc = NULL;
    ig_status st = ig_encoder_create(&enc, p->o->tokenizer, &err);
    if (st != IG_OK) {
        fail(p, st, &err);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && !p->todo_head && !p->reader_done) pthread_cond_wait(&p->cv_todo, &p->mu);
        batch *b = p->stop ? NULL : p->todo_head;
        if (b) {
            p->todo_head = b->next;
            if (!p->todo_head) p->todo_tail = NULL;
        }
        pthread_mutex_unlock(&p->mu);
        if (!b) break;
        st = tokenize_batch(p, enc, b, &err);
        pthread_mutex_lock(&p->mu);
        if (st != IG_OK) {
            fail_locked(p, st, &err);
            b->next = p->free_list; /* freed with the pool */
            p->free_list = b;
        } else {
            b->next = p->done;
            p->done = b;
            pthread_cond_broadcast(&p->cv_done);
        }
        pthread_mutex_unlock(&p->mu);
    }
    ig_encoder_free(enc);
    return NULL;
}

/* ---- writer --------------------------------------------------------------------------------- */

/* 1 if h was new (and is now recorded), 0 if seen before, -1 when out of memory. */
static int seen_insert(pipeline *p, ig_hash128 h) {
    if (h.lo == 0 && h.hi == 0) h.lo = 1;
    if ((p->seen_n + 1) * 2 > p->seen_cap) {
        size_t ncap = p->seen_cap ? p->seen_cap * 2 : 1 << 16;
        ig_hash128 *ns = calloc(ncap, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < p->seen_cap; i++) {
            ig_hash128 e = p->seen[i];
            if (!e.lo && !e.hi) continue;
            size_t j = e.lo & (ncap - 1);
            while (ns[j].lo || ns[j].hi) j = (j + 1) & (ncap - 1);
            ns[j] = e;
        }
        free(p->seen);
        p->seen = ns;
        p->seen_cap = ncap;
    }
    size_t j = h.lo & (p->seen_cap - 1);
    while (p->seen[j].lo || p->seen[j].hi) {
        if (p->seen[j].lo == h.lo && p->seen[j].hi == h.hi) return 0;
        j = (j + 1) & (p->seen_cap - 1);
    }
    p->seen[j] = h;
    p->seen_n++;
    return 1;
}

static char *shard_name(const pipeline *p, const out_key *ok) {
    char *name = NULL;
    int rc = p->o->shard_size
                 ? asprintf(&name, "%s_%05llu", ok->base, (unsigned long long)ok->shard_no)
                 : asprintf(&name, "%s", ok->base);
    return rc < 0 ? NULL : name;
}

static ig_status close_shard(pipeline *p, out_key *ok, ig_err *err) {
    if (!ok->w) return IG_OK;
    ig_manifest *np = realloc(ok->pending, (ok->n_pending + 1) * sizeof *np);
    if (!np) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ok->pending = np;
    memset(&np[ok->n_pending], 0, sizeof *np);
    /* the manifest names the output, whose run marker must be gone for the shard to count */
    const char *slash = strrchr(ok->base, '/');
    snprintf(p->meta.output, sizeof p->meta.output, "%s", slash ? slash + 1 : ok->base);
    snprintf(p->meta.json_key, sizeof p->meta.json_key, "%s", p->keys[ok - p->outs]);
    ig_status st = ig_shard_writer_finish_data(ok->w, &p->meta, &np[ok->n_pending], err);
    ok->w = NULL;
    if (st != IG_OK) return st;
    ok->n_pending++;
    ok->shard_no++;
    return IG_OK;
}

static ig_status open_shard(pipeline *p, out_key *ok, ig_err *err) {
    char *name = shard_name(p, ok);
    if (!name) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    char **np = realloc(ok->prefixes, (ok->n_prefixes + 1) * sizeof *np);
    if (!np) {
        free(name);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    ok->prefixes = np;
    ok->prefixes[ok->n_prefixes++] = name;
    ig_shard_writer_opts wo = ig_shard_writer_opts_default();
    wo.dtype = ig_dtype_for_vocab(ig_tokenizer_vocab_size(p->o->tokenizer));
    wo.overwrite = 0; /* prepare cleared the way: a name that appears now is another writer's */
    return ig_shard_writer_create(&ok->w, p->ctx, name, &wo, err);
}

static ig_status write_doc(pipeline *p, out_key *ok, const int32_t *ids, size_t n, ig_err *err) {
    ig_status st;
    if (ok->w && p->o->shard_size && ig_shard_writer_bin_bytes(ok->w) >= p->o->shard_size)
        if ((st = close_shard(p, ok, err)) != IG_OK) return st;
    if (!ok->w && (st = open_shard(p, ok, err)) != IG_OK) return st;
    if (n == 0) return ig_shard_writer_end_document(ok->w, err);
    return ig_shard_writer_add_document(ok->w, ids, n, err);
}

static ig_status write_batch(pipeline *p, batch *b, size_t *tok_pos, ig_err *err) {
    ig_preprocess_stats *st = p->st;
    for (size_t k = 0; k < p->n_keys; k++) tok_pos[k] = 0;
    for (size_t i = 0; i < b->n; i++) {
        st->docs_read++;
        int keep = 1;
        if (b->msg[i]) {
            if (p->o->on_error == IG_ON_ERROR_FAIL)
                return ig_err_set(err, IG_ERR_FORMAT, "%s%s", b->msg[i],
                                  strstr(b->msg[i], "--on-error skip")
                                      ? ""
                                      : " (use --on-error skip to skip bad documents)");
            if (st->n_reported < IG_PREPROCESS_MAX_REPORTED)
                snprintf(st->reported[st->n_reported++], sizeof st->reported[0], "%s", b->msg[i]);
            st->docs_skipped++;
            keep = 0;
        } else if (p->o->dedup_exact) {
            int fresh = seen_insert(p, b->hash[i]);
            if (fresh < 0) return ig_err_set(err, IG_ERR_NOMEM, "out of memory (dedup set)");
            if (!fresh) {
                st->docs_duplicate++;
                keep = 0;
            }
        }
        for (size_t k = 0; k < p->n_keys; k++) {
            size_t n = b->ntok[i * p->n_keys + k];
            if (keep) {
                ig_status s = write_doc(p, &p->outs[k], b->toks[k].ids + tok_pos[k], n, err);
                if (s != IG_OK) return s;
                st->tokens += n;
            }
            tok_pos[k] += n;
        }
        if (keep) st->docs_written++;
    }
    st->text_bytes += b->text_bytes;
    st->bytes_in += b->bytes_in;
    return IG_OK;
}

static ig_status run_writer(pipeline *p, ig_err *err) {
    size_t tok_pos[IG_MAX_JSON_KEYS];
    uint64_t next = 0;
    double t0 = ig_now(), last = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        batch *b = NULL;
        for (;;) {
            if (p->stop) break;
            batch **pp = &p->done;
            while (*pp && (*pp)->seq != next) pp = &(*pp)->next;
            if (*pp) {
                b = *pp;
                *pp = b->next;
                break;
            }
            if (p->reader_done && next == p->n_batches) break;
            pthread_cond_wait(&p->cv_done, &p->mu);
        }
        pthread_mutex_unlock(&p->mu);
        if (!b) break;
        ig_status st = write_batch(p, b, tok_pos, err);
        if (p->progress) {
            ig_progress_add(p->progress, b->bytes_in);
            double now = ig_now();
            if (now - last > 0.5) {
                char extra[128];
                snprintf(extra, sizeof extra, "%llu docs, %.2f Mtok/s",
                         (unsigned long long)p->st->docs_read,
                         (double)p->st->tokens / 1e6 / (now - t0 > 1e-9 ? now - t0 : 1e-9));
                ig_progress_set_extra(p->progress, extra);
                last = now;
            }
        }
        give_free(p, b);
        if (st != IG_OK) return st;
        next++;
    }
    if (p->progress) {
        char extra[128];
        double dt = ig_now() - t0;
        snprintf(extra, sizeof extra, "%llu docs, %.2f Mtok/s",
                 (unsigned long long)p->st->docs_read,
                 (double)p->st->tokens / 1e6 / (dt > 1e-9 ? dt : 1e-9));
        ig_progress_set_extra(p->progress, extra);
    }
    pthread_mutex_lock(&p->mu);
    ig_status st = p->fail;
    if (st != IG_OK) *err = p->ferr;
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* ---- outputs of earlier runs ---------------------------------------------------------------- */

/* The stem of key k's files: OUT, or OUT_KEY when there are several keys. */
static void output_stem(const char *out, const char *const *keys, size_t n_keys, size_t k,
                        char *buf, size_t cap) {
    if (n_keys > 1)
        snprintf(buf, cap, "%s_%s", out, keys[k]);
    else
        snprintf(buf, cap, "%s", out);
}

/* What a file in the output's directory is to output stem S: S[_rRRRR][_NNNNN] followed by a
 * manifest
 * (.json, .shards.json) or data (.bin, .idx) extension, or a temporary of one of those, of the
 * run marker or of the writer's length spill (... .tmp.*). Matched literally: a prefix may hold
 * glob characters. */
enum { OUT_MANIFEST = 1, OUT_DATA = 2, OUT_TEMP = 4 };

static int output_kind(const char *name, const char *stem) {
    size_t sl = strlen(stem);
    if (strncmp(name, stem, sl) != 0) return 0;
    const char *rest = name + sl;
    if (rest[0] == '_' && rest[1] == 'r' && strspn(rest + 2, "0123456789") == 4) rest += 6;
    if (rest[0] == '_' && strspn(rest + 1, "0123456789") == 5) rest += 6;
    static const struct {
        const char *ext;
        int kind;
    } exts[] = {{".shards.json", OUT_MANIFEST},
                {".json", OUT_MANIFEST},
                {".bin", OUT_DATA},
                {".idx", OUT_DATA},
                {".incomplete", 0},
                {".spill", 0}}; /* the shard writer's length spill (unlinked once open) */
    for (size_t e = 0; e < sizeof exts / sizeof exts[0]; e++) {
        size_t el = strlen(exts[e].ext);
        if (strncmp(rest, exts[e].ext, el) != 0) continue;
        if (rest[el] == '\0') return exts[e].kind;
        if (strncmp(rest + el, ".tmp.", 5) == 0) return OUT_TEMP;
    }
    return 0;
}

typedef struct scan {
    ig_ctx *ctx;
    int n;            /* matches seen */
    char first[1024]; /* the first of them */
} scan;

static void note_match(const char *path, void *arg) {
    scan *s = arg;
    if (s->n++ == 0) snprintf(s->first, sizeof s->first, "%s", path);
}

static void remove_file(const char *path, void *arg) {
    scan *s = arg;
    /* temporaries carry the writer's pid: leave those of a live process alone */
    const char *t = strstr(path, ".tmp.");
    if (t) {
        /* "...tmp.PID.N" (an atomic writer's); other temporaries (mkstemp's) name no process */
        char *end = NULL;
        long pid = strtol(t + 5, &end, 10);
        int named = end != t + 5 && *end == '.';
        if (named && pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) return;
    }
    if (unlink(path) == 0) ig_debug(s->ctx, "removed %s", path);
}

/* Calls fn on every file of output base whose kind is in kinds. */
static void for_each_output(const char *base, int kinds, void (*fn)(const char *, void *),
                            void *arg) {
    const char *slash = strrchr(base, '/');
    char dir[4096];
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - base) + 1, base);
    else
        snprintf(dir, sizeof dir, "./");
    const char *stem = slash ? slash + 1 : base;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!(output_kind(e->d_name, stem) & kinds)) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s%s", slash ? dir : "", e->d_name);
        fn(path, arg);
    }
    closedir(d);
}

/* Existing outputs of this command (every key, every rank): a run still going is not
 * disturbed; a complete output is not replaced without --force (with it, it is removed whole,
 * manifests and lists first); the files of a run that never finished (its marker is there) are
 * removed, as are dead temporaries. Then the command's marker is written, before anything is
 * committed. */
ig_status ig_preprocess_prepare(ig_ctx *ctx, const ig_preprocess_opts *o, ig_err *err) {
    static const char *const default_keys[] = {"text"};
    const char *const *keys = o->n_keys ? o->json_keys : default_keys;
    size_t n_keys = o->n_keys ? o->n_keys : 1;
    const char *out = o->output_prefix;
    if (!out || !*out)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "no output prefix given (--output-prefix)");
    long live = ig_run_marker_live(out);
    if (live)
        return ig_err_set(err, IG_ERR_EXISTS,
                          "a preprocess run (pid %ld) is writing %s right now (%s.incomplete); "
                          "wait for it or stop it",
                          live, out, out);
    int unfinished = ig_run_marker_exists(out);
    char stem[4096];
    scan found = {.ctx = ctx};
    for (size_t k = 0; k < n_keys; k++) {
        output_stem(out, keys, n_keys, k, stem, sizeof stem);
        for_each_output(stem, OUT_MANIFEST | OUT_DATA, note_match, &found);
    }
    if (found.n && !unfinished && !o->overwrite)
        return ig_err_set(err, IG_ERR_EXISTS,
                          "%s exists: an output is already there (use --force to replace it)",
                          found.first);
    if (unfinished)
        ig_warn(ctx, "removing the output of an unfinished earlier run (%s.incomplete)", out);
    scan s = {.ctx = ctx};
    for (size_t k = 0; k < n_keys; k++) {
        output_stem(out, keys, n_keys, k, stem, sizeof stem);
        for_each_output(stem, OUT_MANIFEST, remove_file, &s); /* manifests and lists first */
        for_each_output(stem, OUT_DATA, remove_file, &s);
        for_each_output(stem, OUT_TEMP, remove_file, &s);
    }
    for_each_output(out, OUT_TEMP, remove_file, &s); /* the marker's own, with several keys */
    return ig_run_marker_create(out, err);
}

ig_status ig_preprocess_commit(const ig_preprocess_opts *o, ig_err *err) {
    return ig_run_marker_remove(o->output_prefix, err);
}

/* Removes every file of the command's output (after a failure, when it is this run's alone). */
static void remove_all_outputs(ig_ctx *ctx, const ig_preprocess_opts *o) {
    static const char *const default_keys[] = {"text"};
    const char *const *keys = o->n_keys ? o->json_keys : default_keys;
    size_t n_keys = o->n_keys ? o->n_keys : 1;
    char stem[4096];
    scan s = {.ctx = ctx};
    for (size_t k = 0; k < n_keys; k++) {
        output_stem(o->output_prefix, keys, n_keys, k, stem, sizeof stem);
        for_each_output(stem, OUT_MANIFEST, remove_file, &s);
        for_each_output(stem, OUT_DATA, remove_file, &s);
    }
}

/* ---- setup ---------------------------------------------------------------------------------- */

static uint64_t file_size(const char *path) {
    struct stat sb;
    return strcmp(path, "-") && stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* Deals the files out to ranks: largest first to the least loaded rank (ties: lowest rank), so
 * every rank computes the same split; each rank keeps its files in input order. */
static ig_status pick_files(pipeline *p, char **all, size_t n_all, ig_err *err) {
    int world = p->o->world > 0 ? p->o->world : 1;
    p->files = calloc(n_all ? n_all : 1, sizeof *p->files);
    p->kinds = calloc(n_all ? n_all : 1, sizeof *p->kinds);
    size_t *order = calloc(n_all ? n_all : 1, sizeof *order);
    uint64_t *sizes = calloc(n_all ? n_all : 1, sizeof *sizes);
    uint64_t *load = calloc((size_t)world, sizeof *load);
    int *owner = calloc(n_all ? n_all : 1, sizeof *owner);
    ig_status st = IG_OK;
    if (!p->files || !p->kinds || !order || !sizes || !load || !owner) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_all; i++) {
        order[i] = i;
        sizes[i] = file_size(all[i]);
    }
    for (size_t i = 1; i < n_all; i++) /* insertion sort by size desc, index asc: small n */
        for (size_t j = i;
             j > 0 && (sizes[order[j]] > sizes[order[j - 1]] ||
                       (sizes[order[j]] == sizes[order[j - 1]] && order[j] < order[j - 1]));
             j--) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (size_t i = 0; i < n_all; i++) {
        int best = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[best]) best = r;
        owner[order[i]] = best;
        load[best] += sizes[order[i]] + 1;
    }
    for (size_t i = 0; i < n_all; i++) {
        if (owner[i] != p->o->rank) continue;
        p->kinds[p->n_files] = ig_input_kind_of(all[i], p->o->txt_lines);
        p->files[p->n_files++] = all[i];
        all[i] = NULL;
    }
out:
    free(order);
    free(sizes);
    free(load);
    free(owner);
    return st;
}

static ig_status make_outputs(pipeline *p, ig_err *err) {
    p->outs = calloc(p->n_keys, sizeof *p->outs);
    if (!p->outs) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < p->n_keys; k++) {
        char rank[32] = "";
        if (p->o->world > 1) snprintf(rank, sizeof rank, "_r%04d", p->o->rank);
        int rc = p->n_keys > 1
                     ? asprintf(&p->outs[k].base, "%s_%s%s", p->o->output_prefix, p->keys[k], rank)
                     : asprintf(&p->outs[k].base, "%s%s", p->o->output_prefix, rank);
        if (rc < 0) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    ig_manifest *m = &p->meta;
    snprintf(m->tokenizer, sizeof m->tokenizer, "%s", ig_tokenizer_name(p->o->tokenizer));
    if (p->o->tokenizer_path)
        snprintf(m->tokenizer_path, sizeof m->tokenizer_path, "%s", p->o->tokenizer_path);
    m->tokenizer_hash = ig_tokenizer_hash(p->o->tokenizer);
    m->vocab_size = ig_tokenizer_vocab_size(p->o->tokenizer);
    m->eod_id = ig_tokenizer_eod(p->o->tokenizer);
    snprintf(m->tool_version, sizeof m->tool_version, "ingot %s", IG_VERSION_STRING);
    for (size_t f = 0; f < p->n_files; f++) {
        ig_status st = ig_manifest_add_source(m, p->files[f], err);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}

static ig_status check_opts(const ig_preprocess_opts *o, ig_err *err) {
    if (!o->tokenizer) return ig_err_set(err, IG_ERR_INVALID_ARG, "no tokenizer given");
    if (!o->output_prefix || !*o->output_prefix)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "no output prefix given (--output-prefix)");
    if (o->n_inputs == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "no input given (--input)");
    if (o->n_keys > IG_MAX_JSON_KEYS)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "at most %d --json-key values",
                          IG_MAX_JSON_KEYS);
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "rank %d outside a world of %d", o->rank,
                          o->world);
    if (o->append_eod && ig_tokenizer_eod(o->tokenizer) < 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "--append-eod: the tokenizer has no end-of-document token");
    for (size_t i = 0; i < o->n_keys; i++)
        for (size_t j = 0; j < i; j++)
            if (!strcmp(o->json_keys[i], o->json_keys[j]))
                return ig_err_set(err, IG_ERR_INVALID_ARG, "--json-key '%s' is given twice",
                                  o->json_keys[i]);
    return IG_OK;
}

ig_status ig_preprocess_text(ig_ctx *ctx, const ig_preprocess_opts *opts,
                             ig_preprocess_stats *stats, ig_err *err) {
    static const char *const default_keys[] = {"text"};
    ig_preprocess_stats local;
    ig_preprocess_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    ig_status s = check_opts(opts, err);
    if (s != IG_OK) return s;

    pipeline p = {.ctx = ctx, .o = opts, .st = st};
    p.keys = opts->n_keys ? opts->json_keys : default_keys;
    p.n_keys = opts->n_keys ? opts->n_keys : 1;
    double t0 = ig_now();
    char **all = NULL;
    size_t n_all = 0;
    pthread_t reader, *workers = NULL;
    int reader_started = 0, n_started = 0;
    int owns_output = 0; /* this call prepared the output and holds its marker */
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv_free, NULL);
    pthread_cond_init(&p.cv_todo, NULL);
    pthread_cond_init(&p.cv_done, NULL);

    if ((s = ig_expand_inputs(opts->inputs, opts->n_inputs, &all, &n_all, err)) != IG_OK) goto out;
    if ((s = pick_files(&p, all, n_all, err)) != IG_OK) goto out;
    st->files = p.n_files;
    if ((s = make_outputs(&p, err)) != IG_OK) goto out;
    if (!opts->prepared) {
        if ((s = ig_preprocess_prepare(ctx, opts, err)) != IG_OK) goto out;
        owns_output = 1;
    }

    p.n_workers = opts->workers > 0 ? opts->workers : ig_ctx_threads(ctx);
    if (p.n_workers > 256) p.n_workers = 256;
    p.pool_n = (size_t)p.n_workers * POOL_PER_WORKER + 2;
    p.pool = calloc(p.pool_n, sizeof *p.pool);
    if (!p.pool) {
        s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < p.pool_n; i++) {
        if (!batch_init(&p.pool[i], p.n_keys)) {
            s = ig_err_set(err, IG_ERR_NOMEM, "out of memory allocating batches");
            goto out;
        }
        p.pool[i].next = p.free_list;
        p.free_list = &p.pool[i];
    }
    if (opts->progress) {
        ig_progress_opts po = ig_progress_opts_default();
        po.label = "preprocess";
        po.bytes = 1;
        for (size_t f = 0; f < p.n_files; f++) po.total += file_size(p.files[f]);
        if ((s = ig_progress_create(&p.progress, &po, err)) != IG_OK) goto out;
    }

    workers = calloc((size_t)p.n_workers, sizeof *workers);
    if (!workers) {
        s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (pthread_create(&reader, NULL, reader_main, &p) != 0) {
        s = ig_err_set(err, IG_ERR_IO, "cannot start the reader thread");
        goto out;
    }
    reader_started = 1;
    for (; n_started < p.n_workers; n_started++)
        if (pthread_create(&workers[n_started], NULL, worker_main, &p) != 0) {
            ig_err e;
            ig_err_set(&e, IG_ERR_IO, "cannot start worker thread %d", n_started);
            fail(&p, IG_ERR_IO, &e);
            break;
        }
    s = run_writer(&p, err);
    if (s != IG_OK) fail(&p, s, err);

out:
    if (reader_started) pthread_join(reader, NULL);
    for (int i = 0; i < n_started; i++) pthread_join(workers[i], NULL);
    free(workers);
    if (p.progress) {
        ig_progress_finish(p.progress);
        p.progress = NULL;
    }
    /* finish the open shards, write every manifest and shard list, and only then remove the
     * run markers: the one commit point of the output. On failure, remove all this run made. */
    for (size_t k = 0; s == IG_OK && p.outs && k < p.n_keys; k++) {
        out_key *ok = &p.outs[k];
        if (!ok->w && ok->n_prefixes == 0) s = open_shard(&p, ok, err); /* no documents */
        if (s == IG_OK) s = close_shard(&p, ok, err);
    }
    for (size_t k = 0; p.outs && k < p.n_keys; k++) {
        ig_shard_writer_abort(p.outs[k].w);
        p.outs[k].w = NULL;
    }
    for (size_t k = 0; s == IG_OK && p.outs && k < p.n_keys; k++)
        for (size_t i = 0; s == IG_OK && i < p.outs[k].n_pending; i++)
            s = ig_manifest_write(&p.outs[k].pending[i], p.outs[k].prefixes[i], 0, err);
    /* a sharded output gets a shard list, so that OUT names all of it (under mpirun, rank 0
     * writes one list over every rank's shards instead) */
    for (size_t k = 0; s == IG_OK && p.outs && k < p.n_keys; k++)
        if (opts->shard_size && opts->world == 1)
            s = ig_shard_list_write(p.outs[k].base, (const char *const *)p.outs[k].prefixes,
                                    p.outs[k].n_prefixes, 0, err);
    for (size_t k = 0; s == IG_OK && p.outs && k < p.n_keys; k++) {
        out_key *ok = &p.outs[k];
        for (size_t i = 0; s == IG_OK && i < ok->n_prefixes; i++) {
            char **np = realloc(st->shard_prefixes, (st->n_shard_prefixes + 1) * sizeof *np);
            if (!np) {
                s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
                break;
            }
            st->shard_prefixes = np;
            st->shard_prefixes[st->n_shard_prefixes++] = ok->prefixes[i];
            ok->prefixes[i] = NULL;
            st->shards++;
        }
    }
    /* the one commit point: the marker goes once everything above is in place */
    if (s == IG_OK && owns_output) s = ig_preprocess_commit(opts, err);
    if (s != IG_OK) {
        if (owns_output) {
            /* everything under the command's output is this run's alone: remove it whole */
            remove_all_outputs(ctx, opts);
            ig_run_marker_remove(opts->output_prefix, NULL);
        } else {
            /* the caller owns the marker (mpirun): remove just the shards this rank made */
            for (size_t k = 0; p.outs && k < p.n_keys; k++)
                for (size_t i = 0; i < p.outs[k].n_prefixes; i++)
                    if (p.outs[k].prefixes[i]) ig_shard_remove(p.outs[k].prefixes[i]);
            for (size_t i = 0; i < st->n_shard_prefixes; i++)
                ig_shard_remove(st->shard_prefixes[i]);
        }
    }
    for (size_t k = 0; p.outs && k < p.n_keys; k++) {
        out_key *ok = &p.outs[k];
        for (size_t i = 0; i < ok->n_pending; i++) ig_manifest_clear(&ok->pending[i]);
        free(ok->pending);
        for (size_t i = 0; i < ok->n_prefixes; i++) free(ok->prefixes[i]);
        free(ok->prefixes);
        free(ok->base);
    }
    free(p.outs);
    ig_manifest_clear(&p.meta);
    for (size_t i = 0; p.pool && i < p.pool_n; i++) batch_free(&p.pool[i], p.n_keys);
    free(p.pool);
    free(p.seen);
    for (size_t f = 0; f < p.n_files; f++) free(p.files[f]);
    free(p.files);
    free(p.kinds);
    ig_input_list_free(all, n_all);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv_free);
    pthread_cond_destroy(&p.cv_todo);
    pthread_cond_destroy(&p.cv_done);
    st->seconds = ig_now() - t0;
    return s;
}
