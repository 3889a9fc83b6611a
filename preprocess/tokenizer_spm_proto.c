/* tokenizer_spm_proto.c - reading a SentencePiece .model file: a serialized protobuf ModelProto
 * (sentencepiece_model.proto), parsed here by a small reader of the wire format (varints, 32- and
 * 64-bit fixed fields, length-delimited fields) without a protobuf library.
 *
 * What is read: the pieces (piece, score, type), the TrainerSpec fields that change encoding or
 * decoding (model_type, byte_fallback, treat_whitespace_as_suffix, unk_surface and the names of
 * the unk/bos/eos/pad pieces), the NormalizerSpec (name, precompiled_charsmap, add_dummy_prefix,
 * remove_extra_whitespaces, escape_whitespaces) and the denormalizer's. Every other field is
 * skipped by its wire type, as protobuf does. The file is untrusted: every length is checked
 * against what remains of its message, and a malformed file is an IG_ERR_FORMAT naming the file,
 * the byte offset and what was expected there.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "tokenizer_spm_internal.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

/* A message being read: bytes p[0..n), the first at byte offset base of the file. */
typedef struct pb {
    const uint8_t *p;
    size_t n, pos, base;
    const char *where;
    ig_err *err;
} pb;

static const char *wire_name(int wt) {
    switch (wt) {
    case WT_VARINT:
        return "0 (varint)";
    case WT_I64:
        return "1 (64-bit)";
    case WT_LEN:
        return "2 (length-delimited)";
    case WT_SGROUP:
        return "3 (start group)";
    case WT_EGROUP:
        return "4 (end group)";
    case WT_I32:
        return "5 (32-bit)";
    default:
        return "6 or 7 (invalid)";
    }
}

static ig_status fail_at(pb *r, size_t at, const char *what) {
    return ig_err_set(r->err, IG_ERR_FORMAT,
                      "%s: byte offset %zu: %s (a SentencePiece .model file is a protobuf "
                      "ModelProto; this one is truncated or corrupt)",
                      r->where, r->base + at, what);
}

static ig_status read_varint(pb *r, uint64_t *v) {
    *v = 0; /* outputs are set on every path: gcc -O3 cannot see that fail_at returns an error */
    uint64_t x = 0;
    size_t start = r->pos;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->pos >= r->n)
            return fail_at(r, start, "expected a varint, found the end of the message");
        uint8_t b = r->p[r->pos++];
        if (shift < 64) x |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return IG_OK;
        }
    }
    return fail_at(r, start, "expected a varint of at most 10 bytes");
}

/* A field's tag: its number and wire type. */
static ig_status read_tag(pb *r, uint32_t *field, int *wt, size_t *at) {
    *at = r->pos;
    *field = 0;
    *wt = 0;
    uint64_t tag;
    ig_status st = read_varint(r, &tag);
    if (st != IG_OK) return st;
    *field = (uint32_t)(tag >> 3);
    *wt = (int)(tag & 7);
    if ((tag >> 3) == 0 || (tag >> 3) > 536870911u)
        return fail_at(r, *at, "expected a field tag with a number in 1 .. 2^29-1");
    return IG_OK;
}

/* The bytes of a length-delimited field (after its tag). */
static ig_status read_len(pb *r, const uint8_t **data, size_t *len, size_t *data_at,
                          const char *field) {
    *data = NULL;
    *len = 0;
    *data_at = 0;
    size_t at = r->pos;
    uint64_t l;
    ig_status st = read_varint(r, &l);
    if (st != IG_OK) return st;
    if (l > r->n - r->pos) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "field %s says it is %llu bytes long, but only %zu bytes of its message remain",
                 field, (unsigned long long)l, r->n - r->pos);
        return fail_at(r, at, msg);
    }
    *data = r->p + r->pos;
    *len = (size_t)l;
    *data_at = r->pos;
    r->pos += (size_t)l;
    return IG_OK;
}

