/* pipeline.c - the text pipeline: inputs -> tokens -> Megatron-compatible shards.
 *
 * Every thread reads and tokenizes, and the calling thread also writes, so that the output is
 * byte-identical for any number of threads and readers:
 *   reading     a thread with nothing to do reads the next batch of records from one of R
 *               reading slots, then parses (JSON, UTF-8) and tokenizes that batch itself, its
 *               bytes still in its cache. A slot reads one "unit" at a time (a file, or a byte
 *               range of a large .jsonl / line-mode .txt), one thread at a time; batches are
 *               numbered within their unit; R slots read R units at once;
 *   writing     the calling thread takes batches back unit by unit, each in its numbered order,
 *               drops duplicates and bad records, and appends documents to the shard writers;
 *               while the batch it needs is not done, it reads and tokenizes one itself.
 * (A reader thread of its own made --threads 2 three threads on two cores, the reader preempting
 * a tokenizing thread hundreds of times a run; and the batch went to another core's cache.)
 * Reading a batch takes a few percent of tokenizing it (one slot splits a .jsonl at about 5 GB/s
 * and a .jsonl.zst at about 1 GB/s, where a thread tokenizes some 130 MB/s), so one slot keeps
 * many threads busy; several slots read several files, or ranges of one file, at once.
 * A unit's errors travel with its records (as the unit's last record), so the writer meets them
 * in input order whatever the threads' timing. Records carry line numbers counted from their
 * unit's first line; the writer, which has seen the units before, knows the file's line when it
 * must name one.
 * Batches come from a fixed pool, so memory is bounded by the pool size whatever the input size;
 * units ahead of the writer's leave a reserve of batches to the unit it waits for.
 * Manifests are written only once every shard of the run is complete: a run killed at any
 * moment leaves no shard that `ingot verify` accepts.
 */
#include "preprocess/preprocess.h"
#include "output_internal.h"
#include "reader_internal.h"

#include <errno.h>
#include <dirent.h>
#include <limits.h>
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
/* Record bytes in flight (read, not yet written) above which no more are read: with documents of
 * tens of MB, the batch count alone would not bound memory. One batch may always be in flight. */
#define INFLIGHT_BYTES ((uint64_t)32 << 20)
/* A batch buffer that grew past this for a huge record goes back to its usual size. */
#define BATCH_SHRINK_BYTES (4 * (size_t)BATCH_BYTES)
#define TOKENS_SHRINK_IDS  ((size_t)1 << 21)
/* Batches per thread: the one it tokenizes, and those done before the writer wants them. */
#define POOL_PER_THREAD 4
/* Several slots: a large .jsonl or line-mode .txt is read as byte ranges of this size (a range
 * reads on to the end of its last line, up to 1 MiB more), and each slot past the first adds
 * enough batches to the pool to hold about one range read ahead of the writer. */
#define SPLIT_BYTES_DEFAULT ((uint64_t)8 << 20)
#define POOL_PER_SLOT       32
#define THREADS_PER_SLOT    16 /* default: one reading slot per 16 threads */

typedef struct batch {
    uint64_t seq; /* within its unit */
    size_t unit, file;
    ig_status rerr; /* IG_OK, or the reader's error: the last record, msg its message */
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

/* What one reader reads at a time: a file, or the lines starting in a byte range of one. */
typedef struct unit {
    size_t file;
    uint64_t begin, end; /* a range; a whole file: 0, UINT64_MAX */
    int range;           /* read with ig_record_reader_open_range */
    /* under pipeline.mu */
    uint64_t n_batches; /* pushed so far; final once done */
    uint64_t lines;     /* lines read (set when done) */
    uint64_t inflight;  /* bytes of its batches pushed and not yet given back */
    int done;
} unit;

/* A reading slot: the unit it reads, batch by batch, by one thread at a time (busy, under
 * pipeline.mu); the other fields belong to that thread while it reads. */
typedef struct slot {
    size_t u; /* SIZE_MAX: no unit */
    int busy;
    ig_record_reader *r; /* NULL before the unit is opened (or when opening it failed: st) */
    ig_status st;        /* the unit's error, opening or reading it: its last batch says so */
    ig_err err;
    uint64_t consumed; /* input bytes counted into the unit's batches so far */
} slot;

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
    uint64_t *sizes; /* their sizes when the run started (UINT64_MAX: not a regular file) */
    size_t n_files;
    int n_workers;

    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* the worker threads wait on it: a slot or a batch came free */
    pthread_cond_t cv_done; /* the writer waits on it: a batch was tokenized, a unit ended */
    batch *pool;
    size_t pool_n;
    uint64_t inflight; /* bytes of the batches read and not yet given back */
    batch *free_list, *done;
    size_t n_free;
    size_t reserve; /* free batches only the writer's unit may take */
    unit *units;
    size_t n_units;
    size_t next_unit; /* the next unit a slot takes */
    size_t w_unit;    /* the unit the writer takes batches from */
    size_t cut_file;  /* a file skipped from a reader's error on (--on-error skip); SIZE_MAX */
    slot *slots;
    int n_slots;
    int read_all; /* every unit read */
    int stop;
    ig_status fail;
    ig_err ferr;
    ig_progress *progress;
    ig_piece_cache *pieces; /* merged pieces, shared by the threads' encoders */

    out_key *outs;
    ig_manifest meta; /* tokenizer fields, shared by every shard */
    /* dedup: open addressing over 128-bit hashes, (0,0) marks empty */
    ig_hash128 *seen;
    size_t seen_cap, seen_n;
    ig_preprocess_stats *st;
    int rank, world; /* of opts->comm */
    ig_output_spec spec;
} pipeline;

ig_preprocess_opts ig_preprocess_opts_default(void) {
    static const char *const default_keys[] = {"text"};
    return (ig_preprocess_opts){
        .json_keys = default_keys, .n_keys = 1, .append_eod = 1, .on_error = IG_ON_ERROR_FAIL};
}

