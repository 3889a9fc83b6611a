/* video_buckets.c - Open-Sora's resolution x frame-count buckets: the YAML config, Open-Sora
 * 2.0's aspect-ratio tables (heights and widths in multiples of 16 for a resolution's pixel
 * count) and its assignment of a video to a bucket (opensora/datasets/bucket.py, get_bucket_id),
 * with its random draws taken from counter-based random numbers keyed by (seed, video) instead of
 * numpy's generator: deterministic, and the same on every rank and thread.
 *
 * The pair form [keep, q] follows Open-Sora 2.0: q is the probability of skipping this frame
 * count for the next shorter one (in Open-Sora 1.x the second value was the probability of
 * keeping it: the opposite). keep is the probability of taking this resolution once a frame count
 * fits (else the next lower resolution is tried).
 */
#include "preprocess/preprocess.h"

#include <libfyaml.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RES    64
#define MAX_TIMES  64
#define MAX_RATIOS 20
#define AE_STRIDE  16 /* Open-Sora 2.0's AE_SPATIAL_COMPRESSION: sizes are multiples of it */

typedef struct ratio {
    char name[16]; /* "16:9" (width:height) */
    uint32_t h, w;
} ratio;

typedef struct time_bucket {
    uint32_t frames;
    double keep, q; /* q < 0: a plain probability (no pair) */
    uint32_t batch_size;
} time_bucket;

typedef struct resolution {
    char name[32];
    uint64_t pixels;
    ratio ar[MAX_RATIOS];
    size_t n_ar;
    time_bucket t[MAX_TIMES]; /* longest first */
    size_t n_t;
    size_t first; /* index of its first bucket */
} resolution;

struct ig_video_buckets {
    resolution res[MAX_RES]; /* largest first */
    size_t n_res;
    ig_video_bucket *b; /* every (resolution, frames, ratio), in that order */
    size_t n;
};

/* ---- Open-Sora 2.0's tables (opensora/datasets/aspect.py) ----------------------------------- */

static const char *const ratio_list[] = {"2.39:1", "2:1", "16:9", "1.85:1", "9:16",
                                         "5:8",    "3:2", "4:3",  "1:1"};

/* Inserts or replaces name in a (as a Python dict: a replaced key keeps its place). */
static void dict_set(ratio *a, size_t *n, const char *name, uint32_t h, uint32_t w) {
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(a[i].name, name)) {
            a[i].h = h, a[i].w = w;
            return;
        }
    snprintf(a[*n].name, sizeof a[*n].name, "%.*s", (int)sizeof a[*n].name - 1, name);
    a[*n].h = h, a[*n].w = w;
    (*n)++;
}

/* get_aspect_ratios_dict(total_pixels, training=True) */
static void aspect_ratios(uint64_t total, ratio *out, size_t *n) {
    ratio vert[MAX_RATIOS];
    size_t nv = 0;
    *n = 0;
    const double T = (double)total, D = AE_STRIDE;
    for (size_t r = 0; r < sizeof ratio_list / sizeof ratio_list[0]; r++) {
        double wr, hr;
        sscanf(ratio_list[r], "%lf:%lf", &wr, &hr);
        double width = floor(floor(sqrt(T * (wr / hr)) / D) * D);
        if (width < D) width = D;
        double height = floor(floor((T / width) / D) * D);
        double diff = fabs(height * width - T);
        const double cand[4][2] = {
            {height - D, width}, {height + D, width}, {height, width - D}, {height, width + D}};
        for (int c = 0; c < 4; c++)
            if (fabs(cand[c][0] * cand[c][1] - T) < diff) {
                height = cand[c][0], width = cand[c][1];
                diff = fabs(height * width - T);
            }
        if (height < D) height = D;
        if (width < D) width = D;
        int dup = 0;
        for (size_t i = 0; i < *n; i++)
            dup |= out[i].h == (uint32_t)height && out[i].w == (uint32_t)width;
        if (dup) continue;
        dict_set(out, n, ratio_list[r], (uint32_t)height, (uint32_t)width);
        char flipped[16];
        const char *colon = strchr(ratio_list[r], ':');
        snprintf(flipped, sizeof flipped, "%s:%.*s", colon + 1, (int)(colon - ratio_list[r]),
                 ratio_list[r]);
        dict_set(vert, &nv, flipped, (uint32_t)width, (uint32_t)height);
    }
    for (size_t i = 0; i < nv; i++) dict_set(out, n, vert[i].name, vert[i].h, vert[i].w);
}

