/* tokenizer_spm_internal.h - private to preprocess/: SentencePiece models (unigram and BPE), read
 * from a SentencePiece .model file (a protobuf ModelProto, tokenizer_spm_proto.c) or from a
 * Hugging Face tokenizer.json with a Unigram model (tokenizer_spm_hf.c), normalised as
 * SentencePiece normalises (tokenizer_spm_norm.c) and segmented by its unigram Viterbi search or
 * its score-ordered BPE merges (tokenizer_spm_encode.c); decoding and the model's tables are in
 * tokenizer_spm.c.
 *
 * An ig_tokenizer whose `spm` is set is one of these: the generic fields (name, vocab_size, eod,
 * hash) are filled for the public accessors, and ig_encoder_* / ig_tokenizer_decode hand over to
 * the functions below.
 */
#ifndef INGOT_TOKENIZER_SPM_INTERNAL_H
#define INGOT_TOKENIZER_SPM_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "preprocess/preprocess.h"

/* ModelProto.SentencePiece.Type */
enum {
    IG_SPM_NORMAL = 1,
    IG_SPM_UNKNOWN = 2,
    IG_SPM_CONTROL = 3,
    IG_SPM_USER_DEFINED = 4,
    IG_SPM_UNUSED = 5,
    IG_SPM_BYTE = 6,
};

/* TrainerSpec.ModelType */
enum { IG_SPM_UNIGRAM = 1, IG_SPM_BPE = 2, IG_SPM_WORD = 3, IG_SPM_CHAR = 4 };

/* ---- a double-array trie over byte strings (tokenizer_spm.c) ---------------------------------
 * Unit s's child by byte c is unit base + c when that unit's check is s; value where a key ends
 * (the key's id, or what the builder was given), -1 elsewhere, and the key's score beside it (one
 * cache line holds four units: the search reads nothing else). Index 0 is the root. Used for the
 * pieces (exact lookup), the Viterbi search's edges and the user-defined symbols (longest
 * prefix). */
typedef struct ig_spm_unit {
    int32_t base, check, value;
    float score;
} ig_spm_unit;

typedef struct ig_spm_trie {
    ig_spm_unit *u;
    uint32_t n;
} ig_spm_trie;

/* Builds t over keys (key k: bytes arena[off[k] .. off[k] + len[k]), value values[k] (NULL: k)
 * and score scores[k] (NULL: 0)) taken where take[k] is non-zero (take NULL: all). Keys must be
 * distinct and non-empty. */
ig_status ig_spm_trie_build(ig_spm_trie *t, const uint8_t *arena, const uint32_t *off,
                            const uint32_t *len, const uint8_t *take, const int32_t *values,
                            const float *scores, size_t n, ig_err *err);
void ig_spm_trie_free(ig_spm_trie *t);

/* The value of key s[0..n), or -1. */
static inline int32_t ig_spm_trie_find(const ig_spm_trie *t, const uint8_t *s, size_t n) {
    if (!t->u) return -1;
    uint32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t next = (uint32_t)(t->u[cur].base + (int32_t)s[i]);
        if (next >= t->n || t->u[next].check != (int32_t)cur) return -1;
        cur = next;
    }
    return t->u[cur].value;
}

/* ---- the normaliser (tokenizer_spm_norm.c) ----------------------------------------------------
 */

/* NormalizerSpec, with its precompiled character map decoded: a darts-clone double array (32-bit
 * units) over the UTF-8 sequences that have a rule, whose leaves point into a blob of
 * NUL-terminated replacement strings. */
