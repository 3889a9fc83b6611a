/* safetensors.c - the safetensors reader (validation of the whole header before any use), the
 * dtype table and the fp32 <-> bf16/f16 conversions. The writer is in safetensors_write.c.
 *
 * The header is parsed with jansson (duplicate keys refused by the parser); names, metadata
 * keys and values are then copied into one block owned by the file, and the JSON is released:
 * an open file holds the mapping, the tensor table and that block, nothing else. The rules are
 * those of the reference reader (huggingface/safetensors, SafeTensors::read_metadata and
 * Metadata::validate), listed in safetensors.h; the messages name the file and the tensor.
 */
#include "safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kernels/backend.h"
#include "safetensors_internal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian data in place: a big-endian host needs byte swaps"
#endif

/* ---- dtypes ---------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned bits;
} DTYPES[IG_ST_DTYPE_COUNT] = {
    [IG_ST_BOOL] = {"BOOL", 8},
    [IG_ST_F4] = {"F4", 4},
    [IG_ST_F6_E2M3] = {"F6_E2M3", 6},
    [IG_ST_F6_E3M2] = {"F6_E3M2", 6},
    [IG_ST_U8] = {"U8", 8},
    [IG_ST_I8] = {"I8", 8},
    [IG_ST_F8_E5M2] = {"F8_E5M2", 8},
    [IG_ST_F8_E4M3] = {"F8_E4M3", 8},
    [IG_ST_F8_E8M0] = {"F8_E8M0", 8},
    [IG_ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [IG_ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [IG_ST_I16] = {"I16", 16},
    [IG_ST_U16] = {"U16", 16},
    [IG_ST_F16] = {"F16", 16},
    [IG_ST_BF16] = {"BF16", 16},
    [IG_ST_I32] = {"I32", 32},
    [IG_ST_U32] = {"U32", 32},
    [IG_ST_F32] = {"F32", 32},
    [IG_ST_C64] = {"C64", 64},
    [IG_ST_F64] = {"F64", 64},
    [IG_ST_I64] = {"I64", 64},
    [IG_ST_U64] = {"U64", 64},
};

const char *ig_st_dtype_name(ig_st_dtype dtype) {
    return (unsigned)dtype < IG_ST_DTYPE_COUNT ? DTYPES[dtype].name : NULL;
}

unsigned ig_st_dtype_bits(ig_st_dtype dtype) {
    return (unsigned)dtype < IG_ST_DTYPE_COUNT ? DTYPES[dtype].bits : 0;
}

ig_status ig_st_dtype_parse(const char *name, ig_st_dtype *out) {
    for (int i = 0; i < IG_ST_DTYPE_COUNT; i++) {
        if (strcmp(name, DTYPES[i].name) == 0) {
            *out = (ig_st_dtype)i;
            return IG_OK;
        }
    }
    return IG_ERR_NOT_FOUND;
}

int ig_st_tensor_size(ig_st_dtype dtype, const uint64_t *shape, int ndim, uint64_t *numel,
                      uint64_t *bytes) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        /* as the reference: a running product that overflows is refused, even when a later
         * dimension is 0 */
        if (shape[i] != 0 && n > UINT64_MAX / shape[i]) return IG_ST_SIZE_OVERFLOW;
        n *= shape[i];
    }
    uint64_t bits = ig_st_dtype_bits(dtype);
    if (n > UINT64_MAX / bits) return IG_ST_SIZE_OVERFLOW;
    if (n * bits % 8 != 0) return IG_ST_SIZE_PARTIAL_BYTE;
    *numel = n;
    *bytes = n * bits / 8;
    return IG_ST_SIZE_OK;
}

size_t ig_st_format_shape(char *buf, size_t cap, const uint64_t *shape, int ndim) {
    char tmp[IG_ST_MAX_DIMS * 24 + 3]; /* ", " and up to 20 digits per dimension, "[]", NUL */
    size_t len = 0;
    tmp[len++] = '[';
    for (int i = 0; i < ndim && i < IG_ST_MAX_DIMS; i++)
        len += (size_t)snprintf(tmp + len, sizeof tmp - len, "%s%" PRIu64, i ? ", " : "", shape[i]);
    tmp[len++] = ']';
    tmp[len] = '\0';
    if (cap) {
        size_t k = len < cap ? len : cap - 1;
        memcpy(buf, tmp, k);
        buf[k] = '\0';
    }
    return len;
}

/* ---- fp32 <-> bf16 / f16 --------------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16: core's rounding, the one definition, so that a checkpoint holds the bits a bf16 device
 * computes with */
uint16_t ig_f32_to_bf16(float f) {
    return ig_bf16_from_f32(f);
}