static double ratio_value(const char *name) { /* "w:h" -> h / w */
    double w = 1, h = 1;
    sscanf(name, "%lf:%lf", &w, &h);
    return h / w;
}

/* get_resolution_with_aspect_ratio: "256px", "360p", with "_max" or "_arW:H". 0 on success. */
static int resolution_of(const char *name, resolution *r, char *why, size_t cap) {
    char base[32], setting[32] = "";
    const char *us = strchr(name, '_');
    snprintf(base, sizeof base, "%.*s", us ? (int)(us - name) : (int)strlen(name), name);
    if (us) snprintf(setting, sizeof setting, "%s", us + 1);
    size_t bl = strlen(base);
    char *end;
    unsigned long size = strtoul(base, &end, 10);
    if (end == base || size == 0 || size > 16384 || (strcmp(end, "px") && strcmp(end, "p"))) {
        snprintf(why, cap, "resolution '%s' is not NUMBERpx (e.g. 256px) or NUMBERp (e.g. 360p)",
                 name);
        return -1;
    }
    (void)bl;
    r->pixels = !strcmp(end, "px") ? (uint64_t)size * size
                                   : (uint64_t)((double)size * (double)size / 9 * 16);
    aspect_ratios(r->pixels, r->ar, &r->n_ar);
    if (!strcmp(setting, "max")) {
        size_t best = 0;
        for (size_t i = 1; i < r->n_ar; i++)
            if ((uint64_t)r->ar[i].h * r->ar[i].w > (uint64_t)r->ar[best].h * r->ar[best].w)
                best = i;
        r->ar[0] = r->ar[best];
        r->n_ar = 1;
    } else if (!strncmp(setting, "ar", 2)) {
        size_t i = 0;
        while (i < r->n_ar && strcmp(r->ar[i].name, setting + 2)) i++;
        if (i == r->n_ar) {
            snprintf(why, cap, "resolution '%s': aspect ratio %s is not in its table", name,
                     setting + 2);
            return -1;
        }
        r->ar[0] = r->ar[i];
        r->n_ar = 1;
    } else if (setting[0]) {
        snprintf(why, cap, "resolution '%s': the part after '_' must be max or arW:H", name);
        return -1;
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    return 0;
}

/* ---- the YAML ------------------------------------------------------------------------------- */

static int node_line(struct fy_node *n) {
    if (!n) return 0;
    if (fy_node_is_scalar(n)) {
        const struct fy_mark *m = fy_token_start_mark(fy_node_get_scalar_token(n));
        return m ? m->line + 1 : 0;
    }
    void *it = NULL;
    if (fy_node_is_mapping(n)) {
        struct fy_node_pair *p = fy_node_mapping_iterate(n, &it);
        return p ? node_line(fy_node_pair_key(p)) : 0;
    }
    return fy_node_is_sequence(n) ? node_line(fy_node_sequence_iterate(n, &it)) : 0;
}

static int scalar_num(struct fy_node *n, double *out) {
    const char *s = n && fy_node_is_scalar(n) ? fy_node_get_scalar0(n) : NULL;
    char *end;
    if (!s || !*s) return 0;
    *out = strtod(s, &end);
    return !*end && isfinite(*out);
}

static ig_status bad(ig_err *err, const char *name, struct fy_node *n, const char *what,
                     const char *detail) {
    return ig_err_set(err, IG_ERR_CONFIG, "%s:%d: %s%s%s", name, node_line(n), what,
                      detail ? ": " : "", detail ? detail : "");
}

/* {frames: [p, batch_size]} of one resolution */
static ig_status parse_times(resolution *r, struct fy_node *map, const char *name, ig_err *err) {
    if (!fy_node_is_mapping(map))
        return bad(err, name, map,
                   "expected a mapping of frame counts to [probability, batch "
                   "size]",
                   r->name);
    void *it = NULL;
    struct fy_node_pair *p;
    while ((p = fy_node_mapping_iterate(map, &it))) {
        struct fy_node *k = fy_node_pair_key(p), *v = fy_node_pair_value(p);
        double f, bs, keep, q = -1;
        if (!scalar_num(k, &f) || f < 1 || f > 65536 || f != floor(f))
            return bad(err, name, k, "a frame count must be an integer in [1, 65536]", r->name);
        if (r->n_t == MAX_TIMES) return bad(err, name, k, "too many frame counts", r->name);
        if (!v || !fy_node_is_sequence(v) || fy_node_sequence_item_count(v) != 2)
            return bad(err, name, v ? v : k, "expected [probability, batch_size]", NULL);
        struct fy_node *pn = fy_node_sequence_get_by_index(v, 0);
        struct fy_node *bn = fy_node_sequence_get_by_index(v, 1);
        if (pn && fy_node_is_sequence(pn)) {
            if (fy_node_sequence_item_count(pn) != 2 ||
                !scalar_num(fy_node_sequence_get_by_index(pn, 0), &keep) ||
                !scalar_num(fy_node_sequence_get_by_index(pn, 1), &q) || q < 0 || q > 1)
                return bad(err, name, pn, "a probability pair is [keep, q], both in [0, 1]", NULL);
        } else if (!scalar_num(pn, &keep)) {
            return bad(err, name, pn ? pn : v, "the probability must be a number or [keep, q]",
                       NULL);
        }
        if (keep < 0 || keep > 1) return bad(err, name, pn, "probabilities are in [0, 1]", NULL);
        if (!scalar_num(bn, &bs) || bs < 1 || bs > 1e6 || bs != floor(bs))
            return bad(err, name, bn ? bn : v, "the batch size must be a positive integer", NULL);
        for (size_t i = 0; i < r->n_t; i++)
            if (r->t[i].frames == (uint32_t)f)
                return bad(err, name, k, "a frame count is given twice", r->name);
        /* longest first: insertion keeps the list sorted */
        size_t at = r->n_t;
        while (at > 0 && r->t[at - 1].frames < (uint32_t)f) {
            r->t[at] = r->t[at - 1];
            at--;
        }
        r->t[at] = (time_bucket){(uint32_t)f, keep, q, (uint32_t)bs};
        r->n_t++;
    }
    if (r->n_t == 0) return bad(err, name, map, "no frame counts", r->name);
    return IG_OK;
}

static ig_status parse_root(ig_video_buckets *b, struct fy_node *root, const char *name,
                            ig_err *err) {
    if (!root || !fy_node_is_mapping(root))
        return bad(err, name, root, "expected a mapping of resolution names", NULL);
    struct fy_node *inner = fy_node_mapping_lookup_by_string(root, "bucket_config", -1);
    if (inner) root = inner;
    if (!fy_node_is_mapping(root))
        return bad(err, name, root, "bucket_config must be a mapping", NULL);
    void *it = NULL;
    struct fy_node_pair *p;
    while ((p = fy_node_mapping_iterate(root, &it))) {
        struct fy_node *k = fy_node_pair_key(p);
        const char *key = k && fy_node_is_scalar(k) ? fy_node_get_scalar0(k) : NULL;
        if (!key) return bad(err, name, k, "a resolution name must be a plain string", NULL);
        if (b->n_res == MAX_RES) return bad(err, name, k, "too many resolutions", NULL);
        resolution r = {0};
        char why[160];
        if (resolution_of(key, &r, why, sizeof why) != 0) return bad(err, name, k, why, NULL);
        for (size_t i = 0; i < b->n_res; i++)
            if (!strcmp(b->res[i].name, key))
                return bad(err, name, k, "a resolution is given twice", key);
        ig_status st = parse_times(&r, fy_node_pair_value(p), name, err);
        if (st != IG_OK) return st;
        /* largest first; a stable insertion keeps the config's order among equals (Python's
         * sorted(..., reverse=True) is stable too) */
        size_t at = b->n_res;
        while (at > 0 && b->res[at - 1].pixels < r.pixels) {
            b->res[at] = b->res[at - 1];
            at--;
        }
        b->res[at] = r;
        b->n_res++;
    }
    if (b->n_res == 0) return bad(err, name, root, "no resolutions", NULL);
    size_t n = 0;
    for (size_t i = 0; i < b->n_res; i++) n += b->res[i].n_t * b->res[i].n_ar;
    b->b = calloc(n, sizeof *b->b);
    if (!b->b) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < b->n_res; i++) {
        resolution *r = &b->res[i];
        r->first = b->n;
        for (size_t t = 0; t < r->n_t; t++)
            for (size_t a = 0; a < r->n_ar; a++) {
                ig_video_bucket *x = &b->b[b->n++];
                snprintf(x->name, sizeof x->name, "%.31s/%u/%.15s", r->name, r->t[t].frames,
                         r->ar[a].name);
                x->frames = r->t[t].frames;
                x->height = r->ar[a].h;
                x->width = r->ar[a].w;
                x->batch_size = r->t[t].batch_size;
            }
    }
    return IG_OK;
}