typedef struct ig_spm_norm {
    char name[64];
    uint8_t *charsmap; /* owned: the blob as stored (4-byte trie size, trie, strings) */
    size_t charsmap_len;
    size_t charsmap_at; /* the blob's byte offset in its file (for messages); SIZE_MAX: none */
    uint32_t *units;    /* owned, aligned copy of the trie */
    size_t n_units;
    const char *strings; /* into charsmap */
    size_t strings_len;
    uint8_t first[256]; /* 1: a rule may start with this byte */
    /* 1: an ASCII byte that is its own normalisation (no rule, no user-defined symbol starts with
     * it, not a space): runs of them are copied as they are */
    /* a bit per code point of U+0080 .. U+FFFF: no rule starts with it (the character's bytes
     * leave the trie), so it is its own normalisation; NULL: no map */
    uint8_t *bmp_plain;
    uint8_t plain[256];
    /* ASCII bytes (a space too) that only a longer rule starts with (no rule of their own, no
     * user-defined symbol): alone[c] 1, and after[c] the bits of the bytes that may follow c in a
     * rule; followed by another byte, c is its own normalisation */
    uint8_t alone[128];
    uint8_t after[128][32];
    int add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;
} ig_spm_norm;

/* Decodes and checks ns->charsmap (every unit a lookup can reach, every replacement string in
 * the blob and NUL-terminated); errors name where (the file) and the byte offset in the blob.
 * user: the user-defined symbols that normalisation keeps (NULL: none). */
struct ig_spm_trie;
ig_status ig_spm_norm_init(ig_spm_norm *ns, const ig_spm_trie *user, const char *where,
                           ig_err *err);
void ig_spm_norm_free(ig_spm_norm *ns);

/* A growable byte buffer (the encoder's scratch). */
typedef struct ig_spm_buf {
    uint8_t *p;
    size_t n, cap;
    ig_ctx *ctx; /* allocates p (NULL: malloc) */
} ig_spm_buf;

