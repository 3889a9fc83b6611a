/* video_pipeline.c - the video pipeline: a manifest of videos -> a frame shard, its captions' text
 * (always: what preprocess captions encodes later) and tokens (with a tokenizer), a manifest and a
 * report (ig_preprocess_video).
 *
 * Workers take manifest rows in order and do each whole (video_job.c: open, scan, plan, decode,
 * convert, compress, tokenize); the calling thread writes the rows back in manifest order, so the
 * output is byte-identical for any number of workers. A worker never runs more than `ring` rows
 * ahead of the writer: memory is bounded by the clips of those rows. Decoding, converting and
 * writing overlap: workers show the writer their RGB clips chunk by chunk, and it writes the next
 * row's while they decode (write_ahead; a row that fails half-way is cut back out of the file); a
 * row that is the next to write when its decoding starts goes straight to the writer through
 * IG_VJOB_CHUNKS chunk buffers and is never whole in memory (one video: 63 MB resident, not 254);
 * the clip buffers of written rows go to a pool for the rows to come (their pages are mapped
 * already), all buffers together within the same bound. Bad videos are skipped and
 * reported (or, strict, stop the run). With a text encoder, once the frame shard is complete the
 * used videos' captions go through the feature stage (caption_features.c) into OUT.features, clip
 * for clip, as preprocess captions would make them from the output. The output's life - run
 * marker, --force, cleanup after a failure, one commit for all ranks - is the text pipeline's
 * (output.c).
 */
#include "video_internal.h"
#include "captions_internal.h"
#include "output_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { SLOT_FREE = 0, SLOT_BUSY, SLOT_DONE };

/* What a worker last showed of its row's RGB clips (ig_vjob_feed), under vpipe.mu; or, for a
 * row that goes straight to the writer, the chunk it put. */
typedef struct shown {
    uint64_t seq; /* shows so far (0: none) */
    uint32_t clip;
    const uint8_t *data;
    size_t made, bytes;
    const uint8_t *chunk[IG_VJOB_CHUNKS]; /* chunk i at [i % IG_VJOB_CHUNKS] */
    size_t chunk_len[IG_VJOB_CHUNKS];
    uint64_t put, written; /* chunks */
    int writing;           /* the writer is writing chunk `written` (without the lock) */
} shown;

typedef struct vpipe {
    ig_ctx *ctx;
    const ig_video_opts *o; /* &opts */
    ig_video_opts opts;     /* the caller's, with the per-video memory limit filled in */
    ig_video_stats *st;
    ig_video_manifest man;
    size_t *rows; /* this rank's rows (indices into man), in manifest order */
    size_t n_rows;
    int rank, world, n_workers, dec_threads;

    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    pthread_cond_t cv_taken; /* a chunk was written (ig_vjob_feed.put) */
    ig_vjob *slots;          /* [ring]: row r is in slot r % ring */
    int *state;
    shown *shown; /* [ring] */
    /* RGB clip buffers of rows written, for the rows to come (feed_alloc): at most ring of them,
     * and all clip buffers alive (rows' and pooled) within ring x max_video_memory, the bound
     * the rows in flight have without a pool */
    struct pooled {
        void *buf;
        size_t bytes;
    } * pool;
    size_t n_pool;
    uint64_t buf_bytes, buf_cap;
    size_t ring, next_claim, next_write;
    int stop;
    ig_status fail;
    ig_err ferr;
    ig_progress *progress;

    ig_output_spec spec;
    char *base; /* this rank's shard: OUT or OUT_rRRRR */
    ig_video_shard_writer *w;
    ig_shard_writer *cw;
    ig_shard_writer *tw; /* the captions' text, a document of bytes per used video */
    int32_t *text_ids;   /* a caption's bytes as the writer takes them */
    size_t text_cap;
    /* with features: each used video's caption and clips, in order, for the feature stage */
    struct caption_run {
        char *text;
        uint64_t clips;
    } * runs;
    size_t n_runs, cap_runs;
    ig_video_shard_meta meta;
    ig_clip_bucket *buckets;
    FILE *rows_out; /* report (or info) rows, until the end */
} vpipe;

/* the files of a frame shard output (OUT.info.csv of --probe-only is a file of its own); the
 * caption features of --text-encoder are part of it (--force replaces them with the clips) */
static const char *const video_data_exts[] = {".frames",        ".clips",
                                              ".captions.bin",  ".captions.idx",
                                              ".captions.json", ".texts.bin",
                                              ".texts.idx",     ".texts.json",
                                              ".features.feat", ".features.fidx",
                                              ".features.json", ".features.shards.json",
                                              ".report.csv",    NULL};

static const char report_header[] = "line,path,status,reason,clips,frames,decode_seconds,message\n";

ig_video_opts ig_video_opts_default(void) {
    return (ig_video_opts){.stride = 1, .clips_per_video = 1, .timeout_s = 120, .seed = 1234};
}

void ig_video_stats_clear(ig_video_stats *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_shard_prefixes; i++) free(st->shard_prefixes[i]);
    free(st->shard_prefixes);
    memset(st, 0, sizeof *st);
}