float ig_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | (mant << 13)); /* inf, NaN */
    if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return f32_from_bits(sign);
    /* subnormal: mant * 2^-24, normalised */
    uint32_t e = 113;
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return f32_from_bits(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

uint16_t ig_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t x = u & 0x7FFFFFFFu;
    if (x > 0x7F800000u) return sign | 0x7E00u; /* NaN */
    /* 65520 (0x477FF000) is half-way between 65504, the largest half, and 2^16: ties to even go
     * up, so it and everything above (infinity included) is infinity */
    if (x >= 0x477FF000u) return sign | 0x7C00u;
    if (x >= 0x38800000u) { /* a normal half (>= 2^-14) */
        uint32_t h = (((x >> 23) - 112) << 10) | ((x & 0x7FFFFFu) >> 13);
        uint32_t rem = x & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may carry into the exponent */
        return (uint16_t)(sign | h);
    }
    if (x <= 0x33000000u) return sign; /* <= 2^-25: half-way to the smallest subnormal, or less */
    /* a subnormal half: round (value / 2^-24) to an integer, ties to even */
    uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
    unsigned shift = 126 - (x >> 23); /* in [14, 24] */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) h++; /* 0x400 is the smallest normal: right */
    return (uint16_t)(sign | h);
}

void ig_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ig_f32_to_bf16(src[i]);
}

void ig_f32_to_f16_n(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ig_f32_to_f16(src[i]);
}

/* ---- reader ---------------------------------------------------------------------------------- */

struct ig_st_tensor {
    const ig_st_file *file;
    const char *name;
    ig_st_dtype dtype;
    int ndim;
    uint64_t shape[IG_ST_MAX_DIMS];
    uint64_t numel, begin, end;
    size_t header_index; /* position in the header: the tie-break of file order */
};

struct ig_st_file {
    ig_ctx *ctx;
    ig_mapped_file map; /* zeroed when opened from memory */
    char *path;
    const uint8_t *data; /* the tensor bytes (after the header) */
    uint64_t data_size;
    uint64_t header_len;
    size_t n;
    ig_st_tensor *tensors;  /* [n], in file order */
    ig_st_tensor **by_name; /* [n], sorted by name */
    size_t n_meta;
    const char **meta; /* [2 * n_meta]: key, value, in header order */
    char *strings;     /* every name, key and value */
};

static void *st_alloc(ig_ctx *ctx, size_t n) {
    return ctx ? ig_alloc(ctx, n ? n : 1) : malloc(n ? n : 1);
}

static void st_free(ig_ctx *ctx, void *p) {
    if (ctx)
        ig_free(ctx, p);
    else
        free(p);
}

void ig_st_file_free(ig_st_file *f) {
    if (!f) return;
    ig_ctx *ctx = f->ctx;
    ig_mapped_file_close(&f->map);
    st_free(ctx, f->path);
    st_free(ctx, f->tensors);
    st_free(ctx, f->by_name);
    st_free(ctx, f->meta);
    st_free(ctx, f->strings);
    st_free(ctx, f);
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number with a fraction or exponent";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "something else";
}

/* 1 and *out when v is a non-negative JSON integer, else 0. */
static int json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

/* Copies s (len bytes) into the string block at *pos; returns the copy. */
static const char *put_string(char *block, size_t *pos, const char *s, size_t len) {
    char *dst = block + *pos;
    memcpy(dst, s, len);
    dst[len] = '\0';
    *pos += len + 1;
    return dst;
}

#define FAIL(st, ...) (ig_err_set(err, (st), __VA_ARGS__))