ig_status ig_video_buckets_parse(ig_video_buckets **out, const char *yaml, size_t len,
                                 const char *name, ig_err *err) {
    *out = NULL;
    struct fy_document *doc = NULL;
    ig_status st = ig_yaml_load_string(&doc, yaml, len, name, err);
    if (st != IG_OK) return st;
    ig_video_buckets *b = calloc(1, sizeof *b);
    st = b ? parse_root(b, doc ? fy_document_root(doc) : NULL, name, err)
           : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK)
        *out = b;
    else
        ig_video_buckets_free(b);
    fy_document_destroy(doc);
    return st;
}

ig_status ig_video_buckets_load(ig_video_buckets **out, const char *path, ig_err *err) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    ig_status st = ig_read_file_max(path, IG_YAML_FILE_MAX, &text, &len, err);
    if (st != IG_OK) return st;
    st = ig_video_buckets_parse(out, text, len, path, err);
    free(text);
    return st;
}

void ig_video_buckets_free(ig_video_buckets *b) {
    if (!b) return;
    free(b->b);
    free(b);
}

size_t ig_video_buckets_count(const ig_video_buckets *b) {
    return b->n;
}

const ig_video_bucket *ig_video_buckets_get(const ig_video_buckets *b, size_t i) {
    return i < b->n ? &b->b[i] : NULL;
}