void ig_preprocess_stats_clear(ig_preprocess_stats *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_shard_prefixes; i++) free(st->shard_prefixes[i]);
    free(st->shard_prefixes);
    memset(st, 0, sizeof *st);
}

/* ---- failure and the pool ------------------------------------------------------------------- */

/* Records the first failure and stops every thread. Call with mu held. */
static void fail_locked(pipeline *p, ig_status status, const ig_err *e) {
    if (p->fail == IG_OK) {
        p->fail = status;
        if (e) p->ferr = *e;
        p->ferr.status = status;
    }
    p->stop = 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_cond_broadcast(&p->cv_done);
}

static void fail(pipeline *p, ig_status status, const ig_err *e) {
    pthread_mutex_lock(&p->mu);
    fail_locked(p, status, e);
    pthread_mutex_unlock(&p->mu);
}

/* Whether a batch of unit u may be read now. The writer's unit may always have one batch in
 * flight and then up to INFLIGHT_BYTES; the units ahead of it share another INFLIGHT_BYTES and
 * leave `reserve` free batches to it, so that the writer never waits on a unit that cannot get a
 * batch. Call with mu held. */
static int may_take(const pipeline *p, size_t u) {
    if (!p->free_list) return 0;
    uint64_t own = p->w_unit < p->n_units ? p->units[p->w_unit].inflight : 0;
    if (u == p->w_unit) return own < INFLIGHT_BYTES;
    return p->n_free > p->reserve && p->inflight - own < INFLIGHT_BYTES;
}

/* Empties a batch for reuse (and shrinks what a huge record grew). */
static void batch_reset(pipeline *p, batch *b) {
    if (b->bcap > BATCH_SHRINK_BYTES) {
        char *nb = ig_realloc(p->ctx, b->buf, BATCH_BYTES + (BATCH_BYTES >> 2));
        if (nb) {
            b->buf = nb;
            b->bcap = BATCH_BYTES + (BATCH_BYTES >> 2);
        }
    }
    for (size_t k = 0; k < p->n_keys; k++)
        if (b->toks[k].cap > TOKENS_SHRINK_IDS) ig_tokens_free(&b->toks[k]);
    b->n = b->len = 0;
    b->rerr = IG_OK;
    b->text_bytes = b->bytes_in = 0;
    for (size_t k = 0; k < p->n_keys; k++) b->toks[k].n = 0;
    for (size_t i = 0; i < b->cap; i++) {
        ig_free(p->ctx, b->msg[i]);
        b->msg[i] = NULL;
    }
}

static void give_free(pipeline *p, batch *b) {
    uint64_t pushed = b->pushed;
    b->pushed = 0;
    batch_reset(p, b);
    pthread_mutex_lock(&p->mu);
    p->inflight -= pushed;
    p->units[b->unit].inflight -= pushed;
    b->next = p->free_list;
    p->free_list = b;
    p->n_free++;
    pthread_cond_signal(&p->cv_work); /* a batch may be read: by any one of them */
    pthread_mutex_unlock(&p->mu);
}

/* ---- batches -------------------------------------------------------------------------------- */

static int batch_init(ig_ctx *ctx, batch *b, size_t n_keys) {
    b->cap = BATCH_DOCS;
    b->bcap = BATCH_BYTES + (BATCH_BYTES >> 2);
    b->buf = ig_alloc(ctx, b->bcap);
    b->off = ig_calloc(ctx, b->cap, sizeof *b->off);
    b->rlen = ig_calloc(ctx, b->cap, sizeof *b->rlen);
    b->line = ig_calloc(ctx, b->cap, sizeof *b->line);
    b->toks = ig_calloc(ctx, n_keys, sizeof *b->toks);
    b->ntok = ig_calloc(ctx, b->cap * n_keys, sizeof *b->ntok);
    b->hash = ig_calloc(ctx, b->cap, sizeof *b->hash);
    b->msg = ig_calloc(ctx, b->cap, sizeof *b->msg);
    if (b->toks)
        for (size_t k = 0; k < n_keys; k++) b->toks[k].ctx = ctx;
    return b->buf && b->off && b->rlen && b->line && b->toks && b->ntok && b->hash && b->msg;
}

static void batch_free(ig_ctx *ctx, batch *b, size_t n_keys) {
    ig_free(ctx, b->buf);
    ig_free(ctx, b->off);
    ig_free(ctx, b->rlen);
    ig_free(ctx, b->line);
    if (b->toks)
        for (size_t k = 0; k < n_keys; k++) ig_tokens_free(&b->toks[k]);
    ig_free(ctx, b->toks);
    ig_free(ctx, b->ntok);
    ig_free(ctx, b->hash);
    if (b->msg)
        for (size_t i = 0; i < b->cap; i++) ig_free(ctx, b->msg[i]);
    ig_free(ctx, b->msg);
}