/* Reads one tensor entry (key: its name) into t; the name is set by the caller. */
static ig_status parse_entry(ig_st_tensor *t, const char *file, const char *key, json_t *v,
                             uint64_t data_size, ig_err *err) {
    if (!json_is_object(v))
        return FAIL(
            IG_ERR_FORMAT,
            "%s: tensor '%s': expected an object with dtype, shape and data_offsets, got %s", file,
            key, json_kind(v));
    const char *field;
    json_t *fv;
    json_object_foreach(v, field, fv) {
        if (strcmp(field, "dtype") && strcmp(field, "shape") && strcmp(field, "data_offsets"))
            return FAIL(IG_ERR_FORMAT,
                        "%s: tensor '%s': unknown field \"%s\" (a tensor has dtype, shape and "
                        "data_offsets only)",
                        file, key, field);
    }
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    const char *missing = !jd ? "dtype" : !js ? "shape" : !jo ? "data_offsets" : NULL;
    if (missing) return FAIL(IG_ERR_FORMAT, "%s: tensor '%s': no \"%s\"", file, key, missing);

    if (!json_is_string(jd))
        return FAIL(IG_ERR_FORMAT, "%s: tensor '%s': dtype must be a string, got %s", file, key,
                    json_kind(jd));
    if (ig_st_dtype_parse(json_string_value(jd), &t->dtype) != IG_OK) {
        char known[256];
        size_t len = 0;
        for (int i = 0; i < IG_ST_DTYPE_COUNT && len < sizeof known; i++)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? " " : "",
                                    DTYPES[i].name);
        return FAIL(IG_ERR_UNSUPPORTED, "%s: tensor '%s': unknown dtype \"%s\" (known: %s)", file,
                    key, json_string_value(jd), known);
    }

    if (!json_is_array(js))
        return FAIL(IG_ERR_FORMAT, "%s: tensor '%s': shape must be an array, got %s", file, key,
                    json_kind(js));
    if (json_array_size(js) > IG_ST_MAX_DIMS)
        return FAIL(IG_ERR_UNSUPPORTED,
                    "%s: tensor '%s': shape has %zu dimensions; at most %d are supported", file,
                    key, json_array_size(js), IG_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(js, (size_t)i);
        if (json_u64(d, &t->shape[i])) continue;
        if (json_is_integer(d))
            return FAIL(IG_ERR_FORMAT,
                        "%s: tensor '%s': shape dimension %d is %lld, not a non-negative integer",
                        file, key, i, (long long)json_integer_value(d));
        return FAIL(IG_ERR_FORMAT,
                    "%s: tensor '%s': shape dimension %d is %s, not a non-negative integer", file,
                    key, i, json_kind(d));
    }

    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_u64(json_array_get(jo, 0), &t->begin) || !json_u64(json_array_get(jo, 1), &t->end))
        return FAIL(IG_ERR_FORMAT,
                    "%s: tensor '%s': data_offsets must be [begin, end], two non-negative "
                    "integers",
                    file, key);
    if (t->end < t->begin)
        return FAIL(IG_ERR_FORMAT,
                    "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                    "] end before they begin",
                    file, key, t->begin, t->end);

    char shape[256];
    ig_st_format_shape(shape, sizeof shape, t->shape, t->ndim);
    const char *dt = ig_st_dtype_name(t->dtype);
    uint64_t bytes;
    switch (ig_st_tensor_size(t->dtype, t->shape, t->ndim, &t->numel, &bytes)) {
    case IG_ST_SIZE_OVERFLOW:
        return FAIL(IG_ERR_FORMAT, "%s: tensor '%s': shape %s of %s overflows 64 bits", file, key,
                    shape, dt);
    case IG_ST_SIZE_PARTIAL_BYTE:
        return FAIL(IG_ERR_FORMAT, "%s: tensor '%s': shape %s of %s is not a whole number of bytes",
                    file, key, shape, dt);
    default:
        break;
    }
    if (bytes != t->end - t->begin)
        return FAIL(IG_ERR_FORMAT,
                    "%s: tensor '%s': shape %s is %" PRIu64 " bytes of %s but data_offsets span "
                    "%" PRIu64,
                    file, key, shape, bytes, dt, t->end - t->begin);
    if (t->end > data_size)
        return FAIL(IG_ERR_FORMAT,
                    "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] go past the end of "
                    "the data (%" PRIu64 " bytes after the header): the file is truncated",
                    file, key, t->begin, t->end, data_size);
    return IG_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const ig_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->header_index < y->header_index ? -1 : x->header_index > y->header_index;
}

static int cmp_names(const void *a, const void *b) {
    const ig_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* The data area is tiled exactly by the tensors sorted by offset (f->tensors, sorted). */
static ig_status check_tiling(const ig_st_file *f, ig_err *err) {
    uint64_t at = 0;
    const ig_st_tensor *prev = NULL; /* the tensor that ends at `at` (NULL at 0) */
    for (size_t i = 0; i < f->n; i++) {
        const ig_st_tensor *t = &f->tensors[i];
        if (t->begin < at)
            return FAIL(IG_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor "
                        "'%s' [%" PRIu64 ", %" PRIu64 "]",
                        f->path, t->name, t->begin, t->end, prev->name, prev->begin, prev->end);
        if (t->begin > at) {
            if (!prev)
                return FAIL(IG_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] leave bytes "
                            "[0, %" PRIu64 ") of the data to no tensor (safetensors data is "
                            "contiguous)",
                            f->path, t->name, t->begin, t->end, t->begin);
            return FAIL(IG_ERR_FORMAT,
                        "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                        "] leave bytes [%" PRIu64 ", %" PRIu64
                        ") after tensor '%s' to no tensor (safetensors data is "
                        "contiguous)",
                        f->path, t->name, t->begin, t->end, at, t->begin, prev->name);
        }
        if (t->end > at || !prev) prev = t;
        at = t->end;
    }
    if (at != f->data_size)
        return FAIL(IG_ERR_FORMAT,
                    "%s: the last %" PRIu64 " bytes of the file belong to no tensor (the tensors "
                    "end at data offset %" PRIu64 " of %" PRIu64 ")",
                    f->path, f->data_size - at, at, f->data_size);
    return IG_OK;
}