/* Skips a field of an unknown number. */
static ig_status skip_field(pb *r, int wt, size_t at) {
    uint64_t v;
    const uint8_t *d;
    size_t l, dat;
    switch (wt) {
    case WT_VARINT:
        return read_varint(r, &v);
    case WT_I64:
        if (r->n - r->pos < 8) return fail_at(r, r->pos, "expected 8 bytes of a 64-bit field");
        r->pos += 8;
        return IG_OK;
    case WT_I32:
        if (r->n - r->pos < 4) return fail_at(r, r->pos, "expected 4 bytes of a 32-bit field");
        r->pos += 4;
        return IG_OK;
    case WT_LEN:
        return read_len(r, &d, &l, &dat, "(unknown)");
    default: {
        char msg[160];
        snprintf(msg, sizeof msg, "a field with wire type %s, which no ModelProto field has",
                 wire_name(wt));
        return fail_at(r, at, msg);
    }
    }
}

/* Checks that a known field has the wire type its declaration gives it. */
static ig_status want_wt(pb *r, int wt, int want, size_t at, const char *msg_name, uint32_t field,
                         const char *field_name) {
    if (wt == want) return IG_OK;
    char msg[256];
    snprintf(msg, sizeof msg, "%s field %u (%s) has wire type %s, expected %s", msg_name, field,
             field_name, wire_name(wt), wire_name(want));
    return fail_at(r, at, msg);
}

static ig_status read_fixed32(pb *r, uint32_t *v) {
    if (r->n - r->pos < 4) return fail_at(r, r->pos, "expected the 4 bytes of a 32-bit field");
    const uint8_t *b = r->p + r->pos;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    r->pos += 4;
    return IG_OK;
}

/* A sub-message of r at data[0..len) (data_at: its offset in r). */
static pb sub(const pb *r, const uint8_t *data, size_t len, size_t data_at) {
    pb s = {data, len, 0, r->base + data_at, r->where, r->err};
    return s;
}

static ig_status set_str(char **dst, const uint8_t *s, size_t n, ig_err *err) {
    char *c = malloc(n + 1);
    if (!c) return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading a SentencePiece model");
    memcpy(c, s, n);
    c[n] = '\0';
    free(*dst);
    *dst = c;
    return IG_OK;
}

/* ModelProto.SentencePiece -> piece id m->n_pieces. */
static ig_status read_piece(pb *r, ig_spm *m) {
    const uint8_t *piece = (const uint8_t *)"";
    size_t plen = 0;
    float score = 0;
    uint64_t type = IG_SPM_NORMAL;
    size_t type_at = 0;
    ig_status st = IG_OK;
    while (st == IG_OK && r->pos < r->n) {
        uint32_t f;
        int wt;
        size_t at, dat;
        if ((st = read_tag(r, &f, &wt, &at)) != IG_OK) break;
        if (f == 1) {
            if ((st = want_wt(r, wt, WT_LEN, at, "SentencePiece", f, "piece")) == IG_OK)
                st = read_len(r, &piece, &plen, &dat, "piece");
        } else if (f == 2) {
            uint32_t bits = 0;
            if ((st = want_wt(r, wt, WT_I32, at, "SentencePiece", f, "score")) == IG_OK &&
                (st = read_fixed32(r, &bits)) == IG_OK)
                memcpy(&score, &bits, sizeof score);
        } else if (f == 3) {
            type_at = r->pos;
            if ((st = want_wt(r, wt, WT_VARINT, at, "SentencePiece", f, "type")) == IG_OK)
                st = read_varint(r, &type);
        } else {
            st = skip_field(r, wt, at);
        }
    }
    if (st != IG_OK) return st;
    char where[300];
    snprintf(where, sizeof where, "%s: piece %zu", r->where, m->n_pieces);
    if (type < IG_SPM_NORMAL || type > IG_SPM_BYTE) {
        char msg[160];
        snprintf(msg, sizeof msg, "piece %zu has type %llu, expected 1 (NORMAL) .. 6 (BYTE)",
                 m->n_pieces, (unsigned long long)type);
        return fail_at(r, type_at, msg);
    }
    return ig_spm_add_piece(m, piece, plen, score, (int)type, where, r->err);
}