static ig_status batch_append(ig_ctx *ctx, batch *b, const ig_record *rec, ig_err *err) {
    if (b->len + rec->len > b->bcap) {
        size_t cap = b->bcap;
        while (cap < b->len + rec->len) cap *= 2;
        char *nb = ig_realloc(ctx, b->buf, cap);
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

/* ---- reading -------------------------------------------------------------------------------- */

/* A reader's error ends its unit as one more record, an empty one whose message is set, so that
 * the workers pass it by and the writer meets it in input order: with --on-error skip a format
 * error (a corrupt or truncated .zst, a record past the size limit) is a bad record and the rest
 * of the file is skipped; any other error, or any error without skip, stops the run there. */
static ig_status add_reader_error(ig_ctx *ctx, batch *b, size_t f, ig_status why_st,
                                  const ig_err *why, ig_err *err) {
    ig_record rec = {"", 0, 0, 0};
    if (b->n == 0) b->file = f;
    ig_status st = batch_append(ctx, b, &rec, err);
    if (st != IG_OK) return st;
    b->msg[b->n - 1] = ig_strdup(ctx, why->msg);
    if (!b->msg[b->n - 1]) {
        b->n--;
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    b->rerr = why_st;
    return IG_OK;
}

static ig_status open_unit(pipeline *p, const unit *un, ig_record_reader **r, ig_err *err) {
    size_t f = un->file;
    ig_status st = un->range ? ig_record_reader_open_range(r, p->ctx, p->files[f], p->kinds[f],
                                                           un->begin, un->end, err)
                             : ig_record_reader_open(r, p->ctx, p->files[f], p->kinds[f], err);
    if (st == IG_OK && p->sizes[f] != UINT64_MAX) ig_record_reader_expect_size(*r, p->sizes[f]);
    return st;
}

/* Input bytes a unit has consumed: a range's reader reads on past its end to finish its last
 * line, bytes that the next range counts; on an error, everything read up to it (as a reader
 * of the whole file would have). */
static uint64_t unit_bytes(const unit *un, const ig_record_reader *r, int error) {
    uint64_t now = ig_record_reader_bytes_in(r);
    return !error && now > un->end ? un->end : now;
}

/* Whether every unit is read: none left to take and no slot holding one. With mu held. */
static void note_read_all(pipeline *p) {
    if (p->read_all || p->next_unit < p->n_units) return;
    for (int i = 0; i < p->n_slots; i++)
        if (p->slots[i].u != SIZE_MAX) return;
    p->read_all = 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_cond_broadcast(&p->cv_done);
}

/* With mu held: the slot to read a batch from now, or NULL when none may be read. The slot holding
 * the lowest unit goes first (the writer waits on the lowest); else an idle slot takes the next
 * unit, passing by those of a file skipped from an error on (nothing of them is read). */
static slot *pick_slot(pipeline *p) {
    slot *best = NULL, *idle = NULL;
    for (int i = 0; i < p->n_slots; i++) {
        slot *s = &p->slots[i];
        if (s->busy) continue;
        if (s->u == SIZE_MAX) {
            if (!idle) idle = s;
        } else if (may_take(p, s->u) && (!best || s->u < best->u)) {
            best = s;
        }
    }
    if (best || !idle) return best;
    while (p->next_unit < p->n_units && p->units[p->next_unit].file == p->cut_file) {
        p->units[p->next_unit++].done = 1;
        pthread_cond_broadcast(&p->cv_done);
    }
    note_read_all(p);
    if (p->next_unit == p->n_units || !may_take(p, p->next_unit)) return NULL;
    size_t u = p->next_unit++;
    *idle = (slot){.u = u, .consumed = p->units[u].begin};
    return idle;
}

/* Reads slot s's next batch into b, without mu: records up to a batch's size, or to the end of
 * the unit (then its error, if any, as its last record). Returns 1 at the unit's end. */
static int fill_batch(pipeline *p, slot *s, batch *b, ig_status *ast, ig_err *aerr) {
    const unit *un = &p->units[s->u];
    size_t f = un->file;
    b->file = f;
    if (!s->r && s->st == IG_OK) s->st = open_unit(p, un, &s->r, &s->err);
    int end = s->st != IG_OK;
    while (!end) {
        ig_record rec;
        int has = 0;
        if ((s->st = ig_record_reader_next(s->r, &rec, &has, &s->err)) != IG_OK || !has)
            end = 1;
        else if ((s->st = batch_append(p->ctx, b, &rec, &s->err)) != IG_OK)
            end = 1;
        else if (b->n == b->cap || b->len >= BATCH_BYTES)
            break;
    }
    if (end && s->st != IG_OK) *ast = add_reader_error(p->ctx, b, f, s->st, &s->err, aerr);
    /* the last batch goes even when empty: its bytes count */
    uint64_t now = s->r ? unit_bytes(un, s->r, s->st != IG_OK) : s->consumed;
    b->bytes_in = now - s->consumed;
    s->consumed = now;
    return end;
}

/* With mu held: reads the next batch of some unit, numbered in it and counted in flight, for
 * the caller to tokenize. NULL when none may be read now; mu is then released in between only
 * if the pipeline stopped. */
static batch *read_batch(pipeline *p) {
    slot *s = p->stop ? NULL : pick_slot(p);
    if (!s) return NULL;
    batch *b = p->free_list;
    p->free_list = b->next;
    p->n_free--;
    s->busy = 1;
    unit *un = &p->units[s->u];
    pthread_mutex_unlock(&p->mu);

    ig_status ast = IG_OK;
    ig_err aerr = {0};
    int end = fill_batch(p, s, b, &ast, &aerr);
    uint64_t lines = 0;
    if (end) {
        lines = s->r ? ig_record_reader_lines(s->r) : 0;
        ig_record_reader_close(s->r);
        s->r = NULL;
    }

    pthread_mutex_lock(&p->mu);
    b->unit = s->u;
    b->seq = un->n_batches++;
    b->next = NULL;
    b->pushed = b->len;
    p->inflight += b->len;
    un->inflight += b->len;
    s->busy = 0;
    if (end) {
        un->lines = lines;
        un->done = 1;
        s->u = SIZE_MAX;
        note_read_all(p);
    }
    pthread_cond_signal(&p->cv_work);    /* the slot is free again: for any one of them */
    pthread_cond_broadcast(&p->cv_done); /* the writer may read it, or go on to the next unit */
    if (ast != IG_OK) {
        fail_locked(p, ast, &aerr);
        b->next = p->free_list; /* freed with the pool */
        p->free_list = b;
        return NULL;
    }
    return b;
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
        if (b->msg[i]) { /* a bad file, found bad by the reader */
            for (size_t k = 0; k < p->n_keys; k++) b->ntok[i * p->n_keys + k] = 0;
            continue;
        }
        ig_record rec = {b->buf + b->off[i], b->rlen[i], b->line[i], 0};
        ig_doc doc;
        ig_err perr = {0};
        ig_status st = ig_record_parse(&rec, p->kinds[b->file], p->files[b->file], p->keys,
                                       p->n_keys, &doc, &perr);
        if (st == IG_ERR_FORMAT) {
            b->msg[i] = ig_strdup(p->ctx, perr.msg[0] ? perr.msg : "malformed record");
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

/* With p->mu held, b read by this thread: tokenizes b without the lock, then files it as done
 * (waking the writer) or, failed, stops the pipeline and gives the batch back to the pool.
 * Returns with p->mu held. */
static void tokenize_read(pipeline *p, ig_encoder *enc, batch *b) {
    ig_err err = {0};
    pthread_mutex_unlock(&p->mu);
    ig_status st = tokenize_batch(p, enc, b, &err);
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
}

/* A thread's encoder, sharing the run's merged pieces. */
static ig_status make_encoder(pipeline *p, ig_encoder **enc, ig_err *err) {
    ig_status st = ig_encoder_create(enc, p->o->tokenizer, err);
    if (st == IG_OK) st = ig_encoder_share(*enc, p->pieces, err);
    if (st != IG_OK) {
        ig_encoder_free(*enc);
        *enc = NULL;
    }
    return st;
}

static void *worker_main(void *arg) {
    pipeline *p = arg;
    ig_err err = {0};
    ig_encoder *enc = NULL;
    ig_status st = make_encoder(p, &enc, &err);
    if (st != IG_OK) {
        fail(p, st, &err);
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    while (!p->stop && !p->read_all) {
        batch *b = read_batch(p);
        if (b)
            tokenize_read(p, enc, b);
        else if (!p->stop && !p->read_all)
            pthread_cond_wait(&p->cv_work, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    ig_encoder_free(enc);
    return NULL;
}

/* ---- writer --------------------------------------------------------------------------------- */

/* 1 if h was new (and is now recorded), 0 if seen before, -1 when out of memory. */
static int seen_insert(pipeline *p, ig_hash128 h) {
    if (h.lo == 0 && h.hi == 0) h.lo = 1;
    if ((p->seen_n + 1) * 2 > p->seen_cap) {
        size_t ncap = p->seen_cap ? p->seen_cap * 2 : 1 << 16;
        ig_hash128 *ns = ig_calloc(p->ctx, ncap, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < p->seen_cap; i++) {
            ig_hash128 e = p->seen[i];
            if (!e.lo && !e.hi) continue;
            size_t j = e.lo & (ncap - 1);
            while (ns[j].lo || ns[j].hi) j = (j + 1) & (ncap - 1);
            ns[j] = e;
        }
        ig_free(p->ctx, p->seen);
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
    return p->o->shard_size
               ? ig_asprintf(p->ctx, "%s_%05llu", ok->base, (unsigned long long)ok->shard_no)
               : ig_strdup(p->ctx, ok->base);
}

static ig_status close_shard(pipeline *p, out_key *ok, ig_err *err) {
    if (!ok->w) return IG_OK;
    ig_manifest *np = ig_realloc(p->ctx, ok->pending, (ok->n_pending + 1) * sizeof *np);
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
    char **np = ig_realloc(p->ctx, ok->prefixes, (ok->n_prefixes + 1) * sizeof *np);
    if (!np) {
        ig_free(p->ctx, name);
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

/* Why record i of b is bad, naming the file's line: a worker named the line counted from its
 * unit's first line, so for a unit that starts after line_base lines of its file the record is
 * parsed again (here, only for the message) with the file's line number. */
static const char *bad_record_msg(pipeline *p, const batch *b, size_t i, uint64_t line_base,
                                  ig_err *tmp) {
    if (line_base == 0 || b->rerr != IG_OK) return b->msg[i];
    ig_record rec = {b->buf + b->off[i], b->rlen[i], b->line[i] + line_base, 0};
    ig_doc doc;
    if (ig_record_parse(&rec, p->kinds[b->file], p->files[b->file], p->keys, p->n_keys, &doc,
                        tmp) == IG_OK) {
        ig_doc_release(&doc); /* cannot happen: a worker found it bad */
        return b->msg[i];
    }
    return tmp->msg;
}

/* Appends the documents of b. line_base: the lines of b's file before b's unit. */
static ig_status write_batch(pipeline *p, batch *b, uint64_t line_base, size_t *tok_pos,
                             ig_err *err) {
    ig_preprocess_stats *st = p->st;
    for (size_t k = 0; k < p->n_keys; k++) tok_pos[k] = 0;
    for (size_t i = 0; i < b->n; i++) {
        st->docs_read++;
        int keep = 1;
        if (b->msg[i] && b->rerr != IG_OK && i == b->n - 1) { /* the reader's error */
            if (b->rerr != IG_ERR_FORMAT || p->o->on_error == IG_ON_ERROR_FAIL)
                return ig_err_set(err, b->rerr, "%s", b->msg[i]);
            if (st->n_reported < IG_PREPROCESS_MAX_REPORTED)
                snprintf(st->reported[st->n_reported++], sizeof st->reported[0],
                         "%s (the rest of this file is skipped)", b->msg[i]);
            st->docs_skipped++;
            pthread_mutex_lock(&p->mu);
            p->cut_file = b->file; /* its later units are not written (nor read, if not begun) */
            pthread_mutex_unlock(&p->mu);
            keep = 0;
        } else if (b->msg[i]) {
            ig_err tmp = {0};
            const char *why = bad_record_msg(p, b, i, line_base, &tmp);
            if (p->o->on_error == IG_ON_ERROR_FAIL) {
                ig_err_set(err, IG_ERR_FORMAT, "%s", why);
                return ig_err_fix(err, "on_error", "skip");
            }
            if (st->n_reported < IG_PREPROCESS_MAX_REPORTED)
                snprintf(st->reported[st->n_reported++], sizeof st->reported[0], "%.*s",
                         (int)sizeof st->reported[0] - 1, why);
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

/* Counts bytes into the progress bar and, at most twice a second (or when final), updates its
 * documents and token rate. */
static void show_progress(pipeline *p, uint64_t bytes, double t0, double *last, int final) {
    if (!p->progress) return;
    if (bytes) ig_progress_add(p->progress, bytes);
    double now = ig_now();
    if (!final && now - *last <= 0.5) return;
    char extra[128];
    snprintf(extra, sizeof extra, "%llu docs, %.2f Mtok/s", (unsigned long long)p->st->docs_read,
             (double)p->st->tokens / 1e6 / (now - t0 > 1e-9 ? now - t0 : 1e-9));
    ig_progress_set_extra(p->progress, extra);
    *last = now;
}

/* With one thread: read, tokenize and write batch by batch on the calling thread, file by file
 * (the same documents as the threaded pipeline, so the same output). */
static ig_status run_inline(pipeline *p, ig_err *err) {
    size_t tok_pos[IG_MAX_JSON_KEYS];
    double t0 = ig_now(), last = 0;
    ig_encoder *enc = NULL;
    ig_status st = ig_encoder_create(&enc, p->o->tokenizer, err);
    batch *b = p->free_list;
    for (size_t f = 0; st == IG_OK && f < p->n_files; f++) {
        unit whole = {.file = f, .end = UINT64_MAX};
        ig_record_reader *r = NULL;
        ig_err rerr = {0};
        ig_status rst = open_unit(p, &whole, &r, &rerr);
        uint64_t consumed = 0;
        for (int more = 1; st == IG_OK && more;) {
            ig_record rec;
            int has = 0;
            if (rst == IG_OK && (rst = ig_record_reader_next(r, &rec, &has, &rerr)) == IG_OK &&
                has) {
                b->file = f;
                st = batch_append(p->ctx, b, &rec, err);
            }
            /* as read_unit: the reader's error is the file's last record */
            if (st == IG_OK && rst != IG_OK) st = add_reader_error(p->ctx, b, f, rst, &rerr, err);
            more = st == IG_OK && rst == IG_OK && has;
            if (st != IG_OK || (more && b->n < b->cap && b->len < BATCH_BYTES)) continue;
            uint64_t now = r ? ig_record_reader_bytes_in(r) : 0;
            b->bytes_in = now - consumed;
            consumed = now;
            b->file = f;
            st = tokenize_batch(p, enc, b, err);
            if (st == IG_OK) st = write_batch(p, b, 0, tok_pos, err);
            show_progress(p, b->bytes_in, t0, &last, 0);
            batch_reset(p, b);
        }
        ig_record_reader_close(r);
    }
    show_progress(p, 0, t0, &last, 1);
    ig_encoder_free(enc);
    return st;
}

/* Called with p->mu held by the writer when its next batch is not done: reads a batch and
 * tokenizes it on the writer's thread (its encoder made on first use). Returns 0 if no batch may
 * be read now (p->mu was held throughout), else 1 (p->mu is held again; the pipeline may have
 * stopped on a failure, which the caller checks before waiting). So the calling thread tokenizes
 * too: with --threads 2 two threads read and tokenize, and the writing takes a few percent of
 * one. */
static int writer_helps(pipeline *p, ig_encoder **enc) {
    if (p->stop || p->read_all) return 0;
    if (!*enc) {
        ig_err err = {0};
        pthread_mutex_unlock(&p->mu);
        ig_status st = make_encoder(p, enc, &err);
        pthread_mutex_lock(&p->mu);
        if (st != IG_OK) fail_locked(p, st, &err);
        return 1; /* the caller looks again (or sees p->stop) */
    }
    batch *b = read_batch(p);
    if (b) tokenize_read(p, *enc, b);
    return b || p->stop;
}

static ig_status run_writer(pipeline *p, ig_err *err) {
    size_t tok_pos[IG_MAX_JSON_KEYS];
    uint64_t next = 0, line_base = 0;
    size_t u = 0;
    double t0 = ig_now(), last = 0;
    ig_encoder *enc = NULL; /* the writer's, when it tokenizes a batch itself */
    for (;;) {
        pthread_mutex_lock(&p->mu);
        batch *b = NULL;
        while (!p->stop && u < p->n_units) {
            batch **pp = &p->done;
            while (*pp && ((*pp)->unit != u || (*pp)->seq != next)) pp = &(*pp)->next;
            if (*pp) {
                b = *pp;
                *pp = b->next;
                break;
            }
            if (p->units[u].done && next == p->units[u].n_batches) { /* on to the next unit */
                line_base = u + 1 < p->n_units && p->units[u + 1].file == p->units[u].file
                                ? line_base + p->units[u].lines
                                : 0;
                p->w_unit = ++u;
                next = 0;
                pthread_cond_broadcast(&p->cv_work); /* its slot may take the reserve */
                continue;
            }
            if (!writer_helps(p, &enc)) pthread_cond_wait(&p->cv_done, &p->mu);
        }
        int cut = b && b->file == p->cut_file;
        pthread_mutex_unlock(&p->mu);
        if (!b) break;
        /* a file skipped from a reader's error on: its later units' records are not written */
        ig_status st = cut ? IG_OK : write_batch(p, b, line_base, tok_pos, err);
        show_progress(p, cut ? 0 : b->bytes_in, t0, &last, 0);
        give_free(p, b);
        if (st != IG_OK) {
            ig_encoder_free(enc);
            return st;
        }
        next++;
    }
    ig_encoder_free(enc);
    show_progress(p, 0, t0, &last, 1);
    pthread_mutex_lock(&p->mu);
    ig_status st = p->fail;
    if (st != IG_OK) *err = p->ferr;
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* ---- setup ---------------------------------------------------------------------------------- */

/* A regular file's size, else UINT64_MAX (stdin, a pipe, a file that is gone). */
static uint64_t file_size(const char *path) {
    struct stat sb;
    return strcmp(path, "-") && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size
                                                                            : UINT64_MAX;
}

/* Deals the files out to ranks: largest first to the least loaded rank (ties: lowest rank), so
 * every rank computes the same split; each rank keeps its files in input order. */
static ig_status pick_files(pipeline *p, char **all, size_t n_all, ig_err *err) {
    int world = p->world;
    ig_ctx *ctx = p->ctx;
    size_t n1 = n_all ? n_all : 1;
    p->files = ig_calloc(ctx, n1, sizeof *p->files);
    p->kinds = ig_calloc(ctx, n1, sizeof *p->kinds);
    p->sizes = ig_calloc(ctx, n1, sizeof *p->sizes);
    size_t *order = ig_calloc(ctx, n1, sizeof *order);
    uint64_t *sizes = ig_calloc(ctx, n1, sizeof *sizes);
    uint64_t *exact = ig_calloc(ctx, n1, sizeof *exact);
    uint64_t *load = ig_calloc(ctx, (size_t)world, sizeof *load);
    int *owner = ig_calloc(ctx, n1, sizeof *owner);
    ig_status st = IG_OK;
    if (!p->files || !p->kinds || !p->sizes || !order || !sizes || !exact || !load || !owner) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_all; i++) {
        order[i] = i;
        exact[i] = file_size(all[i]);
        sizes[i] = exact[i] == UINT64_MAX ? 0 : exact[i]; /* stdin, a pipe: 0 for the deal */
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
        if (owner[i] != p->rank) continue;
        if (!(p->files[p->n_files] = ig_strdup(ctx, all[i]))) {
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            goto out;
        }
        p->kinds[p->n_files] = ig_input_kind_of(all[i], p->o->txt_lines);
        p->sizes[p->n_files++] = exact[i];
    }
out:
    ig_free(ctx, order);
    ig_free(ctx, sizes);
    ig_free(ctx, exact);
    ig_free(ctx, load);
    ig_free(ctx, owner);
    return st;
}

static ig_status make_outputs(pipeline *p, ig_err *err) {
    p->outs = ig_calloc(p->ctx, p->n_keys, sizeof *p->outs);
    if (!p->outs) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < p->n_keys; k++) {
        char rank[32] = "";
        if (p->world > 1) snprintf(rank, sizeof rank, "_r%04d", p->rank);
        p->outs[k].base =
            p->n_keys > 1 ? ig_asprintf(p->ctx, "%s_%s%s", p->o->output_prefix, p->keys[k], rank)
                          : ig_asprintf(p->ctx, "%s%s", p->o->output_prefix, rank);
        if (!p->outs[k].base) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
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
    ig_status pst = ig_output_prefix_check(o->output_prefix, err);
    if (pst != IG_OK) return pst;
    if (o->n_inputs == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "no input given");
    if (o->n_keys > IG_MAX_JSON_KEYS)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "at most %d JSON keys", IG_MAX_JSON_KEYS);
    if (o->append_eod && ig_tokenizer_eod(o->tokenizer) < 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "appending end-of-document tokens: the tokenizer has none");
    for (size_t i = 0; i < o->n_keys; i++)
        for (size_t j = 0; j < i; j++)
            if (!strcmp(o->json_keys[i], o->json_keys[j]))
                return ig_err_set(err, IG_ERR_INVALID_ARG, "JSON key '%s' is given twice",
                                  o->json_keys[i]);
    return IG_OK;
}

/* Keeps in worst the candidate name a + b whose file-name part is the longest. */
static void note_name(char *worst, size_t cap, size_t *worst_len, const char *a, const char *b) {
    const char *slash = strrchr(a, '/');
    size_t len = strlen(slash ? slash + 1 : a) + strlen(b);
    if (len > *worst_len) {
        *worst_len = len;
        snprintf(worst, cap, "%s%s", a, b);
    }
}

/* Every file the run will name fits in a file name (NAME_MAX): checked before anything is
 * written, rather than failing at the last shard list after hours of work. */
static ig_status check_name_lengths(const pipeline *p, ig_err *err) {
    char worst[8192] = "", stem[4096];
    size_t worst_len = 0;
    note_name(worst, sizeof worst, &worst_len, p->o->output_prefix, ".incomplete");
    for (size_t k = 0; k < p->n_keys; k++) {
        note_name(worst, sizeof worst, &worst_len, p->outs[k].base,
                  p->o->shard_size ? "_00000.json" : ".json");
        ig_output_stem(&p->spec, k, stem, sizeof stem);
        if (p->o->shard_size || p->world > 1)
            note_name(worst, sizeof worst, &worst_len, stem, ".shards.json");
    }
    if (worst_len <= NAME_MAX) return IG_OK;
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "output prefix %s is too long: the run would write %s, a file name of %zu "
                      "bytes, more than a file name may hold (%d); give a shorter prefix",
                      p->o->output_prefix, worst, worst_len, NAME_MAX);
}

/* The units the readers take, in input order: each file whole, or, with several readers
 * (split), a regular .jsonl or line-mode .txt file larger than the split size as byte ranges
 * of that size. */
static ig_status plan_units(pipeline *p, int split, ig_err *err) {
    uint64_t size = p->o->split_size ? p->o->split_size : SPLIT_BYTES_DEFAULT;
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (size_t f = 0; f < p->n_files; f++) {
            uint64_t fsize = p->sizes[f];
            int ranges = split && fsize != UINT64_MAX && fsize > size &&
                         (p->kinds[f] == IG_INPUT_JSONL || p->kinds[f] == IG_INPUT_TXT_LINES);
            uint64_t pieces = ranges ? (fsize + size - 1) / size : 1;
            for (uint64_t k = 0; k < pieces; k++, n++) {
                if (pass == 0) continue;
                unit *un = &p->units[n];
                un->file = f;
                un->range = ranges;
                un->begin = k * size;
                un->end = k + 1 < pieces ? (k + 1) * size : UINT64_MAX;
            }
        }
        if (pass == 0) {
            p->units = ig_calloc(p->ctx, n ? n : 1, sizeof *p->units);
            if (!p->units) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        }
    }
    p->n_units = n;
    return IG_OK;
}

/* Everything before the output is touched: the inputs (this rank's share), the output names,
 * the units of reading, the batch pool. */
static ig_status setup(pipeline *p, ig_err *err) {
    char **all = NULL;
    size_t n_all = 0;
    ig_status s = ig_expand_inputs(p->o->inputs, p->o->n_inputs, &all, &n_all, err);
    if (s == IG_OK) s = pick_files(p, all, n_all, err);
    ig_input_list_free(all, n_all);
    if (s != IG_OK) return s;
    p->st->files = p->n_files;
    if ((s = make_outputs(p, err)) != IG_OK) return s;
    if ((s = check_name_lengths(p, err)) != IG_OK) return s;
    int threads = p->o->threads > 0 ? p->o->threads : ig_ctx_threads(p->ctx);
    if (threads > 257) threads = 257;
    int slots =
        p->o->readers > 0 ? p->o->readers : (threads + THREADS_PER_SLOT - 1) / THREADS_PER_SLOT;
    if (threads < 2) slots = 0; /* all on the calling thread */
    if ((s = plan_units(p, slots > 1, err)) != IG_OK) return s;
    if ((size_t)slots > p->n_units) slots = p->n_units ? (int)p->n_units : 1;
    p->n_slots = slots;
    p->n_workers = slots == 0 ? 0 : threads - 1; /* and the calling thread */
    p->pool_n = slots ? (size_t)threads * POOL_PER_THREAD + (size_t)(slots - 1) * POOL_PER_SLOT : 1;
    p->reserve = slots > 1 ? (size_t)threads : 0;
    p->pool = ig_calloc(p->ctx, p->pool_n, sizeof *p->pool);
    if (!p->pool) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (slots) {
        p->slots = ig_calloc(p->ctx, (size_t)slots, sizeof *p->slots);
        if (!p->slots) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (int i = 0; i < slots; i++) p->slots[i].u = SIZE_MAX;
    }
    for (size_t i = 0; i < p->pool_n; i++) {
        if (!batch_init(p->ctx, &p->pool[i], p->n_keys))
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory allocating batches");
        p->pool[i].next = p->free_list;
        p->free_list = &p->pool[i];
        p->n_free++;
    }
    return IG_OK;
}

/* The workers and the writer (this thread), until the inputs are done or a thread fails; with no
 * workers, everything on this thread. */
static ig_status run_threads(pipeline *p, ig_err *err) {
    ig_status s = IG_OK;
    if (p->o->progress) {
        ig_progress_opts po = ig_progress_opts_default();
        po.label = "preprocess";
        po.bytes = 1;
        for (size_t f = 0; f < p->n_files; f++)
            if (p->sizes[f] != UINT64_MAX) po.total += p->sizes[f];
        if ((s = ig_progress_create(&p->progress, &po, err)) != IG_OK) return s;
    }
    if (p->n_workers == 0) {
        s = run_inline(p, err);
        ig_progress_finish(p->progress);
        p->progress = NULL;
        return s;
    }
    pthread_mutex_lock(&p->mu);
    note_read_all(p); /* no units at all */
    pthread_mutex_unlock(&p->mu);
    pthread_t *workers = ig_calloc(p->ctx, (size_t)p->n_workers, sizeof *workers);
    int n_started = 0;
    if (!workers) {
        s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else if ((s = ig_piece_cache_create(&p->pieces, p->o->tokenizer, 0, err)) == IG_OK) {
        for (; n_started < p->n_workers; n_started++)
            if (ig_thread_start(&workers[n_started], worker_main, p) != 0) {
                ig_err e;
                ig_err_set(&e, IG_ERR_IO, "cannot start worker thread %d", n_started);
                fail(p, IG_ERR_IO, &e);
                break;
            }
        s = run_writer(p, err);
        if (s != IG_OK) fail(p, s, err);
    }
    for (int i = 0; i < n_started; i++) pthread_join(workers[i], NULL);
    ig_free(p->ctx, workers);
    ig_piece_cache_free(p->pieces);
    p->pieces = NULL;
    ig_progress_finish(p->progress);
    p->progress = NULL;
    return s;
}

/* Finishes the open shards and writes every manifest (and, alone, every shard list); the shard
 * names move to the stats. */
static ig_status finish_shards(pipeline *p, ig_err *err) {
    ig_status s = IG_OK;
    for (size_t k = 0; s == IG_OK && k < p->n_keys; k++) {
        out_key *ok = &p->outs[k];
        if (!ok->w && ok->n_prefixes == 0) s = open_shard(p, ok, err); /* no documents */
        if (s == IG_OK) s = close_shard(p, ok, err);
    }
    for (size_t k = 0; s == IG_OK && k < p->n_keys; k++)
        for (size_t i = 0; s == IG_OK && i < p->outs[k].n_pending; i++)
            s = ig_manifest_write(&p->outs[k].pending[i], p->outs[k].prefixes[i], 0, err);
    /* a sharded output gets a shard list, so that OUT names all of it (with several ranks, rank 0
     * writes one list over every rank's shards instead) */
    for (size_t k = 0; s == IG_OK && k < p->n_keys; k++)
        if (p->o->shard_size && p->world == 1)
            s = ig_shard_list_write(p->outs[k].base, (const char *const *)p->outs[k].prefixes,
                                    p->outs[k].n_prefixes, 0, err);
    ig_preprocess_stats *st = p->st;
    for (size_t k = 0; s == IG_OK && k < p->n_keys; k++) {
        out_key *ok = &p->outs[k];
        for (size_t i = 0; s == IG_OK && i < ok->n_prefixes; i++) {
            char **np = realloc(st->shard_prefixes, (st->n_shard_prefixes + 1) * sizeof *np);
            if (!np) {
                s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
                break;
            }
            st->shard_prefixes = np;
            /* the stats are the caller's, freed without a context: malloc'd */
            char *name = strdup(ok->prefixes[i]);
            if (!name) {
                s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
                break;
            }
            st->shard_prefixes[st->n_shard_prefixes++] = name;
            st->shards++;
        }
    }
    return s;
}

/* Removes the shards this rank wrote (after a failure under several ranks). */
static void remove_own_shards(pipeline *p) {
    for (size_t k = 0; p->outs && k < p->n_keys; k++)
        for (size_t i = 0; i < p->outs[k].n_prefixes; i++)
            if (p->outs[k].prefixes[i]) ig_shard_remove(p->outs[k].prefixes[i]);
    for (size_t i = 0; i < p->st->n_shard_prefixes; i++) ig_shard_remove(p->st->shard_prefixes[i]);
}

static void pipeline_free(pipeline *p) {
    ig_ctx *ctx = p->ctx;
    for (size_t k = 0; p->outs && k < p->n_keys; k++) {
        out_key *ok = &p->outs[k];
        ig_shard_writer_abort(ok->w);
        for (size_t i = 0; i < ok->n_pending; i++) ig_manifest_clear(&ok->pending[i]);
        ig_free(ctx, ok->pending);
        for (size_t i = 0; i < ok->n_prefixes; i++) ig_free(ctx, ok->prefixes[i]);
        ig_free(ctx, ok->prefixes);
        ig_free(ctx, ok->base);
    }
    ig_free(ctx, p->outs);
    ig_manifest_clear(&p->meta);
    for (size_t i = 0; p->pool && i < p->pool_n; i++) batch_free(ctx, &p->pool[i], p->n_keys);
    ig_free(ctx, p->pool);
    ig_free(ctx, p->seen);
    for (size_t f = 0; p->files && f < p->n_files; f++) ig_free(ctx, p->files[f]);
    ig_free(ctx, p->files);
    ig_free(ctx, p->kinds);
    ig_free(ctx, p->sizes);
    ig_free(ctx, p->units);
    for (int i = 0; p->slots && i < p->n_slots; i++) ig_record_reader_close(p->slots[i].r);
    ig_free(ctx, p->slots);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
}

static const char *const text_data_exts[] = {".bin", ".idx", NULL};

ig_status ig_preprocess_text(ig_ctx *ctx, const ig_preprocess_opts *opts,
                             ig_preprocess_stats *stats, ig_err *err) {
    static const char *const default_keys[] = {"text"};
    ig_preprocess_stats local;
    ig_preprocess_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    ig_status s = check_opts(opts, err);
    if (s != IG_OK) return s;

    double t0 = ig_now();
    pipeline p = {.ctx = ctx, .o = opts, .st = st, .rank = 0, .world = 1, .cut_file = SIZE_MAX};
    if (opts->comm) {
        p.rank = ig_comm_rank(opts->comm);
        p.world = ig_comm_size(opts->comm);
    }
    int multi = p.world > 1;
    p.keys = opts->n_keys ? opts->json_keys : default_keys;
    p.n_keys = opts->n_keys ? opts->n_keys : 1;
    p.spec = (ig_output_spec){.prefix = opts->output_prefix,
                              .keys = p.keys,
                              .n_keys = p.n_keys,
                              .data_exts = text_data_exts,
                              .overwrite = opts->overwrite};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv_work, NULL);
    pthread_cond_init(&p.cv_done, NULL);

    /* nothing of the output is touched before every rank knows its inputs */
    s = setup(&p, err);
    if (multi) {
        int all_ok = 0;
        ig_err cerr = {0};
        ig_status cs = ig_comm_all_ok(opts->comm, s == IG_OK, &all_ok, &cerr);
        if (s == IG_OK && cs != IG_OK) s = cs, *err = cerr;
        if (s == IG_OK && !all_ok)
            s = ig_err_set(err, IG_ERR_CANCELLED, "another rank failed; see its message");
        if (s == IG_OK) s = ig_output_prepare_ranks(ctx, opts->comm, &p.spec, err);
        if (s == IG_OK) {
            s = run_threads(&p, err);
            if (s == IG_OK) s = finish_shards(&p, err);
            if (s != IG_OK) remove_own_shards(&p);
            ig_err lerr = {0};
            ig_status ls = ig_output_commit_ranks(ctx, opts->comm, &p.spec, s == IG_OK,
                                                  (const char *const *)st->shard_prefixes,
                                                  st->n_shard_prefixes, s == IG_OK ? err : &lerr);
            if (s == IG_OK) s = ls;
        }
    } else {
        if (s == IG_OK) s = ig_output_prepare(ctx, &p.spec, err);
        if (s == IG_OK) {
            s = run_threads(&p, err);
            if (s == IG_OK) s = finish_shards(&p, err);
            /* the one commit point: the marker goes once everything above is in place */
            if (s == IG_OK) s = ig_output_commit(&p.spec, err);
            /* everything under the command's output is this run's alone: remove it whole */
            if (s != IG_OK) ig_output_discard(ctx, &p.spec);
        }
    }
    pipeline_free(&p);
    st->seconds = ig_now() - t0;
    if (!stats) ig_preprocess_stats_clear(&local); /* the caller did not ask for them */
    return s;
}