/* Parses and validates the header of f (f->path, the whole buffer base[0..size)). */
static ig_status parse(ig_st_file *f, const uint8_t *base, size_t size, ig_err *err) {
    const char *file = f->path;
    if (size < 8)
        return FAIL(IG_ERR_FORMAT,
                    "%s: %zu bytes is too short for a safetensors file (it starts with an 8-byte "
                    "header length)",
                    file, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | base[i];
    if (n > IG_ST_MAX_HEADER)
        return FAIL(IG_ERR_FORMAT,
                    "%s: header length %" PRIu64 " is over the %d-byte limit: not a safetensors "
                    "file?",
                    file, n, IG_ST_MAX_HEADER);
    if (n > size - 8)
        return FAIL(IG_ERR_FORMAT,
                    "%s: header length %" PRIu64 " goes past the end of the file (%zu bytes): "
                    "the file is truncated or not safetensors",
                    file, n, size);
    if (n == 0 || base[8] != '{')
        return FAIL(IG_ERR_FORMAT,
                    "%s: the header does not start with '{': not a safetensors "
                    "file?",
                    file);
    f->header_len = n;
    f->data = base + 8 + n;
    f->data_size = size - 8 - n;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)base + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key)
            return FAIL(IG_ERR_FORMAT,
                        "%s: header line %d column %d: a name appears twice (%s); tensor names "
                        "must be unique",
                        file, jerr.line, jerr.column, jerr.text);
        return FAIL(IG_ERR_FORMAT, "%s: header is not valid JSON: %s (line %d, column %d)", file,
                    jerr.text, jerr.line, jerr.column);
    }
    ig_status st = IG_OK;
    if (!json_is_object(root)) {
        st = FAIL(IG_ERR_FORMAT, "%s: the header is %s, not a JSON object", file, json_kind(root));
        goto done;
    }

    /* sizes: tensors, metadata entries, string bytes */
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta && !json_is_object(meta)) {
        st = FAIL(IG_ERR_FORMAT, "%s: __metadata__ must be an object of strings, got %s", file,
                  json_kind(meta));
        goto done;
    }
    f->n = json_object_size(root) - (meta ? 1 : 0);
    f->n_meta = meta ? json_object_size(meta) : 0;
    size_t str_bytes = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (v != meta) str_bytes += strlen(key) + 1;
    }
    if (meta) {
        json_object_foreach(meta, key, v) {
            if (!json_is_string(v)) {
                st = FAIL(IG_ERR_FORMAT, "%s: __metadata__ \"%s\" must be a string, got %s", file,
                          key, json_kind(v));
                goto done;
            }
            str_bytes += strlen(key) + 1 + json_string_length(v) + 1;
        }
    }
    f->tensors = st_alloc(f->ctx, f->n * sizeof *f->tensors);
    f->by_name = st_alloc(f->ctx, f->n * sizeof *f->by_name);
    f->meta = st_alloc(f->ctx, 2 * f->n_meta * sizeof *f->meta);
    f->strings = st_alloc(f->ctx, str_bytes);
    if (!f->tensors || !f->by_name || !f->meta || !f->strings) {
        st = FAIL(IG_ERR_NOMEM, "%s: out of memory for the header of %zu tensors", file, f->n);
        goto done;
    }
    memset(f->tensors, 0, f->n * sizeof *f->tensors);

    size_t pos = 0, i = 0;
    json_object_foreach(root, key, v) {
        if (v == meta) continue;
        ig_st_tensor *t = &f->tensors[i];
        t->file = f;
        t->header_index = i;
        st = parse_entry(t, file, key, v, f->data_size, err);
        if (st != IG_OK) goto done;
        t->name = put_string(f->strings, &pos, key, strlen(key));
        i++;
    }
    if (meta) {
        i = 0;
        json_object_foreach(meta, key, v) {
            f->meta[2 * i] = put_string(f->strings, &pos, key, strlen(key));
            f->meta[2 * i + 1] =
                put_string(f->strings, &pos, json_string_value(v), json_string_length(v));
            i++;
        }
    }

    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_offsets);
    st = check_tiling(f, err);
    if (st != IG_OK) goto done;
    for (i = 0; i < f->n; i++) f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, f->n, sizeof *f->by_name, cmp_names);