/* Makes room for need more bytes; 0, or -1 when out of memory. */
static inline int ig_spm_buf_room(ig_spm_buf *b, size_t need) {
    if (b->cap - b->n >= need) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->n < need) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    uint8_t *p = ig_realloc(b->ctx, b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

/* Byte length of the UTF-8 sequence that starts with byte c, as SentencePiece counts it (1 for
 * ASCII and stray continuation bytes). */
static inline size_t ig_spm_char_len(uint8_t c) {
    static const uint8_t k[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return k[c >> 4];
}

/* 1 when s[0..n) starts with a valid UTF-8 character (*len its length), else 0 (*len 1); a
 * literal U+FFFD counts as valid. */
int ig_spm_utf8_valid(const uint8_t *s, size_t n, size_t *len);

struct ig_spm;
/* Normalises s[0..n) into out (replacing its contents) as SentencePiece's Normalizer does with
 * spec ns: the model's user-defined symbols kept as they are (user NULL: none), the character
 * map's longest rule at each position, invalid UTF-8 as U+FFFD, extra white space removed, the
 * dummy prefix, spaces escaped as U+2581. ws_suffix: the dummy ' ' goes at the end. Returns 0, or
 * -1 when out of memory. */
int ig_spm_normalize(const ig_spm_norm *ns, const ig_spm_trie *user, int ws_suffix,
                     const uint8_t *s, size_t n, ig_spm_buf *out);
/* Longest user-defined symbol at s[0..n) (its length), or 0. */
size_t ig_spm_user_match(const ig_spm_trie *user, const uint8_t *s, size_t n);

/* ---- the model --------------------------------------------------------------------------------
 */

typedef struct ig_spm {
    int model_type;      /* IG_SPM_UNIGRAM or IG_SPM_BPE */
    size_t n_pieces;     /* ids 0 .. n_pieces - 1 */
    uint32_t *off, *len; /* [n_pieces] piece bytes in arena */
    float *score;        /* [n_pieces] */
    uint8_t *type;       /* [n_pieces] IG_SPM_* */
    uint8_t *arena;
    size_t arena_len, arena_cap;
    /* TrainerSpec */
    int byte_fallback, ws_suffix;
    char *unk_surface; /* decoded text of <unk>; NULL: " \xE2\x81\x87 " */
    char *unk_piece, *bos_piece, *eos_piece, *pad_piece; /* NULL: "<unk>", "<s>", ... */
    ig_spm_norm norm;
    ig_spm_norm denorm; /* applied after decoding when it has a character map */
    int has_denorm;
    /* derived by ig_spm_finish */
    int32_t unk_id, eos_id;
    int32_t byte_id[256];       /* <0xNN> pieces (-1: none) */
    float min_score, max_score; /* over NORMAL pieces, as SentencePiece starts them */
    ig_spm_trie pieces;         /* NORMAL, USER_DEFINED and UNUSED pieces */
    /* the Viterbi search's edges: NORMAL pieces (value: id, score) and USER_DEFINED ones (value:
     * -2 - id); an UNUSED piece is no edge */
    ig_spm_trie viterbi;
    ig_spm_trie reserved; /* CONTROL, UNKNOWN and BYTE pieces */
    ig_spm_trie user;     /* USER_DEFINED pieces (the normaliser's prefix matcher) */
    uint32_t *specials;   /* CONTROL and UNKNOWN ids, longest first (IG_ENCODE_ALLOW_SPECIAL) */
    size_t n_specials;
} ig_spm;

/* An empty model with the protobuf defaults. NULL when out of memory. */
ig_spm *ig_spm_new(void);
void ig_spm_free(ig_spm *m);
/* Appends piece id n_pieces. */
ig_status ig_spm_add_piece(ig_spm *m, const void *bytes, size_t len, float score, int type,
                           const char *where, ig_err *err);
/* Checks the model as SentencePiece does when it loads one (non-empty unique pieces, one unknown
 * piece, 256 byte pieces with byte_fallback, ...), decodes the normaliser and builds the tables;
 * then wraps it in a tokenizer (which owns m from then on, also on failure). */
ig_status ig_spm_finish(ig_tokenizer **out, ig_ctx *ctx, ig_spm *m, const char *where, ig_err *err);

/* PieceToId: the id of a piece (reserved pieces first), or the unknown id. */
int32_t ig_spm_piece_to_id(const ig_spm *m, const uint8_t *s, size_t n);

/* The .model reader (tokenizer_spm_proto.c): data[0..n) is the file's contents. */
ig_status ig_spm_parse_model(ig_spm *m, const uint8_t *data, size_t n, const char *where,
                             ig_err *err);
ig_status ig_tok_load_spm(ig_tokenizer **out, ig_ctx *ctx, const char *path, ig_err *err);
/* 1 when the first bytes of a file (head[0..n)) look like a serialized ModelProto. */
int ig_spm_sniff(const uint8_t *head, size_t n);

/* A tokenizer.json whose model is Unigram (tokenizer_spm_hf.c); root is the parsed file. */
struct json_t;
ig_status ig_tok_load_spm_hf(ig_tokenizer **out, ig_ctx *ctx, const char *path, struct json_t *root,
                             ig_err *err);

/* ---- encoding (tokenizer_spm_encode.c) --------------------------------------------------------
 */

typedef struct ig_spm_encoder ig_spm_encoder;
ig_status ig_spm_encoder_create(ig_spm_encoder **out, const ig_spm *m, ig_ctx *ctx, ig_err *err);
void ig_spm_encoder_free(ig_spm_encoder *e);
/* Appends the ids of text[0..len) to out (flags: IG_ENCODE_ALLOW_SPECIAL). */
ig_status ig_spm_encode(ig_spm_encoder *e, const char *text, size_t len, int flags, ig_tokens *out,
                        ig_err *err);

/* ---- decoding (tokenizer_spm.c) ---------------------------------------------------------------
 */

/* Appends the text of ids as SentencePiece's DecodeIds gives it (cont: the ids continue a text
 * decoded before, so a leading U+2581 is a space and byte pieces are copied as they are). */
ig_status ig_spm_decode(const ig_tokenizer *t, const int32_t *ids, size_t n, int cont, char **buf,
                        size_t *len, size_t *cap, ig_err *err);

#endif