/* ---- assignment (bucket.py get_bucket_id, Open-Sora 2.0) ------------------------------------ */

typedef struct draws {
    ig_rng_key key;
    uint64_t base, i;
} draws;

static double draw(draws *d) {
    return ig_rng_uniform(d->key, d->base + d->i++);
}

static size_t closest_ratio(const resolution *r, uint32_t h, uint32_t w) {
    double a = (double)h / (double)w;
    size_t best = 0;
    for (size_t i = 1; i < r->n_ar; i++)
        if (fabs(a - ratio_value(r->ar[i].name)) < fabs(a - ratio_value(r->ar[best].name)))
            best = i;
    return best;
}

int64_t ig_video_buckets_assign(const ig_video_buckets *b, uint64_t frames, uint32_t height,
                                uint32_t width, uint64_t seed, uint64_t key) {
    if (!frames || !height || !width) return -1;
    draws d = {ig_rng_key_make(seed, "ingot-video-bucket"), key << 12, 0};
    double pixels = (double)height * (double)width;
    for (size_t i = 0; i < b->n_res; i++) {
        const resolution *r = &b->res[i];
        if (pixels < (double)r->pixels * 0.8) continue;
        if (frames == 1) { /* an image */
            const time_bucket *t1 = r->n_t ? &r->t[r->n_t - 1] : NULL;
            if (t1 && t1->frames == 1 && draw(&d) < t1->keep)
                return (int64_t)(r->first + (r->n_t - 1) * r->n_ar +
                                 closest_ratio(r, height, width));
            continue;
        }
        for (size_t t = 0; t < r->n_t; t++) {
            const time_bucket *tb = &r->t[t];
            if (frames < tb->frames || tb->frames == 1) continue;
            if (tb->q >= 0 && (tb->q >= 1 || draw(&d) <= tb->q)) continue; /* skip to shorter */
            if (tb->keep >= 1 || draw(&d) <= tb->keep)
                return (int64_t)(r->first + t * r->n_ar + closest_ratio(r, height, width));
            break; /* to the next (lower) resolution */
        }
    }
    return -1;
}