done:
    json_decref(root);
    return st;
}

#undef FAIL

static ig_status file_new(ig_st_file **out, ig_ctx *ctx, const char *path, ig_err *err) {
    ig_st_file *f = st_alloc(ctx, sizeof *f);
    size_t len = strlen(path);
    char *p = st_alloc(ctx, len + 1);
    if (!f || !p) {
        st_free(ctx, f);
        st_free(ctx, p);
        return ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", path);
    }
    memset(f, 0, sizeof *f);
    memcpy(p, path, len + 1);
    f->ctx = ctx;
    f->path = p;
    *out = f;
    return IG_OK;
}

ig_status ig_st_file_open_memory(ig_st_file **out, ig_ctx *ctx, const void *data, size_t size,
                                 const char *name, ig_err *err) {
    *out = NULL;
    ig_st_file *f;
    ig_status st = file_new(&f, ctx, name, err);
    if (st != IG_OK) return st;
    st = parse(f, data, size, err);
    if (st != IG_OK) {
        ig_st_file_free(f);
        return st;
    }
    *out = f;
    return IG_OK;
}

ig_status ig_st_file_open(ig_st_file **out, ig_ctx *ctx, const char *path, ig_err *err) {
    *out = NULL;
    ig_st_file *f;
    ig_status st = file_new(&f, ctx, path, err);
    if (st != IG_OK) return st;
    st = ig_mapped_file_open(&f->map, path, err);
    if (st == IG_OK) st = parse(f, f->map.data, f->map.size, err);
    if (st != IG_OK) {
        ig_st_file_free(f);
        return st;
    }
    *out = f;
    return IG_OK;
}

const char *ig_st_file_path(const ig_st_file *f) {
    return f->path;
}

uint64_t ig_st_file_header_len(const ig_st_file *f) {
    return f->header_len;
}

size_t ig_st_file_count(const ig_st_file *f) {
    return f->n;
}

const ig_st_tensor *ig_st_file_tensor(const ig_st_file *f, size_t i) {
    return i < f->n ? &f->tensors[i] : NULL;
}

const ig_st_tensor *ig_st_file_find(const ig_st_file *f, const char *name) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->by_name[mid]->name);
        if (c == 0) return f->by_name[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *ig_st_file_metadata(const ig_st_file *f, const char *key) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

size_t ig_st_file_metadata_count(const ig_st_file *f) {
    return f->n_meta;
}

void ig_st_file_metadata_at(const ig_st_file *f, size_t i, const char **key, const char **value) {
    *key = i < f->n_meta ? f->meta[2 * i] : NULL;
    *value = i < f->n_meta ? f->meta[2 * i + 1] : NULL;
}

const char *ig_st_tensor_name(const ig_st_tensor *t) {
    return t->name;
}

ig_st_dtype ig_st_tensor_dtype(const ig_st_tensor *t) {
    return t->dtype;
}

int ig_st_tensor_ndim(const ig_st_tensor *t) {
    return t->ndim;
}

const uint64_t *ig_st_tensor_shape(const ig_st_tensor *t) {
    return t->shape;
}

uint64_t ig_st_tensor_numel(const ig_st_tensor *t) {
    return t->numel;
}

uint64_t ig_st_tensor_bytes(const ig_st_tensor *t) {
    return t->end - t->begin;
}

uint64_t ig_st_tensor_offset(const ig_st_tensor *t) {
    return t->begin;
}

const void *ig_st_tensor_data(const ig_st_tensor *t) {
    return t->file->data + t->begin;
}

ig_status ig_st_tensor_to_f32(const ig_st_tensor *t, float *out, uint64_t n, ig_err *err) {
    const char *file = t->file->path;
    if (n != t->numel)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: tensor '%s' has %" PRIu64 " elements, the destination %" PRIu64,
                          file, t->name, t->numel, n);
    const uint8_t *src = ig_st_tensor_data(t);
    switch (t->dtype) {
    case IG_ST_F32:
        if (n) memcpy(out, src, (size_t)n * sizeof(float));
        return IG_OK;
    case IG_ST_BF16:
    case IG_ST_F16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
            out[i] = t->dtype == IG_ST_BF16 ? ig_bf16_to_f32(h) : ig_f16_to_f32(h);
        }
        return IG_OK;
    default:
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: tensor '%s' is %s: only F32, BF16 and F16 convert to fp32", file,
                          t->name, ig_st_dtype_name(t->dtype));
    }
}
