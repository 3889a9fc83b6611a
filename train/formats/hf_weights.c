/* hf_weights.c - the weights of a Hugging Face model directory as one set of named tensors,
 * whether they are one model.safetensors or several shards listed by a
 * model.safetensors.index.json (transformers' save_pretrained cuts a model past max_shard_size:
 * Llama 3 8B, T5-XXL, ...). Any family's import reads them through this, so that a sharded
 * directory loads as the single file would.
 *
 * The index, as transformers writes it: {"metadata": {...}, "weight_map": {"NAME": "FILE", ...}},
 * every FILE a safetensors file in the index's directory. Read strictly, as the shards are: the
 * weight map an object of strings, each file a plain name (no '/', not "." or "..": an index
 * cannot point outside its directory), each shard validated whole (ig_st_file_open), every tensor
 * the map names found in the shard it names, every tensor of a shard named by the map for that
 * shard, no name twice. "metadata" is not used (its total_size counts what transformers counts,
 * not always the files' bytes). Every refusal names the index, the shard and the tensor.
 *
 * Lookups: the tensors of every shard in one array sorted by name (bsearch), in shard order then
 * file order for ig_hf_weights_tensor.
 */
#include "hf.h"

#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

enum {
    HF_INDEX_MAX = 64 << 20, /* bytes of an index ingot reads (T5-XXL's is 20 kB) */
    HF_SHARDS_MAX = 4096
};

typedef struct named {
    const char *name;
    const ig_st_tensor *t;
} named;

struct ig_hf_weights {
    ig_ctx *ctx;
    char path[4096];
    ig_st_file **files;
    size_t n_files;
    named *order;  /* [n]: shard order, then file order */
    named *sorted; /* [n]: by name */
    size_t n;
};

static int by_name(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static int is_index(const char *path) {
    size_t n = strlen(path), k = strlen(".index.json");
    return n >= k && strcmp(path + n - k, ".index.json") == 0;
}

/* The sorted tables of every shard's tensors; a name in two shards is refused. */
static ig_status collect(ig_hf_weights *w, ig_err *err) {
    size_t n = 0;
    for (size_t f = 0; f < w->n_files; f++) n += ig_st_file_count(w->files[f]);
    w->order = ig_calloc(w->ctx, n ? n : 1, sizeof *w->order);
    w->sorted = ig_calloc(w->ctx, n ? n : 1, sizeof *w->sorted);
    if (!w->order || !w->sorted) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t f = 0; f < w->n_files; f++)
        for (size_t i = 0; i < ig_st_file_count(w->files[f]); i++) {
            const ig_st_tensor *t = ig_st_file_tensor(w->files[f], i);
            w->order[w->n++] = (named){ig_st_tensor_name(t), t};
        }
    memcpy(w->sorted, w->order, n * sizeof *w->order);
    qsort(w->sorted, n, sizeof *w->sorted, by_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(w->sorted[i].name, w->sorted[i - 1].name))
            return ig_err_set(err, IG_ERR_FORMAT, "%s: tensor '%s' is in two shards", w->path,
                              w->sorted[i].name);
    return IG_OK;
}

