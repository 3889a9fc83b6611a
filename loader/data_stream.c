/* data_stream.c - shard prefixes, weights, seq_len, samples, seed and split (Megatron's data
 * arguments) as an infinite stream of sample blocks for the loader.
 *
 * Block 0 is exactly what Megatron-Core builds: a GPTDataset when one prefix is given alone, else a
 * BlendedDataset over one GPTDataset per prefix (dataset/: ig_gpt_index, ig_blend). Block b >= 1
 * is the same construction with the seed ig_data_block_seed(seed, b), so every block is a fresh
 * shuffle of the same data (its epochs), and the order depends only on the inputs and b: any rank
 * that needs block b builds the same one (with a cache directory, one builds and the others map
 * it). The shards are opened once and shared by every block.
 */
#include "loader/loader.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define IG_LITTLE_ENDIAN 1
#else
#define IG_LITTLE_ENDIAN 0
#endif

struct ig_data_stream {
    ig_ctx *ctx;
    ig_data_opts o;    /* prefixes, weights and cache_dir point at the copies below */
    char **prefixes;   /* [n] */
    double *weights;   /* [n] or NULL */
    char *cache_dir;   /* or NULL */
    ig_dataset **ds;   /* [n] */
    ig_blend *blend;   /* block 0, when weighted */
    ig_gpt_index *idx; /* block 0, when one prefix alone */
    uint64_t key;
    int *fast; /* [n]: source k is one little-endian u16/i32 shard, read by plan_sample */
};

typedef struct block_src {
    const ig_data_stream *st;
    ig_blend *blend;
    ig_gpt_index *idx;
    int owned; /* 1: blend/idx belong to this block (b >= 1) */
} block_src;

ig_data_opts ig_data_opts_default(void) {
    return (ig_data_opts){
        .seed = 1234, .split = ig_split_default(), .part = IG_SPLIT_TRAIN, .surplus = 0.005};
}

uint32_t ig_data_block_seed(uint32_t seed, uint64_t block) {
    if (block == 0) return seed;
    uint64_t in[3] = {0x696e676f74626c6bull /* "ingotblk" */, seed, block};
    return (uint32_t)(ig_xxh3_64(in, sizeof in) >> 32);
}

/* ---- parsing the data path list ----------------------------------------------------------------
 */

static int parse_weight(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

ig_status ig_data_parse_paths(char *const *args, size_t n, const char **prefixes, double *weights,
                              size_t *n_sources, int *weighted, ig_err *err) {
    *n_sources = 0;
    *weighted = 0;
    if (n == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "no data: give a shard prefix, or weights and prefixes W1 P1 W2 P2 ...");
    if (n == 1) {
        double w;
        if (parse_weight(args[0], &w))
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "'%s' looks like a weight, but no prefix follows it", args[0]);
        if (!*args[0])
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "the data argument is empty: expected a shard prefix");
        prefixes[0] = args[0];
        *n_sources = 1;
        return IG_OK;
    }
    if (n % 2)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%zu data arguments: expected one prefix alone, or pairs W1 P1 W2 P2 "
                          "... (a weight before each prefix)",
                          n);
    for (size_t i = 1; i < n; i += 2)
        if (!*args[i])
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "data argument %zu is empty: expected a shard prefix", i + 1);
    for (size_t i = 0; i < n; i += 2) {
        if (!parse_weight(args[i], &weights[i / 2]))
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "'%s' (data argument %zu) is not a weight: expected W1 P1 W2 P2 ... "
                              "with a number before each prefix",
                              args[i], i + 1);
        if (weights[i / 2] <= 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "the weight of %s is %s: weights must be > 0", args[i + 1], args[i]);
        prefixes[i / 2] = args[i + 1];
    }
    *n_sources = n / 2;
    *weighted = 1;
    return IG_OK;
}

/* ---- building a block
 * ---------------------------------------------------------------------------- */