static ig_status check_opts(const ig_video_opts *o, ig_err *err) {
    if (!o->manifest) return ig_err_set(err, IG_ERR_INVALID_ARG, "no video manifest given");
    if (!o->output_prefix || !*o->output_prefix)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "no output prefix given");
    if (o->probe_only) return IG_OK;
    if (!o->buckets && (o->frames < 1 || o->frames > 65536))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "frames per clip must be in [1, 65536] (or come from buckets)");
    if (o->buckets && o->frames)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "buckets give the frames per clip: give one");
    if (o->buckets && (o->height || o->width))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "buckets give the size: give one");
    if ((o->height == 0) != (o->width == 0) || o->height > 16384 || o->width > 16384)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "a size is HxW, each in [1, 16384]");
    if (o->stride < 1 || (o->fps > 0 && o->stride > 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "take frames by stride (>= 1) or by fps");
    if (o->fps < 0 || o->fps > 1000)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "fps must be in (0, 1000]");
    if (o->clips_per_video < 1 || o->clips_per_video > 64)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "clips per video must be in [1, 64]");
    if (o->zstd_level < 0 || o->zstd_level > 19)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "zstd levels are 1 .. 19");
    return IG_OK;
}

/* ---- workers -------------------------------------------------------------------------------- */

static void fail_locked(vpipe *p, ig_status s, const ig_err *e) {
    if (p->fail == IG_OK) {
        p->fail = s;
        p->ferr = *e;
        p->ferr.status = s;
    }
    p->stop = 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_cond_broadcast(&p->cv_done);
    pthread_cond_broadcast(&p->cv_taken);
}

typedef struct feed_arg {
    vpipe *p;
    size_t slot, row; /* row: the index into rows */
} feed_arg;

/* ig_vjob_feed's ready: the writer may write what is shown ahead while the rest decodes */
static void feed_ready(void *arg, uint32_t clip, const uint8_t *data, size_t made, size_t bytes) {
    feed_arg *a = arg;
    vpipe *p = a->p;
    pthread_mutex_lock(&p->mu);
    shown *sh = &p->shown[a->slot];
    sh->seq++;
    sh->clip = clip;
    sh->data = data;
    sh->made = made;
    sh->bytes = bytes;
    pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
}

static int feed_through(void *arg) {
    feed_arg *a = arg;
    pthread_mutex_lock(&a->p->mu);
    int next = a->p->next_write == a->row;
    pthread_mutex_unlock(&a->p->mu);
    return next;
}

static ig_status feed_put(void *arg, const uint8_t *data, size_t len, ig_err *err) {
    feed_arg *a = arg;
    vpipe *p = a->p;
    shown *sh = &p->shown[a->slot];
    pthread_mutex_lock(&p->mu);
    int stop = p->stop;
    if (!stop) {
        sh->chunk[sh->put % IG_VJOB_CHUNKS] = data;
        sh->chunk_len[sh->put % IG_VJOB_CHUNKS] = len;
        sh->put++;
        pthread_cond_broadcast(&p->cv_done);
        /* the next chunk goes into the buffer of IG_VJOB_CHUNKS - 1 chunks before this one */
        while (!p->stop && sh->put - sh->written >= IG_VJOB_CHUNKS)
            pthread_cond_wait(&p->cv_taken, &p->mu);
        stop = p->stop;
    }
    pthread_mutex_unlock(&p->mu);
    return stop ? ig_err_set(err, IG_ERR_CANCELLED, "the run stopped") : IG_OK;
}