static ig_status read_trainer(pb *r, ig_spm *m) {
    ig_status st = IG_OK;
    while (st == IG_OK && r->pos < r->n) {
        uint32_t f;
        int wt;
        size_t at, dat, len;
        uint64_t v;
        const uint8_t *d;
        if ((st = read_tag(r, &f, &wt, &at)) != IG_OK) break;
        switch (f) {
        case 3: /* model_type */
            if ((st = want_wt(r, wt, WT_VARINT, at, "TrainerSpec", f, "model_type")) != IG_OK ||
                (st = read_varint(r, &v)) != IG_OK)
                break;
            if (v < IG_SPM_UNIGRAM || v > IG_SPM_CHAR) {
                char msg[160];
                snprintf(msg, sizeof msg,
                         "TrainerSpec.model_type is %llu, expected 1 (UNIGRAM), 2 (BPE), 3 "
                         "(WORD) or 4 (CHAR)",
                         (unsigned long long)v);
                st = fail_at(r, at, msg);
                break;
            }
            m->model_type = (int)v;
            break;
        case 24: /* treat_whitespace_as_suffix */
        case 35: /* byte_fallback */
            if ((st = want_wt(r, wt, WT_VARINT, at, "TrainerSpec", f,
                              f == 24 ? "treat_whitespace_as_suffix" : "byte_fallback")) != IG_OK ||
                (st = read_varint(r, &v)) != IG_OK)
                break;
            *(f == 24 ? &m->ws_suffix : &m->byte_fallback) = v != 0;
            break;
        case 44: /* unk_surface */
        case 45: /* unk_piece */
        case 46: /* bos_piece */
        case 47: /* eos_piece */
        case 48: /* pad_piece */ {
            static const char *const names[] = {"unk_surface", "unk_piece", "bos_piece",
                                                "eos_piece", "pad_piece"};
            char **dst[] = {&m->unk_surface, &m->unk_piece, &m->bos_piece, &m->eos_piece,
                            &m->pad_piece};
            if ((st = want_wt(r, wt, WT_LEN, at, "TrainerSpec", f, names[f - 44])) == IG_OK &&
                (st = read_len(r, &d, &len, &dat, names[f - 44])) == IG_OK)
                st = set_str(dst[f - 44], d, len, r->err);
            break;
        }
        default:
            st = skip_field(r, wt, at);
        }
    }
    return st;
}

static ig_status read_normalizer(pb *r, ig_spm_norm *ns) {
    ig_status st = IG_OK;
    while (st == IG_OK && r->pos < r->n) {
        uint32_t f;
        int wt;
        size_t at, dat, len;
        uint64_t v;
        const uint8_t *d;
        if ((st = read_tag(r, &f, &wt, &at)) != IG_OK) break;
        switch (f) {
        case 1: /* name */
            if ((st = want_wt(r, wt, WT_LEN, at, "NormalizerSpec", f, "name")) == IG_OK &&
                (st = read_len(r, &d, &len, &dat, "name")) == IG_OK)
                snprintf(ns->name, sizeof ns->name, "%.*s", (int)(len < 63 ? len : 63),
                         (const char *)d);
            break;
        case 2: /* precompiled_charsmap */
            if ((st = want_wt(r, wt, WT_LEN, at, "NormalizerSpec", f, "precompiled_charsmap")) !=
                    IG_OK ||
                (st = read_len(r, &d, &len, &dat, "precompiled_charsmap")) != IG_OK)
                break;
            free(ns->charsmap);
            ns->charsmap = malloc(len ? len : 1);
            if (!ns->charsmap) {
                st = ig_err_set(r->err, IG_ERR_NOMEM, "out of memory reading %s", r->where);
                break;
            }
            memcpy(ns->charsmap, d, len);
            ns->charsmap_len = len;
            ns->charsmap_at = r->base + dat;
            break;
        case 3: /* add_dummy_prefix */
        case 4: /* remove_extra_whitespaces */
        case 5: /* escape_whitespaces */ {
            static const char *const names[] = {"add_dummy_prefix", "remove_extra_whitespaces",
                                                "escape_whitespaces"};
            if ((st = want_wt(r, wt, WT_VARINT, at, "NormalizerSpec", f, names[f - 3])) != IG_OK ||
                (st = read_varint(r, &v)) != IG_OK)
                break;
            int *dst[] = {&ns->add_dummy_prefix, &ns->remove_extra_whitespaces,
                          &ns->escape_whitespaces};
            *dst[f - 3] = v != 0;
            break;
        }
        default:
            st = skip_field(r, wt, at);
        }
    }
    return st;
}