/* Builds a block's index with the given seed; block 0 (first) also warns about the data's shape
 * (sources repeated for several epochs), which every later block shares. */
static ig_status build(const ig_data_stream *st, uint32_t seed, int first, ig_blend **blend,
                       ig_gpt_index **idx, ig_err *err) {
    *blend = NULL;
    *idx = NULL;
    const ig_data_opts *o = &st->o;
    if (!st->weights) {
        ig_gpt_index_opts io = ig_gpt_index_opts_default();
        io.seq_len = o->seq_len;
        io.num_samples = o->num_samples;
        io.seed = seed;
        io.cache_dir = o->cache_dir;
        io.name = o->prefixes[0];
        uint64_t begin, end;
        ig_status s =
            ig_split_range(&o->split, o->part, ig_dataset_sequences(st->ds[0]), &begin, &end, err);
        if (s != IG_OK) return ig_err_prefix(err, s, "%s", o->prefixes[0]);
        io.seq_begin = begin;
        io.seq_end = end;
        return ig_gpt_index_build_dataset(idx, st->ctx, st->ds[0], &io, err); /* names it */
    }
    ig_blend_source *src = ig_calloc(st->ctx, o->n, sizeof *src);
    if (!src) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < o->n; k++)
        src[k] = (ig_blend_source){
            .weight = o->weights[k], .dataset = st->ds[k], .name = o->prefixes[k]};
    ig_blend_opts bo = ig_blend_opts_default();
    bo.seq_len = o->seq_len;
    bo.num_samples = o->num_samples;
    bo.seed = seed;
    bo.split = o->split;
    bo.part = o->part;
    bo.surplus = o->surplus;
    bo.cache_dir = o->cache_dir;
    bo.quiet = !first;
    ig_status s = ig_blend_build(blend, st->ctx, src, o->n, &bo, err);
    ig_free(st->ctx, src);
    return s;
}

static uint64_t bs_num(void *self) {
    block_src *b = self;
    return b->blend ? ig_blend_num_samples(b->blend) : ig_gpt_index_num_samples(b->idx);
}

/* ---- reading samples --------------------------------------------------------------------------
 *
 * The fast path resolves a sample to the runs of the mapped .bin it is made of (a plan) and
 * converts them to int32. Where the time goes: the conversion itself runs near memcpy speed, but
 * a sample is one to three runs at random places of a shard much larger than the caches, and the
 * hardware prefetcher learns each run anew (and stops at every 4 KiB page). So when the loader
 * asks for several consecutive samples (get_rows), the next sample is planned before the current
 * one is copied, and its cache lines are prefetched one per line copied: the next sample arrives
 * while this one is converted (about twice the throughput of one thread). */

#define MAX_SPANS 64

typedef struct sample_plan {
    int fast;                    /* 0: read through ig_gpt_index_read (idx, ds, i) */
    int is16;                    /* u16 tokens, else int32 */
    size_t runs;                 /* runs of the .bin, in order */
    const uint8_t *p[MAX_SPANS]; /* [runs] first byte of each run */
    uint64_t bytes[MAX_SPANS];   /* [runs] bytes of each run */
    const ig_gpt_index *idx;     /* the slow path's arguments */
    const ig_dataset *ds;
    uint64_t i;
} sample_plan;

/* Plans sample i of source k's GPT index: its spans when the source is one little-endian u16/i32
 * shard (fast[k]) and the sample has at most MAX_SPANS of them, else the slow path. Spans are
 * checked against the shard, so a wrong index cannot read out of bounds. */