static void feed_drain(void *arg) {
    feed_arg *a = arg;
    vpipe *p = a->p;
    shown *sh = &p->shown[a->slot];
    pthread_mutex_lock(&p->mu);
    while (sh->put > sh->written && (!p->stop || sh->writing))
        pthread_cond_wait(&p->cv_taken, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void *feed_alloc(void *arg, size_t bytes) {
    vpipe *p = ((feed_arg *)arg)->p;
    void *b = NULL;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_pool && !b; i++)
        if (p->pool[i].bytes == bytes) {
            b = p->pool[i].buf;
            p->pool[i] = p->pool[--p->n_pool];
        }
    while (!b && p->n_pool > 0 && p->buf_bytes + bytes > p->buf_cap) { /* room for a new one */
        p->buf_bytes -= p->pool[0].bytes;
        free(p->pool[0].buf);
        p->pool[0] = p->pool[--p->n_pool];
    }
    pthread_mutex_unlock(&p->mu);
    if (b) return b;
    if (!(b = malloc(bytes))) return NULL;
    pthread_mutex_lock(&p->mu);
    p->buf_bytes += bytes;
    pthread_mutex_unlock(&p->mu);
    return b;
}

/* A buffer of feed_alloc's back to the pool (or freed). */
static void pool_put(vpipe *p, void *buf, size_t bytes) {
    if (!buf) return;
    pthread_mutex_lock(&p->mu);
    if (p->n_pool < p->ring && p->buf_bytes <= p->buf_cap) {
        p->pool[p->n_pool++] = (struct pooled){buf, bytes};
        buf = NULL;
    } else {
        p->buf_bytes -= bytes;
    }
    pthread_mutex_unlock(&p->mu);
    free(buf);
}

/* Frees a written row, its RGB clip buffers (feed_alloc's) to the pool. */
static void release_job(vpipe *p, ig_vjob *job) {
    for (uint32_t i = 0; job->clips && i < job->n_clips; i++)
        if (job->clips[i].hashed) {
            pool_put(p, job->clips[i].data, job->clips[i].bytes);
            job->clips[i].data = NULL;
        }
    pool_put(p, job->partial, job->partial_bytes);
    job->partial = NULL;
    ig_vjob_clear(job);
}

static void *worker_main(void *arg) {
    vpipe *p = arg;
    ig_err err = {0};
    ig_encoder *enc = NULL;
    if (p->o->tokenizer && !p->o->probe_only &&
        ig_encoder_create(&enc, p->o->tokenizer, &err) != IG_OK) {
        pthread_mutex_lock(&p->mu);
        fail_locked(p, err.status, &err);
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->next_claim < p->n_rows && p->next_claim >= p->next_write + p->ring)
            pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop || p->next_claim >= p->n_rows) break;
        size_t r = p->next_claim++, s = r % p->ring;
        p->state[s] = SLOT_BUSY;
        p->shown[s] = (shown){0};
        pthread_mutex_unlock(&p->mu);
        size_t row = p->rows[r];
        feed_arg fa = {p, s, r};
        ig_vjob_feed feed = {feed_ready, feed_alloc, feed_through, feed_put, feed_drain, &fa};
        ig_status st = ig_vjob_run(p->ctx, p->o, &p->man.entries[row], row, p->dec_threads, enc,
                                   p->o->probe_only ? NULL : &feed, &p->slots[s], &err);
        pthread_mutex_lock(&p->mu);
        if (st != IG_OK) fail_locked(p, st, &err);
        p->state[s] = SLOT_DONE;
        pthread_cond_broadcast(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    ig_encoder_free(enc);
    return NULL;
}

/* ---- the writer ----------------------------------------------------------------------------- */

/* The caption's text as the text shard's next document (its bytes, one an id). */
static ig_status add_text(vpipe *p, const char *text, ig_err *err) {
    size_t n = strlen(text);
    if (n > p->text_cap) {
        int32_t *b = realloc(p->text_ids, n * sizeof *b);
        if (!b) return ig_err_set(err, IG_ERR_NOMEM, "out of memory for a caption of %zu bytes", n);
        p->text_ids = b, p->text_cap = n;
    }
    for (size_t i = 0; i < n; i++) p->text_ids[i] = (unsigned char)text[i];
    return ig_shard_writer_add_document(p->tw, p->text_ids, n, err);
}

/* A used video's caption and clips, kept for the feature stage. */
static ig_status add_run(vpipe *p, const char *text, uint64_t clips, ig_err *err) {
    if (p->n_runs == p->cap_runs) {
        size_t cap = p->cap_runs ? 2 * p->cap_runs : 64;
        struct caption_run *r = realloc(p->runs, cap * sizeof *r);
        if (!r) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        p->runs = r, p->cap_runs = cap;
    }
    if (!(p->runs[p->n_runs].text = strdup(text)))
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    p->runs[p->n_runs++].clips = clips;
    return IG_OK;
}

static ig_status write_row(vpipe *p, const ig_video_entry *e, ig_vjob *job, ig_err *err) {
    ig_video_stats *st = p->st;
    if (p->o->probe_only) {
        fputs(job->info_row, p->rows_out);
        if (job->why == IG_VIDEO_OK)
            st->used++;
        else
            st->skipped++, st->by_reason[job->why]++;
        return IG_OK;
    }
    fprintf(p->rows_out, "%llu,", (unsigned long long)e->line);
    ig_csv_field(p->rows_out, e->path);
    /* (a skipped row's clips, kept for the writer, count for nothing) */
    fprintf(p->rows_out, ",%s,%s,%u,%llu,%.3f,", job->why ? "skipped" : "ok",
            ig_video_reason_str(job->why), job->why ? 0 : job->n_clips,
            (unsigned long long)(job->why ? 0 : job->frames), job->seconds);
    ig_csv_field(p->rows_out, job->why ? job->msg : "");
    fputc('\n', p->rows_out);
    st->decode_seconds += job->seconds;
    if (job->why != IG_VIDEO_OK) {
        /* what was written ahead of a video that failed half-way goes */
        ig_status s = ig_video_shard_writer_drop_ahead(p->w, err);
        if (s != IG_OK) return s;
        st->skipped++;
        st->by_reason[job->why]++;
        if (p->o->strict)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s (manifest line %llu; strict: the first bad "
                              "video stops the run)",
                              job->msg, (unsigned long long)e->line);
        if (ig_ctx_log_level(p->ctx) <= IG_LOG_INFO && st->skipped <= 10)
            ig_warn(p->ctx, "skipped %s", job->msg);
        return IG_OK;
    }
    ig_video_shard_meta *m = &p->meta;
    uint32_t source = (uint32_t)m->n_sources;
    for (uint32_t i = 0; i < job->n_clips; i++) {
        ig_vclip *c = &job->clips[i];
        c->info.source = source;
        c->info.caption = p->cw ? (uint32_t)m->caption_documents : IG_CLIP_NONE;
        c->info.label = e->label;
        ig_status s = c->hashed ? ig_video_shard_writer_add_hashed(p->w, &c->info, c->frames,
                                                                   c->data, c->bytes, c->xxh3, err)
                                : ig_video_shard_writer_add(p->w, &c->info, c->frames, c->data,
                                                            c->bytes, err);
        if (s != IG_OK) return s;
        st->bytes += c->bytes;
    }
    char **ns = realloc(m->sources, (m->n_sources + 1) * sizeof *ns);
    if (!ns || !(ns[m->n_sources] = strdup(e->path))) {
        if (ns) m->sources = ns;
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    m->sources = ns;
    m->n_sources++;
    if (p->cw) {
        ig_status s = ig_shard_writer_add_document(p->cw, job->caption, job->caption_len, err);
        if (s != IG_OK) return s;
        m->caption_documents++;
    }
    ig_status s = add_text(p, e->text, err);
    if (s == IG_OK && p->o->features) s = add_run(p, e->text, job->n_clips, err);
    if (s != IG_OK) return s;
    st->used++;
    st->clips += job->n_clips;
    st->frames += job->frames;
    return IG_OK;
}

/* The row in slot `slot` is next to write: while its worker decodes it, writes what the worker
 * shows of its RGB clips ahead (decoding, converting and writing overlap), clip after clip, until
 * the row is done (or the run stops: then *stopped). A clip whose start the writer did not see
 * (the worker showed the next one first) ends the writing ahead: write_row writes the rest. */
static ig_status write_ahead(vpipe *p, size_t slot, int *stopped, ig_err *err) {
    uint64_t seen = 0;
    uint32_t clip = 0;          /* the clip being written */
    const uint8_t *data = NULL; /* its buffer, once seen */
    size_t done = 0;            /* bytes of it written */
    int on = !p->o->probe_only;
    ig_status s = IG_OK;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        /* (a free slot is not the row's yet: no worker took it) */
        shown *live = &p->shown[slot];
        while (!p->stop &&
               (p->state[slot] == SLOT_FREE ||
                (p->state[slot] == SLOT_BUSY && live->seq == seen && live->put == live->written)))
            pthread_cond_wait(&p->cv_done, &p->mu);
        if (p->stop) break;
        if (live->put > live->written) { /* a chunk of a row that goes straight here */
            const uint8_t *chunk = live->chunk[live->written % IG_VJOB_CHUNKS];
            size_t len = live->chunk_len[live->written % IG_VJOB_CHUNKS];
            live->writing = 1;
            pthread_mutex_unlock(&p->mu);
            s = ig_video_shard_writer_write_ahead(p->w, chunk, len, err);
            pthread_mutex_lock(&p->mu);
            live->writing = 0;
            live->written++;
            pthread_cond_broadcast(&p->cv_taken);
            if (s != IG_OK) break;
            continue;
        }
        if (p->state[slot] == SLOT_DONE) break;
        shown sh = *live;
        seen = sh.seq;
        pthread_mutex_unlock(&p->mu);
        if (on && sh.clip == clip + 1 && data) { /* the rest of the clip before */
            s = ig_video_shard_writer_write_ahead(p->w, data + done, sh.bytes - done, err);
            clip++, data = NULL, done = 0;
        }
        if (on && s == IG_OK && sh.clip == clip) {
            data = sh.data;
            s = ig_video_shard_writer_write_ahead(p->w, data + done, sh.made - done, err);
            done = sh.made;
        } else {
            on = 0;
        }
        pthread_mutex_lock(&p->mu);
        if (s != IG_OK) break;
    }
    *stopped = p->stop;
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void show_progress(vpipe *p, double t0) {
    if (!p->progress) return;
    ig_progress_add(p->progress, 1);
    char extra[128];
    double dt = ig_now() - t0;
    snprintf(extra, sizeof extra, "%llu clips, %.1f frames/s, %llu skipped",
             (unsigned long long)p->st->clips, (double)p->st->frames / (dt > 1e-9 ? dt : 1e-9),
             (unsigned long long)p->st->skipped);
    ig_progress_set_extra(p->progress, extra);
}

static ig_status run_rows(vpipe *p, ig_err *err) {
    ig_status s = IG_OK;
    if (p->o->progress) {
        ig_progress_opts po = ig_progress_opts_default();
        po.label = p->o->probe_only ? "probe" : "preprocess video";
        po.unit = "videos";
        po.total = p->n_rows;
        if ((s = ig_progress_create(&p->progress, &po, err)) != IG_OK) return s;
    }
    pthread_t *th = calloc((size_t)p->n_workers, sizeof *th);
    int started = 0;
    if (!th) s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (; s == IG_OK && started < p->n_workers; started++)
        if (pthread_create(&th[started], NULL, worker_main, p) != 0) {
            s = ig_err_set(err, IG_ERR_IO, "cannot start video worker %d", started);
            break;
        }
    double t0 = ig_now();
    for (size_t r = 0; s == IG_OK && r < p->n_rows; r++) {
        size_t slot = r % p->ring;
        int stopped = 0;
        s = write_ahead(p, slot, &stopped, err);
        if (s != IG_OK) {
            pthread_mutex_lock(&p->mu);
            fail_locked(p, s, err);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        if (stopped) {
            pthread_mutex_lock(&p->mu);
            s = p->fail, *err = p->ferr;
            pthread_mutex_unlock(&p->mu);
            break;
        }
        s = write_row(p, &p->man.entries[p->rows[r]], &p->slots[slot], err);
        release_job(p, &p->slots[slot]);
        pthread_mutex_lock(&p->mu);
        p->state[slot] = SLOT_FREE;
        p->shown[slot] = (shown){0};
        p->next_write++;
        if (s != IG_OK) fail_locked(p, s, err);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
        show_progress(p, t0);
    }
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    for (size_t i = 0; i < p->ring; i++) ig_vjob_clear(&p->slots[i]);
    for (size_t i = 0; i < p->n_pool; i++) free(p->pool[i].buf);
    p->n_pool = 0;
    p->buf_bytes = 0;
    ig_progress_finish(p->progress);
    p->progress = NULL;
    return s;
}

/* ---- setup and the outputs ------------------------------------------------------------------ */

static uint64_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* This rank's rows: by size, largest first to the least loaded rank (as the text pipeline deals
 * files), each rank keeping manifest order. */
static ig_status pick_rows(vpipe *p, ig_err *err) {
    size_t n = p->man.n;
    p->rows = calloc(n, sizeof *p->rows);
    size_t *order = calloc(n, sizeof *order);
    uint64_t *size = calloc(n, sizeof *size), *load = calloc((size_t)p->world, sizeof *load);
    int *owner = calloc(n, sizeof *owner);
    ig_status st = p->rows && order && size && load && owner
                       ? IG_OK
                       : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK && p->world == 1) {
        for (size_t i = 0; i < n; i++) p->rows[i] = i;
        p->n_rows = n;
    } else if (st == IG_OK) {
        for (size_t i = 0; i < n; i++) order[i] = i, size[i] = file_size(p->man.entries[i].path);
        for (size_t i = 1; i < n; i++)
            for (size_t j = i;
                 j > 0 && (size[order[j]] > size[order[j - 1]] ||
                           (size[order[j]] == size[order[j - 1]] && order[j] < order[j - 1]));
                 j--) {
                size_t t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        for (size_t i = 0; i < n; i++) {
            int best = 0;
            for (int r = 1; r < p->world; r++)
                if (load[r] < load[best]) best = r;
            owner[order[i]] = best;
            load[best] += size[order[i]] + 1;
        }
        for (size_t i = 0; i < n; i++)
            if (owner[i] == p->rank) p->rows[p->n_rows++] = i;
    }
    free(order);
    free(size);
    free(load);
    free(owner);
    return st;
}

static ig_status setup(vpipe *p, ig_err *err) {
    ig_status s = ig_video_manifest_read(&p->man, p->o->manifest, err);
    if (s == IG_OK) s = pick_rows(p, err);
    if (s != IG_OK) return s;
    p->st->videos = p->n_rows;
    int threads = ig_ctx_threads(p->ctx);
    p->n_workers = p->o->workers > 0 ? p->o->workers : threads;
    if (p->n_workers > 256) p->n_workers = 256;
    /* the cores go to the videos decoding at once: with fewer rows than workers (one video), a
     * decoder gets the cores of the workers that have no row */
    size_t busy = p->n_rows < (size_t)p->n_workers ? p->n_rows : (size_t)p->n_workers;
    p->dec_threads =
        p->o->decoder_threads > 0 ? p->o->decoder_threads : threads / (int)(busy > 0 ? busy : 1);
    if (p->dec_threads < 1) p->dec_threads = 1;
    p->ring = (size_t)p->n_workers * 2;
    /* the per-video memory limit: by default what this process can take now, shared by the rows
     * that can be in memory at once (one decoding per worker, one more waiting per worker) */
    p->opts = *p->o;
    p->o = &p->opts;
    if (p->opts.max_video_memory == 0) {
        ig_memory_info m;
        ig_memory_query(&m);
        p->opts.max_video_memory = m.usable / p->ring > 0 ? m.usable / p->ring : 1;
    }
    p->st->max_video_memory = p->opts.max_video_memory;
    p->slots = calloc(p->ring, sizeof *p->slots);
    p->state = calloc(p->ring, sizeof *p->state);
    p->shown = calloc(p->ring, sizeof *p->shown);
    p->pool = calloc(p->ring, sizeof *p->pool);
    p->buf_cap = p->opts.max_video_memory * p->ring;
    if (p->buf_cap / p->ring != p->opts.max_video_memory) p->buf_cap = UINT64_MAX;
    if (!p->slots || !p->state || !p->shown || !p->pool || !(p->rows_out = tmpfile()))
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory (or no temporary file)");
    char rank[32] = "";
    if (p->world > 1) snprintf(rank, sizeof rank, "_r%04d", p->rank);
    if (asprintf(&p->base, "%s%s", p->o->output_prefix, rank) < 0)
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    return IG_OK;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Opens this rank's shard writers (after the output was prepared). */
static ig_status open_writers(vpipe *p, ig_err *err) {
    const ig_video_opts *o = p->o;
    ig_video_shard_writer_opts wo = {.zstd = o->zstd_level > 0, .overwrite = 0};
    ig_status s = ig_video_shard_writer_create(&p->w, p->ctx, p->base, &wo, err);
    ig_video_shard_meta *m = &p->meta;
    if (s == IG_OK && o->tokenizer) {
        snprintf(m->captions, sizeof m->captions, "%s.captions", base_name(p->base));
        char *cp = NULL;
        if (asprintf(&cp, "%s.captions", p->base) < 0)
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        ig_shard_writer_opts co = ig_shard_writer_opts_default();
        co.dtype = ig_dtype_for_vocab(ig_tokenizer_vocab_size(o->tokenizer));
        s = ig_shard_writer_create(&p->cw, p->ctx, cp, &co, err);
        free(cp);
    }
    if (s == IG_OK) { /* the captions' text, always */
        snprintf(m->texts, sizeof m->texts, "%s.texts", base_name(p->base));
        char *tp = NULL;
        if (asprintf(&tp, "%s.texts", p->base) < 0)
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        ig_shard_writer_opts to = ig_shard_writer_opts_default();
        to.dtype = IG_DTYPE_U8;
        s = ig_shard_writer_create(&p->tw, p->ctx, tp, &to, err);
        free(tp);
    }
    snprintf(m->output, sizeof m->output, "%s", base_name(o->output_prefix));
    if (o->buckets) {
        size_t nb = ig_video_buckets_count(o->buckets);
        p->buckets = calloc(nb, sizeof *p->buckets);
        if (!p->buckets) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < nb; i++) {
            const ig_video_bucket *b = ig_video_buckets_get(o->buckets, i);
            memcpy(p->buckets[i].name, b->name, sizeof p->buckets[i].name);
            p->buckets[i].frames = b->frames;
            p->buckets[i].height = b->height;
            p->buckets[i].width = b->width;
            p->buckets[i].batch_size = b->batch_size;
        }
        m->buckets = p->buckets;
        m->n_buckets = nb;
    }
    char size[40] = "native", take[40], frames[16] = "bucket";
    if (o->height) snprintf(size, sizeof size, "%ux%u", o->height, o->width);
    if (o->buckets) snprintf(size, sizeof size, "bucket");
    if (!o->buckets) snprintf(frames, sizeof frames, "%u", o->frames);
    if (o->fps > 0)
        snprintf(take, sizeof take, "fps=%g", o->fps);
    else
        snprintf(take, sizeof take, "stride=%u", o->stride);
    snprintf(m->sampling, sizeof m->sampling, "frames=%s %s size=%s clips_per_video=%u seed=%llu",
             frames, take, size, o->clips_per_video, (unsigned long long)o->seed);
    return s;
}

/* The text shard's manifest: bytes of UTF-8, a document per used video. */
static ig_status finish_texts(vpipe *p, ig_manifest *out, ig_err *err) {
    ig_manifest meta = {0};
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "utf-8");
    meta.vocab_size = 256;
    meta.eod_id = -1;
    snprintf(meta.json_key, sizeof meta.json_key, "text");
    snprintf(meta.output, sizeof meta.output, "%s", p->meta.output);
    snprintf(meta.tool_version, sizeof meta.tool_version, "ingot %s", IG_VERSION_STRING);
    ig_status s = ig_manifest_add_source(&meta, p->o->manifest, err);
    if (s == IG_OK) s = ig_shard_writer_finish_data(p->tw, &meta, out, err);
    p->tw = NULL;
    ig_manifest_clear(&meta);
    return s;
}

/* Finishes this rank's shard: data files, then the caption shards' manifests, then the frame
 * shard's (last: a manifest never describes missing data). */
static ig_status finish_shard(vpipe *p, ig_err *err) {
    ig_manifest cap = {0}, texts = {0};
    ig_video_shard_meta done = {0};
    ig_status s = IG_OK;
    if (p->cw) {
        ig_manifest meta = {0};
        snprintf(meta.tokenizer, sizeof meta.tokenizer, "%s", ig_tokenizer_name(p->o->tokenizer));
        if (p->o->tokenizer_path)
            snprintf(meta.tokenizer_path, sizeof meta.tokenizer_path, "%s", p->o->tokenizer_path);
        meta.tokenizer_hash = ig_tokenizer_hash(p->o->tokenizer);
        meta.vocab_size = ig_tokenizer_vocab_size(p->o->tokenizer);
        meta.eod_id = ig_tokenizer_eod(p->o->tokenizer);
        snprintf(meta.json_key, sizeof meta.json_key, "text");
        snprintf(meta.output, sizeof meta.output, "%s", p->meta.output);
        snprintf(meta.tool_version, sizeof meta.tool_version, "ingot %s", IG_VERSION_STRING);
        s = ig_manifest_add_source(&meta, p->o->manifest, err);
        if (s == IG_OK) s = ig_shard_writer_finish_data(p->cw, &meta, &cap, err);
        p->cw = NULL;
        ig_manifest_clear(&meta);
    }
    if (s == IG_OK && p->tw) s = finish_texts(p, &texts, err);
    if (s == IG_OK) s = ig_video_shard_writer_finish(p->w, &p->meta, &done, err);
    p->w = NULL;
    char *cp = NULL;
    if (s == IG_OK && p->meta.captions[0]) {
        if (asprintf(&cp, "%s.captions", p->base) < 0) cp = NULL;
        s = cp ? ig_manifest_write(&cap, cp, 0, err) : ig_err_set(err, IG_ERR_NOMEM, "no memory");
    }
    free(cp);
    cp = NULL;
    if (s == IG_OK && p->meta.texts[0]) {
        if (asprintf(&cp, "%s.texts", p->base) < 0) cp = NULL;
        s = cp ? ig_manifest_write(&texts, cp, 0, err) : ig_err_set(err, IG_ERR_NOMEM, "no memory");
    }
    free(cp);
    if (s == IG_OK) s = ig_video_shard_meta_write(&done, p->base, 0, err);
    ig_manifest_clear(&cap);
    ig_manifest_clear(&texts);
    ig_video_shard_meta_clear(&done);
    if (s == IG_OK) {
        p->st->shard_prefixes = calloc(1, sizeof *p->st->shard_prefixes);
        if (!p->st->shard_prefixes) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        p->st->shard_prefixes[0] = p->base;
        p->st->n_shard_prefixes = 1;
        p->base = NULL;
    }
    return s;
}

/* The rows this rank wrote, read back from the spill. */
static ig_status rows_text(vpipe *p, char **out, size_t *len, ig_err *err) {
    long n = ftell(p->rows_out);
    *out = malloc(n > 0 ? (size_t)n + 1 : 1);
    *len = 0;
    if (!*out) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (n > 0 && (fseek(p->rows_out, 0, SEEK_SET) != 0 ||
                  fread(*out, 1, (size_t)n, p->rows_out) != (size_t)n))
        return ig_err_errno(err, errno, "reading back the report rows");
    *len = n > 0 ? (size_t)n : 0;
    return IG_OK;
}

/* Writes OUT.report.csv (or OUT.info.csv) from all ranks' rows (rank 0; collective). */
static ig_status write_rows(vpipe *p, int ok, ig_err *err) {
    char *mine = NULL, *all = NULL;
    size_t len = 0, all_len = 0;
    ig_status s = ok ? rows_text(p, &mine, &len, err) : IG_OK;
    if (s != IG_OK) len = 0;
    if (p->world > 1) {
        ig_err cerr = {0};
        void *got = NULL;
        ig_status cs = ig_comm_gather_bytes(p->o->comm, mine, len, 0, &got, &all_len, NULL, &cerr);
        all = got;
        if (s == IG_OK && cs != IG_OK) s = cs, *err = cerr;
    } else {
        all = mine, all_len = len, mine = NULL;
    }
    if (s == IG_OK && ok && p->rank == 0) {
        char *path = NULL;
        if (asprintf(&path, "%s%s", p->o->output_prefix,
                     p->o->probe_only ? ".info.csv" : ".report.csv") < 0)
            path = NULL;
        ig_atomic_file *af = NULL;
        s = path ? ig_atomic_file_create(&af, path, p->o->overwrite, err)
                 : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        if (s == IG_ERR_EXISTS) ig_err_fix(err, "overwrite", NULL);
        const char *hdr = p->o->probe_only ? ig_vjob_info_header : report_header;
        if (s == IG_OK) s = ig_atomic_file_write(af, hdr, strlen(hdr), err);
        if (s == IG_OK) s = ig_atomic_file_write(af, all, all_len, err);
        if (s == IG_OK)
            s = ig_atomic_file_commit(af, err);
        else
            ig_atomic_file_abort(af);
        free(path);
    }
    free(mine);
    free(all);
    return s;
}

/* The features of this rank's clips (status: how the rank's run went so far; with several ranks
 * a collective, called whatever it is): the clip data is the output - every rank's shard in rank
 * order - so its key and this rank's first clip come from every rank's manifest. */
static ig_status write_features(vpipe *p, ig_status status, ig_err *err) {
    const ig_video_opts *o = p->o;
    ig_video_shard_meta m = {0};
    ig_status s = status;
    if (s == IG_OK && p->st->n_shard_prefixes == 1)
        s = ig_video_shard_meta_read(&m, p->st->shard_prefixes[0], err);
    uint64_t mine[4] = {m.clips, m.frames_xxh3, m.clips_xxh3, s == IG_OK}, one[4];
    uint64_t *all = p->world > 1 ? calloc((size_t)p->world * 4, sizeof *all) : one;
    ig_err cerr = {0};
    ig_status cs = all ? IG_OK : ig_err_set(&cerr, IG_ERR_NOMEM, "out of memory");
    if (p->world > 1 && all)
        cs = ig_comm_allgather(o->comm, mine, all, 4, IG_COMM_U64, &cerr);
    else
        memcpy(one, mine, sizeof one);
    if (s == IG_OK && cs != IG_OK) s = cs, *err = cerr;
    uint64_t key = 0, first = 0, total = 0;
    for (int r = 0; s == IG_OK && r < p->world; r++) {
        if (!all[4 * r + 3]) {
            s = ig_err_set(err, IG_ERR_CANCELLED, "another rank failed; see its message");
            break;
        }
        ig_video_shard_meta rm = {
            .clips = all[4 * r], .frames_xxh3 = all[4 * r + 1], .clips_xxh3 = all[4 * r + 2]};
        key = ig_clip_key_next(key, &rm);
        if (r < p->rank) first += rm.clips;
        total += rm.clips;
    }
    if (all != one) free(all);
    ig_video_shard_meta_clear(&m);
    char *prefix = NULL;
    if (s == IG_OK && asprintf(&prefix, "%s.features", p->st->shard_prefixes[0]) < 0)
        s = ig_err_set(err, IG_ERR_NOMEM, "out of memory"), prefix = NULL;
    ig_feature_stage *fs = NULL;
    ig_progress *progress = NULL;
    if (s == IG_OK)
        s = ig_feature_stage_create(&fs, p->ctx, o->features, prefix, first, total, key, err);
    if (s == IG_OK && o->progress) {
        ig_progress_opts po = ig_progress_opts_default();
        po.label = "caption features";
        po.unit = "videos";
        po.total = p->n_runs;
        s = ig_progress_create(&progress, &po, err);
    }
    for (size_t i = 0; s == IG_OK && i < p->n_runs; i++) {
        char what[300];
        snprintf(what, sizeof what, "video %zu of %s", i, p->st->shard_prefixes[0]);
        s = ig_feature_stage_add(fs, p->runs[i].text, strlen(p->runs[i].text), p->runs[i].clips,
                                 what, err);
        ig_progress_add(progress, 1);
    }
    ig_captions_stats cst = {0};
    const char *src = o->output_prefix;
    if (s == IG_OK)
        s = ig_feature_stage_finish(fs, &src, 1, base_name(o->output_prefix), &cst, err);
    p->st->captions_encoded = cst.encoded;
    p->st->captions_cut = cst.cut;
    ig_progress_finish(progress);
    ig_feature_stage_free(fs);
    free(prefix);
    return s;
}

/* Rank 0: the list of every rank's features, OUT.features.shards.json. */
static ig_status write_feature_list(vpipe *p, ig_err *err) {
    char **names = calloc((size_t)p->world, sizeof *names), *list = NULL;
    ig_status s = names ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (int r = 0; s == IG_OK && r < p->world; r++)
        if (asprintf(&names[r], "%s_r%04d.features", p->o->output_prefix, r) < 0)
            s = ig_err_set(err, IG_ERR_NOMEM, "out of memory"), names[r] = NULL;
    if (s == IG_OK && asprintf(&list, "%s.features", p->o->output_prefix) < 0)
        s = ig_err_set(err, IG_ERR_NOMEM, "out of memory"), list = NULL;
    if (s == IG_OK)
        s = ig_feature_list_write(list, (const char *const *)names, (size_t)p->world, 0, err);
    for (int r = 0; names && r < p->world; r++) free(names[r]);
    free(names);
    free(list);
    return s;
}

static void pipe_free(vpipe *p) {
    ig_video_shard_writer_abort(p->w);
    ig_shard_writer_abort(p->cw);
    ig_shard_writer_abort(p->tw);
    free(p->text_ids);
    for (size_t i = 0; i < p->n_runs; i++) free(p->runs[i].text);
    free(p->runs);
    p->meta.buckets = NULL; /* p->buckets */
    p->meta.n_buckets = 0;
    ig_video_shard_meta_clear(&p->meta);
    free(p->buckets);
    free(p->base);
    free(p->slots);
    free(p->state);
    free(p->shown);
    free(p->pool);
    free(p->rows);
    if (p->rows_out) fclose(p->rows_out);
    ig_video_manifest_clear(&p->man);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_cond_destroy(&p->cv_taken);
}

/* Probing only: OUT.info.csv, one atomic file (no shards, no run marker). */
static ig_status run_probe(vpipe *p, ig_err *err) {
    ig_status s = run_rows(p, err);
    int ok = s == IG_OK, all_ok = ok;
    if (p->world > 1) {
        ig_err cerr = {0};
        ig_status cs = ig_comm_all_ok(p->o->comm, ok, &all_ok, &cerr);
        if (s == IG_OK && cs != IG_OK) s = cs, *err = cerr;
    }
    ig_err werr = {0};
    ig_status ws = write_rows(p, s == IG_OK && all_ok, s == IG_OK ? err : &werr);
    if (s == IG_OK && !all_ok)
        s = ig_err_set(err, IG_ERR_CANCELLED, "another rank failed; see its message");
    return s == IG_OK ? ws : s;
}

ig_status ig_preprocess_video(ig_ctx *ctx, const ig_video_opts *opts, ig_video_stats *stats,
                              ig_err *err) {
    ig_video_log_setup();
    ig_video_stats local;
    ig_video_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    ig_status s = check_opts(opts, err);
    if (s != IG_OK) return s;
    double t0 = ig_now();
    vpipe p = {.ctx = ctx, .o = opts, .st = st, .rank = 0, .world = 1};
    if (opts->comm) {
        p.rank = ig_comm_rank(opts->comm);
        p.world = ig_comm_size(opts->comm);
    }
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv_work, NULL);
    pthread_cond_init(&p.cv_done, NULL);
    pthread_cond_init(&p.cv_taken, NULL);
    static const char *const no_keys[] = {""};
    p.spec = (ig_output_spec){.prefix = opts->output_prefix,
                              .keys = no_keys,
                              .n_keys = 1,
                              .data_exts = video_data_exts,
                              .overwrite = opts->overwrite,
                              .write_list = ig_video_list_write,
                              .remove_shard = ig_video_shard_remove};
    int multi = p.world > 1;
    s = setup(&p, err);
    if (multi) { /* nothing of the output is touched before every rank read the manifest */
        int all_ok = 0;
        ig_err cerr = {0};
        ig_status cs = ig_comm_all_ok(opts->comm, s == IG_OK, &all_ok, &cerr);
        if (s == IG_OK && cs != IG_OK) s = cs, *err = cerr;
        if (s == IG_OK && !all_ok)
            s = ig_err_set(err, IG_ERR_CANCELLED, "another rank failed; see its message");
    }
    if (s == IG_OK && opts->probe_only) {
        s = run_probe(&p, err);
    } else if (s == IG_OK && multi) {
        s = ig_output_prepare_ranks(ctx, opts->comm, &p.spec, err);
        if (s == IG_OK) {
            s = open_writers(&p, err);
            if (s == IG_OK) s = run_rows(&p, err);
            if (s == IG_OK) s = finish_shard(&p, err);
            if (opts->features) s = write_features(&p, s, err);
            /* the report goes before the commit: rank 0 writes every rank's rows */
            int ok = s == IG_OK, all_ok = 0;
            ig_err cerr = {0}, lerr = {0};
            ig_status cs = ig_comm_all_ok(opts->comm, ok, &all_ok, &cerr);
            if (s == IG_OK && cs != IG_OK) s = cs, *err = cerr;
            ig_status rs = write_rows(&p, all_ok && cs == IG_OK, s == IG_OK ? err : &lerr);
            if (s == IG_OK) s = rs;
            if (s == IG_OK && opts->features && p.rank == 0) s = write_feature_list(&p, err);
            if (s != IG_OK)
                for (size_t i = 0; i < st->n_shard_prefixes; i++)
                    ig_video_shard_remove(st->shard_prefixes[i]);
            ig_status ls = ig_output_commit_ranks(ctx, opts->comm, &p.spec, s == IG_OK,
                                                  (const char *const *)st->shard_prefixes,
                                                  st->n_shard_prefixes, s == IG_OK ? err : &lerr);
            if (s == IG_OK) s = ls;
            if (s != IG_OK && p.rank == 0) {
                char *rp = NULL;
                if (asprintf(&rp, "%s.report.csv", opts->output_prefix) >= 0) remove(rp);
                free(rp);
                char *lp = NULL; /* the features' list (rank 0 wrote it before the commit) */
                if (asprintf(&lp, "%s.features.shards.json", opts->output_prefix) >= 0) {
                    remove(lp);
                    free(lp);
                }
            }
        }
    } else if (s == IG_OK) {
        s = ig_output_prepare(ctx, &p.spec, err);
        if (s == IG_OK) {
            s = open_writers(&p, err);
            if (s == IG_OK) s = run_rows(&p, err);
            if (s == IG_OK) s = write_rows(&p, 1, err);
            if (s == IG_OK) s = finish_shard(&p, err);
            if (s == IG_OK && opts->features) s = write_features(&p, s, err);
            /* the one commit point: the marker goes once everything above is in place */
            if (s == IG_OK) s = ig_output_commit(&p.spec, err);
            if (s != IG_OK) ig_output_discard(ctx, &p.spec);
        }
    }
    pipe_free(&p);
    st->seconds = ig_now() - t0;
    return s;
}