/* The shards of an index, opened, with the weight map held against them. */
static ig_status open_index(ig_hf_weights *w, ig_err *err) {
    json_t *root = NULL;
    ig_status st =
        ig_json_load_file(w->path, HF_INDEX_MAX, "a model.safetensors.index.json", &root, err);
    if (st != IG_OK) return st;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(map)) {
        json_decref(root);
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: no \"weight_map\" object: a sharded model's index maps each tensor "
                          "to its shard ({\"weight_map\": {\"NAME\": \"FILE\", ...}})",
                          w->path);
    }
    const char *slash = strrchr(w->path, '/');
    int dir_len = slash ? (int)(slash - w->path) : 1;
    const char *dir = slash ? w->path : ".";
    /* the distinct shards, in the order the map first names them */
    const char **names = ig_calloc(w->ctx, HF_SHARDS_MAX, sizeof *names);
    w->files = ig_calloc(w->ctx, HF_SHARDS_MAX, sizeof *w->files);
    if (!names || !w->files) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        if (st != IG_OK) break;
        const char *file = json_string_value(v);
        if (!file || !*file || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, "..")) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: weight_map[\"%s\"] is not the name of a file beside the index",
                            w->path, key);
            break;
        }
        size_t f = 0;
        while (f < w->n_files && strcmp(names[f], file)) f++;
        if (f < w->n_files) continue;
        if (w->n_files == HF_SHARDS_MAX) {
            st = ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: more than %d shards", w->path,
                            HF_SHARDS_MAX);
            break;
        }
        char p[8192];
        snprintf(p, sizeof p, "%.*s/%s", dir_len, dir, file);
        names[w->n_files] = file;
        st = ig_st_file_open(&w->files[w->n_files], w->ctx, p, err);
        if (st != IG_OK) ig_err_prefix(err, st, "%s: shard %s", w->path, file);
        if (st == IG_OK) w->n_files++;
    }
    /* each named tensor in its shard, each shard's tensors named for it */
    size_t listed = 0;
    json_object_foreach(map, key, v) {
        if (st != IG_OK) break;
        size_t f = 0;
        while (strcmp(names[f], json_string_value(v))) f++;
        listed++;
        if (!ig_st_file_find(w->files[f], key))
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: tensor '%s' is not in %s, where the index says it is", w->path,
                            key, names[f]);
    }
    for (size_t f = 0; st == IG_OK && f < w->n_files; f++)
        for (size_t i = 0; st == IG_OK && i < ig_st_file_count(w->files[f]); i++) {
            const char *name = ig_st_tensor_name(ig_st_file_tensor(w->files[f], i));
            const char *at = json_string_value(json_object_get(map, name));
            if (!at || strcmp(at, names[f]))
                st = ig_err_set(err, IG_ERR_FORMAT,
                                "%s: shard %s holds tensor '%s', which the index %s", w->path,
                                names[f], name, at ? "places in another shard" : "does not list");
        }
    if (st == IG_OK && listed == 0)
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: the weight map is empty", w->path);
    ig_free(w->ctx, names);
    json_decref(root);
    return st;
}

ig_status ig_hf_weights_open(ig_hf_weights **out, ig_ctx *ctx, const char *path, ig_err *err) {
    *out = NULL;
    ig_hf_weights *w = ig_calloc(ctx, 1, sizeof *w);
    if (!w) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    w->ctx = ctx;
    snprintf(w->path, sizeof w->path, "%s", path);
    ig_status st;
    if (is_index(path)) {
        st = open_index(w, err);
    } else {
        w->files = ig_calloc(ctx, 1, sizeof *w->files);
        st = w->files ? ig_st_file_open(&w->files[0], ctx, path, err)
                      : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        w->n_files = st == IG_OK;
    }
    if (st == IG_OK) st = collect(w, err);
    if (st != IG_OK) {
        ig_hf_weights_free(w);
        return st;
    }
    *out = w;
    return IG_OK;
}

void ig_hf_weights_free(ig_hf_weights *w) {
    if (!w) return;
    for (size_t f = 0; f < w->n_files; f++) ig_st_file_free(w->files[f]);
    ig_free(w->ctx, w->files);
    ig_free(w->ctx, w->order);
    ig_free(w->ctx, w->sorted);
    ig_free(w->ctx, w);
}

size_t ig_hf_weights_count(const ig_hf_weights *w) {
    return w->n;
}

const ig_st_tensor *ig_hf_weights_tensor(const ig_hf_weights *w, size_t i) {
    return i < w->n ? w->order[i].t : NULL;
}

const ig_st_tensor *ig_hf_weights_find(const ig_hf_weights *w, const char *name) {
    named key = {name, NULL};
    const named *at = bsearch(&key, w->sorted, w->n, sizeof key, by_name);
    return at ? at->t : NULL;
}