static ig_status plan_sample(const ig_data_stream *st, size_t k, const ig_gpt_index *idx,
                             uint64_t i, sample_plan *pl, ig_err *err) {
    ig_token_span spans[MAX_SPANS];
    size_t n = st->fast[k] ? ig_gpt_index_sample(idx, i, spans, MAX_SPANS) : MAX_SPANS + 1;
    pl->idx = idx;
    pl->ds = st->ds[k];
    pl->i = i;
    pl->runs = 0;
    pl->fast = n <= MAX_SPANS;
    if (!pl->fast) return IG_OK;
    const ig_shard *sh = ig_dataset_shard(st->ds[k], 0);
    const uint8_t *bin = ig_shard_bin(sh);
    pl->is16 = ig_shard_dtype(sh) == IG_DTYPE_U16;
    const uint64_t width = pl->is16 ? 2 : 4;
    uint64_t seqs = ig_shard_sequences(sh), o = 0, want = (uint64_t)st->o.seq_len + 1;
    for (size_t j = 0; j < n; j++) {
        const ig_token_span *sp = &spans[j];
        uint64_t len = sp->seq < seqs ? (uint64_t)ig_shard_seq_length(sh, sp->seq) : 0;
        if (sp->seq >= seqs || sp->offset > len || sp->length > len - sp->offset ||
            sp->length > want - o)
            return ig_err_set(err, IG_ERR_INTERNAL,
                              "%s: sample %llu of the GPT index points outside the shard "
                              "(sequence %llu, tokens %llu + %llu)",
                              ig_shard_prefix(sh), (unsigned long long)i,
                              (unsigned long long)sp->seq, (unsigned long long)sp->offset,
                              (unsigned long long)sp->length);
        pl->p[j] = bin + ig_shard_seq_pointer(sh, sp->seq) + width * sp->offset;
        pl->bytes[j] = width * sp->length;
        o += sp->length;
    }
    pl->runs = n;
    if (o != want)
        return ig_err_set(err, IG_ERR_INTERNAL,
                          "%s: sample %llu of the GPT index has %llu tokens, expected %llu",
                          ig_shard_prefix(sh), (unsigned long long)i, (unsigned long long)o,
                          (unsigned long long)want);
    return IG_OK;
}

/* Plans sample i of a block (its blend's source and sample, or its one GPT index). */
static ig_status plan_block_sample(const block_src *b, uint64_t i, sample_plan *pl, ig_err *err) {
    if (!b->blend) return plan_sample(b->st, 0, b->idx, i, pl, err);
    if (i >= ig_blend_num_samples(b->blend))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "blend sample %llu is out of range (%llu)",
                          (unsigned long long)i,
                          (unsigned long long)ig_blend_num_samples(b->blend));
    uint32_t src;
    uint64_t j;
    ig_blend_lookup(b->blend, i, &src, &j);
    return plan_sample(b->st, src, ig_blend_source_index(b->blend, src), j, pl, err);
}

/* The cache lines of a plan, one at a time (a cursor for prefetching it). */
typedef struct line_cursor {
    const sample_plan *pl; /* NULL: nothing to prefetch */
    size_t run;
    const uint8_t *at, *end; /* the next line of run `run` and the end of the run */
} line_cursor;

enum { LINE = 64 };

static void cursor_start_run(line_cursor *c) {
    while (c->pl && c->run < c->pl->runs && c->pl->bytes[c->run] == 0) c->run++;
    if (!c->pl || c->run >= c->pl->runs) {
        c->pl = NULL;
        return;
    }
    const uint8_t *p = c->pl->p[c->run];
    c->at = p - ((uintptr_t)p % LINE);
    c->end = p + c->pl->bytes[c->run];
}

static void cursor_init(line_cursor *c, const sample_plan *next) {
    *c = (line_cursor){.pl = next && next->fast ? next : NULL};
    cursor_start_run(c);
}

/* Prefetches the next line of the cursor's plan (for reading, into all cache levels). */
static inline void cursor_prefetch(line_cursor *c) {
    if (!c->pl) return;
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(c->at, 0, 3);
#endif
    c->at += LINE;
    if (c->at >= c->end) {
        c->run++;
        cursor_start_run(c);
    }
}

