/* split.c - train/valid/test splits "969,30,1" as Megatron-Core makes them: the weights are
 * normalized (numpy float64 arithmetic), accumulated left to right into bookends, and part p gets
 * the contiguous sequences [round(bookend[p] * n), round(bookend[p+1] * n)) with Python's round
 * (half to even). A part with weight 0 does not exist (Megatron builds no dataset for it).
 */
#include "sampling_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const part_names[3] = {"train", "valid", "test"};

const char *ig_split_part_name(ig_split_part part) {
    return (unsigned)part < 3 ? part_names[part] : "unknown";
}

ig_split ig_split_default(void) {
    ig_split s = {{1.0, 0.0, 0.0}};
    return s;
}

ig_status ig_split_parse(ig_split *out, const char *text, ig_err *err) {
    double w[3] = {0, 0, 0};
    int n = 0;
    const char *p = text ? text : "";
    while (*p == ' ') p++;
    if (!*p)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "empty split: give 1 to 3 comma-separated weights, e.g. \"969,30,1\"");
    for (;;) {
        char *end = NULL;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno != 0 || !isfinite(v) || v < 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "split \"%s\": expected a number >= 0 at \"%s\" (e.g. \"969,30,1\")",
                              text, p);
        if (n == 3)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "split \"%s\": more than 3 parts (train,valid,test)", text);
        w[n++] = v;
        p = end;
        while (*p == ' ') p++;
        if (!*p) break;
        if (*p != ',')
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "split \"%s\": expected ',' at \"%s\" (e.g. \"969,30,1\")", text, p);
        p++;
    }
    if (w[0] + w[1] + w[2] <= 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "split \"%s\": all weights are 0", text);
    /* normalizing divides by the sum: one that overflows would make every part 0 */
    if (!isfinite(ig_numpy_sum_f64(w, 3)))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "split \"%s\": the weights add up to more than a double holds; scale "
                          "them down (only their ratios matter, e.g. \"969,30,1\")",
                          text);
    ig_normalize_weights(w, 3, out->weights);
    return IG_OK;
}

ig_status ig_split_range(const ig_split *split, ig_split_part part, uint64_t n, uint64_t *begin,
                         uint64_t *end, ig_err *err) {
    if ((unsigned)part > 2)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "split part %d does not exist", (int)part);
    double bookend[4];
    bookend[0] = 0.0;
    for (int p = 0; p < 3; p++) bookend[p + 1] = bookend[p] + split->weights[p];
    const double *w = split->weights;
    if (bookend[part + 1] <= bookend[part])
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "split %g,%g,%g leaves the %s part empty (its weight is 0); give it a "
                          "weight or use another part",
                          w[0], w[1], w[2], part_names[part]);
    if (n == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "there are no sequences to split (the data holds no tokens)");
    double dn = (double)n;
    uint64_t b = (uint64_t)nearbyint(bookend[part] * dn);
    uint64_t e = (uint64_t)nearbyint(bookend[part + 1] * dn);
    if (e > n) e = n;
    if (b >= e)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "split %g,%g,%g leaves the %s part empty: %llu sequences are too few "
                          "for a share of %g; use more data or a larger %s weight",
                          w[0], w[1], w[2], part_names[part], (unsigned long long)n, w[part],
                          part_names[part]);
    *begin = b;
    *end = e;
    return IG_OK;
}
