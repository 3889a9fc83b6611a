/* tokens.c - ig_tokens, the growable vector of token ids that encoders append to. */
#include <stdlib.h>

#include "preprocess/preprocess.h"

ig_status ig_tokens_reserve(ig_tokens *t, size_t cap) {
    if (cap <= t->cap) return IG_OK;
    if (cap > SIZE_MAX / sizeof(int32_t)) return IG_ERR_NOMEM;
    int32_t *ids = ig_realloc(t->ctx, t->ids, cap * sizeof(int32_t));
    if (!ids) return IG_ERR_NOMEM;
    t->ids = ids;
    t->cap = cap;
    return IG_OK;
}

ig_status ig_tokens_push(ig_tokens *t, int32_t id) {
    if (t->n == t->cap) {
        ig_status st = ig_tokens_reserve(t, t->cap ? t->cap * 2 : 256);
        if (st != IG_OK) return st;
    }
    t->ids[t->n++] = id;
    return IG_OK;
}

void ig_tokens_free(ig_tokens *t) {
    if (!t) return;
    ig_free(t->ctx, t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}