/* Little-endian u16 tokens to int32: the hot loop of the loader. SSE2 (the x86-64 baseline)
 * widens 8 tokens per instruction pair; elsewhere GCC/Clang vector extensions, else plain C. */
#if defined(__SSE2__)
static inline void widen_u16(int32_t *restrict out, const uint8_t *restrict p, uint64_t n) {
    const __m128i zero = _mm_setzero_si128();
    for (uint64_t k = n / 8; k > 0; k--, p += 16, out += 8) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        _mm_storeu_si128((__m128i *)(void *)out, _mm_unpacklo_epi16(v, zero));
        _mm_storeu_si128((__m128i *)(void *)(out + 4), _mm_unpackhi_epi16(v, zero));
    }
    for (uint64_t k = n % 8; k > 0; k--, p += 2, out++) {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
    }
}
#elif defined(__GNUC__) || defined(__clang__)
typedef uint16_t u16x4 __attribute__((vector_size(8)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
static inline void widen_u16(int32_t *restrict out, const uint8_t *restrict p, uint64_t n) {
    for (uint64_t k = n / 4; k > 0; k--, p += 8, out += 4) {
        u16x4 v;
        memcpy(&v, p, sizeof v);
        i32x4 w = __builtin_convertvector(v, i32x4);
        memcpy(out, &w, sizeof w);
    }
    for (uint64_t k = n % 4; k > 0; k--, p += 2, out++) {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
    }
}
#else
static void widen_u16(int32_t *restrict out, const uint8_t *restrict p, uint64_t n) {
    for (uint64_t k = n; k > 0; k--, p += 2, out++) {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
    }
}
#endif

/* Writes a planned sample to out, prefetching `next` (may be NULL) along the way: one line of it
 * per line read. */
static ig_status copy_plan(const sample_plan *pl, const sample_plan *next, int32_t *out,
                           ig_err *err) {
    if (!pl->fast) return ig_gpt_index_read(pl->idx, pl->ds, pl->i, out, err);
    line_cursor c;
    cursor_init(&c, next);
    for (size_t r = 0; r < pl->runs; r++) {
        const uint8_t *p = pl->p[r];
        uint64_t bytes = pl->bytes[r], b = 0;
        for (; b + LINE <= bytes; b += LINE) {
            cursor_prefetch(&c);
            if (pl->is16)
                widen_u16(out, p + b, LINE / 2);
            else
                memcpy(out, p + b, LINE);
            out += pl->is16 ? LINE / 2 : LINE / 4;
        }
        if (pl->is16)
            widen_u16(out, p + b, (bytes - b) / 2);
        else
            memcpy(out, p + b, bytes - b);
        out += pl->is16 ? (bytes - b) / 2 : (bytes - b) / 4;
    }
    while (c.pl) cursor_prefetch(&c); /* the rest, when the next sample has more lines */
    return IG_OK;
}

static ig_status bs_get(void *self, uint64_t i, int32_t *out, ig_err *err) {
    sample_plan pl;
    ig_status s = plan_block_sample(self, i, &pl, err);
    return s != IG_OK ? s : copy_plan(&pl, NULL, out, err);
}

/* Samples i .. i + n - 1 to consecutive rows, each planned (and prefetched) while the one before
 * it is copied. */
static ig_status bs_get_rows(void *self, uint64_t i, uint32_t n, int32_t *out, ig_err *err) {
    const block_src *b = self;
    const size_t row = (size_t)b->st->o.seq_len + 1;
    sample_plan plans[2];
    if (n == 0) return IG_OK;
    ig_status s = plan_block_sample(b, i, &plans[0], err);
    for (uint32_t t = 0; t < n && s == IG_OK; t++) {
        sample_plan *cur = &plans[t % 2], *next = NULL;
        if (t + 1 < n) {
            next = &plans[(t + 1) % 2];
            s = plan_block_sample(b, i + t + 1, next, err);
            if (s != IG_OK) return s;
        }
        s = copy_plan(cur, next, out + (size_t)t * row, err);
    }
    return s;
}

static void bs_free(void *self) {
    block_src *b = self;
    if (!b) return;
    ig_ctx *ctx = b->st->ctx;
    if (b->owned) {
        ig_blend_free(b->blend);
        ig_gpt_index_free(b->idx);
    }
    ig_free(ctx, b);
}

ig_status ig_data_stream_make_block(void *stream, uint64_t block, ig_sample_source *out,
                                    ig_err *err) {
    const ig_data_stream *st = stream;
    block_src *b = ig_calloc(st->ctx, 1, sizeof *b);
    if (!b) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    b->st = st;
    if (block == 0) {
        b->blend = st->blend;
        b->idx = st->idx;
    } else {
        uint32_t seed = ig_data_block_seed(st->o.seed, block);
        ig_debug(st->ctx, "building block %llu of the sample stream (seed %u)",
                 (unsigned long long)block, seed);
        ig_status s = build(st, seed, 0, &b->blend, &b->idx, err);
        if (s != IG_OK) {
            ig_free(st->ctx, b);
            return s;
        }
        b->owned = 1;
    }
    *out = (ig_sample_source){.num_samples = bs_num,
                              .get = bs_get,
                              .get_rows = bs_get_rows,
                              .free = bs_free,
                              .self = b,
                              .seq_len = st->o.seq_len,
                              .key = b->blend ? ig_blend_key(b->blend) : ig_gpt_index_key(b->idx)};
    return IG_OK;
}

/* ---- open / close
 * -------------------------------------------------------------------------------- */

/* Shards made with different tokenizers (by their manifests) do not blend, unless asked. */
static ig_status check_tokenizers(const ig_data_stream *st, ig_err *err) {
    const char *first = NULL, *first_prefix = NULL;
    uint64_t first_hash = 0;
    for (size_t k = 0; k < st->o.n; k++)
        for (size_t j = 0; j < ig_dataset_num_shards(st->ds[k]); j++) {
            const char *tok = NULL;
            uint64_t hash = 0;
            if (!ig_dataset_shard_tokenizer(st->ds[k], j, &tok, &hash) || (!tok[0] && !hash))
                continue;
            const char *prefix = ig_dataset_shard_prefix(st->ds[k], j);
            if (!first) {
                first = tok;
                first_hash = hash;
                first_prefix = prefix;
                continue;
            }
            if (strcmp(tok, first) != 0 || hash != first_hash) {
                ig_err_set(err, IG_ERR_INVALID_ARG,
                           "%s was made with tokenizer '%s' (hash %016llx) but %s with '%s' "
                           "(hash %016llx): their token ids do not mean the same; re-tokenize, or "
                           "allow mixed tokenizers if this is intended",
                           prefix, tok, (unsigned long long)hash, first_prefix, first,
                           (unsigned long long)first_hash);
                return ig_err_fix(err, "allow_mixed", NULL);
            }
        }
    return IG_OK;
}

void ig_data_stream_close(ig_data_stream *st) {
    if (!st) return;
    ig_blend_free(st->blend);
    ig_gpt_index_free(st->idx);
    if (st->ds)
        for (size_t k = 0; k < st->o.n; k++) ig_dataset_close(st->ds[k]);
    if (st->prefixes)
        for (size_t k = 0; k < st->o.n; k++) ig_free(st->ctx, st->prefixes[k]);
    ig_free(st->ctx, st->ds);
    ig_free(st->ctx, st->fast);
    ig_free(st->ctx, st->prefixes);
    ig_free(st->ctx, st->weights);
    ig_free(st->ctx, st->cache_dir);
    ig_free(st->ctx, st);
}

ig_status ig_data_stream_open(ig_data_stream **out, ig_ctx *ctx, const ig_data_opts *opts,
                              ig_err *err) {
    *out = NULL;
    if (!opts || opts->n == 0 || !opts->prefixes)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "no data: give at least one shard prefix");
    if (!opts->weights && opts->n != 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%zu prefixes without weights: give W1 P1 W2 P2 ... (one prefix may "
                          "stand alone)",
                          opts->n);
    if (opts->seq_len < 1 || opts->num_samples < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "seq_len (%u) and samples (%llu) must be >= 1",
                          opts->seq_len, (unsigned long long)opts->num_samples);
    ig_data_stream *st = ig_calloc(ctx, 1, sizeof *st);
    if (!st) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    st->ctx = ctx;
    st->o = *opts;
    size_t n = opts->n;
    st->o.n = 0; /* counts what close must free */
    st->prefixes = ig_calloc(ctx, n, sizeof *st->prefixes);
    st->ds = ig_calloc(ctx, n, sizeof *st->ds);
    st->fast = ig_calloc(ctx, n, sizeof *st->fast);
    if (opts->weights) st->weights = ig_calloc(ctx, n, sizeof *st->weights);
    if (opts->cache_dir) st->cache_dir = ig_strdup(ctx, opts->cache_dir);
    if (!st->prefixes || !st->ds || !st->fast || (opts->weights && !st->weights) ||
        (opts->cache_dir && !st->cache_dir)) {
        ig_data_stream_close(st);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    ig_status s = IG_OK;
    for (size_t k = 0; k < n && s == IG_OK; k++) {
        st->o.n = k + 1;
        st->prefixes[k] = ig_strdup(ctx, opts->prefixes[k]);
        if (!st->prefixes[k]) {
            s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            break;
        }
        if (opts->weights) st->weights[k] = opts->weights[k];
        const char *p = st->prefixes[k];
        s = ig_dataset_open(&st->ds[k], ctx, &p, 1, err);
        if (s == IG_OK && ig_dataset_tokens(st->ds[k]) == 0)
            s = ig_err_set(err, IG_ERR_INVALID_ARG,
                           "%s: its %llu documents hold no tokens: there is nothing to sample "
                           "(were the texts of its inputs empty?)",
                           p, (unsigned long long)ig_dataset_documents(st->ds[k]));
        if (s == IG_OK && ig_dataset_num_shards(st->ds[k]) == 1) {
            ig_dtype dt = ig_dataset_dtype(st->ds[k]);
            st->fast[k] = IG_LITTLE_ENDIAN && (dt == IG_DTYPE_U16 || dt == IG_DTYPE_I32);
        }
    }
    st->o.prefixes = (const char *const *)st->prefixes;
    st->o.weights = st->weights;
    st->o.cache_dir = st->cache_dir;
    if (s == IG_OK && !opts->allow_mixed) s = check_tokenizers(st, err);
    if (s == IG_OK) s = build(st, opts->seed, 1, &st->blend, &st->idx, err);
    if (s != IG_OK) {
        ig_data_stream_close(st);
        return s;
    }
    st->key = st->blend ? ig_blend_key(st->blend) : ig_gpt_index_key(st->idx);
    *out = st;
    return IG_OK;
}

const ig_blend *ig_data_stream_blend(const ig_data_stream *st) {
    return st->blend;
}
const ig_gpt_index *ig_data_stream_index(const ig_data_stream *st) {
    return st->idx;
}
uint64_t ig_data_stream_key(const ig_data_stream *st) {
    return st->key;
}
uint64_t ig_data_stream_num_samples(const ig_data_stream *st) {
    return st->blend ? ig_blend_num_samples(st->blend) : ig_gpt_index_num_samples(st->idx);
}
size_t ig_data_stream_num_sources(const ig_data_stream *st) {
    return st->o.n;
}
const ig_dataset *ig_data_stream_dataset(const ig_data_stream *st, size_t k) {
    return k < st->o.n ? st->ds[k] : NULL;
}