ig_status ig_spm_parse_model(ig_spm *m, const uint8_t *data, size_t n, const char *where,
                             ig_err *err) {
    pb r = {data, n, 0, 0, where, err};
    ig_status st = IG_OK;
    while (st == IG_OK && r.pos < r.n) {
        uint32_t f;
        int wt;
        size_t at, dat, len;
        const uint8_t *d;
        if ((st = read_tag(&r, &f, &wt, &at)) != IG_OK) break;
        static const char *const names[] = {
            "", "pieces", "trainer_spec", "normalizer_spec", "self_test_data", "denormalizer_spec"};
        if (f >= 1 && f <= 5) {
            if ((st = want_wt(&r, wt, WT_LEN, at, "ModelProto", f, names[f])) != IG_OK ||
                (st = read_len(&r, &d, &len, &dat, names[f])) != IG_OK)
                break;
            pb s = sub(&r, d, len, dat);
            if (f == 1)
                st = read_piece(&s, m);
            else if (f == 2)
                st = read_trainer(&s, m);
            else if (f == 3)
                st = read_normalizer(&s, &m->norm);
            else if (f == 5)
                st = read_normalizer(&s, &m->denorm), m->has_denorm = 1;
        } else {
            st = skip_field(&r, wt, at);
        }
    }
    return st;
}

/* A varint at s[*i..n) (at most 5 bytes: lengths of the first piece), or -1. */
static long sniff_varint(const uint8_t *s, size_t n, size_t *i) {
    long v = 0;
    for (int shift = 0; shift < 35 && *i < n; shift += 7) {
        uint8_t b = s[(*i)++];
        v |= (long)(b & 0x7F) << shift;
        if (!(b & 0x80)) return v;
    }
    return -1;
}

int ig_spm_sniff(const uint8_t *head, size_t n) {
    /* field 1 (pieces), length-delimited, holding the first SentencePiece: its piece (field 1, a
     * string), then its score (field 2, 32-bit) or type (field 3), or the message's end */
    size_t i = 1;
    if (n < 4 || head[0] != 0x0A) return 0;
    long msg = sniff_varint(head, n, &i);
    size_t start = i;
    if (msg < 3 || i >= n || head[i++] != 0x0A) return 0;
    long plen = sniff_varint(head, n, &i);
    if (plen < 1 || plen + 2 > msg) return 0;
    size_t after = i + (size_t)plen;
    if (after == start + (size_t)msg) return 1;
    if (after >= n) return n >= 64; /* a long first piece: what was read is consistent */
    return head[after] == 0x15 || head[after] == 0x18;
}

ig_status ig_tok_load_spm(ig_tokenizer **out, ig_ctx *ctx, const char *path, ig_err *err) {
    *out = NULL;
    char *data = NULL;
    size_t n = 0;
    ig_status st = ig_read_file_max(path, IG_TOK_FILE_MAX, &data, &n, err);
    if (st != IG_OK) return st;
    ig_spm *m = ig_spm_new();
    if (!m) {
        free(data);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", path);
    }
    if (n == 0)
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: the file is empty, expected a SentencePiece model (a protobuf "
                        "ModelProto)",
                        path);
    else
        st = ig_spm_parse_model(m, (const uint8_t *)data, n, path, err);
    free(data);
    if (st != IG_OK) {
        ig_spm_free(m);
        return st;
    }
    return ig_spm_finish(out, ctx, m, path, err);
}
