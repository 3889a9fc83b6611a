/* pretokenize.c - the pre-tokenizers of GPT-2 (r50k_base), cl100k_base and o200k_base, written as
 * hand-made scanners that give exactly the matches of the reference regular expressions (leftmost
 * alternative first, greedy quantifiers with backtracking), without a regex engine:
 *
 *   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   cl100k: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   o200k:  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:C)?|
 *           [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:C)?|
 *           \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * Unicode classes come from utf8proc's general categories; \s is the White_Space property, from
 * a table generated at build time from unicode-data's PropList.txt (utf8proc lacks it). Both go
 * into a per-code-point byte table at load, so the hot path is one load per character. Bytes that
 * are not valid UTF-8 are single "other" characters (neither letter, number nor space).
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tokenizer_internal.h"

#include "ig_white_space.h" /* generated: ig_white_space_ranges */

const char *ig_pattern_name(ig_pattern p) {
    switch (p) {
    case IG_PAT_GPT2:
        return "gpt2";
    case IG_PAT_CL100K:
        return "cl100k_base";
    case IG_PAT_O200K:
        return "o200k_base";
    }
    return "?";
}

static uint8_t class_of(utf8proc_int32_t cp) {
    uint8_t c = 0;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LT:
        c = IG_CL_L | IG_CL_UP;
        break;
    case UTF8PROC_CATEGORY_LL:
        c = IG_CL_L | IG_CL_LO;
        break;
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        c = IG_CL_L | IG_CL_UP | IG_CL_LO;
        break;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
        c = IG_CL_UP | IG_CL_LO;
        break;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        c = IG_CL_N;
        break;
    default:
        break;
    }
    return c;
}

ig_status ig_pretok_init(ig_pretok *pt, ig_pattern pattern, ig_err *err) {
    pt->pattern = pattern;
    pt->cls = malloc(IG_CP_LIMIT);
    if (!pt->cls) return ig_err_set(err, IG_ERR_NOMEM, "out of memory for the Unicode class table");
    for (uint32_t cp = 0; cp < IG_CP_LIMIT; cp++) {
        /* surrogates never occur in valid UTF-8; they stay "other" */
        pt->cls[cp] = (cp >= 0xD800 && cp < 0xE000) ? 0 : class_of((utf8proc_int32_t)cp);
    }
    size_t n_ws = sizeof ig_white_space_ranges / sizeof ig_white_space_ranges[0];
    for (size_t i = 0; i < n_ws; i++)
        for (uint32_t cp = ig_white_space_ranges[i][0]; cp <= ig_white_space_ranges[i][1]; cp++)
            pt->cls[cp] |= IG_CL_WS;
    pt->cls['\r'] |= IG_CL_CRLF;
    pt->cls['\n'] |= IG_CL_CRLF;
    return IG_OK;
}

void ig_pretok_free(ig_pretok *pt) {
    free(pt->cls);
    pt->cls = NULL;
}

/* The class of the character at s[i] (i < n) and its length in bytes. Invalid UTF-8 (a stray
 * continuation byte, a truncated or overlong sequence, a surrogate, past U+10FFFF) is one "other"
 * byte. A character of two to four bytes is decoded without a loop over its bytes. */
static inline uint8_t cls_at(const uint8_t *cls, const uint8_t *s, size_t i, size_t n,
                             size_t *len) {
    uint32_t b = s[i];
    if (b < 0x80) {
        *len = 1;
        return cls[b];
    }
    if (b >= 0xC2 && b <= 0xDF) { /* leads from 0xC2 on cannot be overlong */
        if (i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
            *len = 2;
            return cls[(b & 0x1F) << 6 | (s[i + 1] & 0x3Fu)];
        }
    } else if (b >= 0xE0 && b <= 0xEF) {
        if (i + 2 < n && ((s[i + 1] | (uint32_t)s[i + 2] << 8) & 0xC0C0) == 0x8080) {
            uint32_t cp = (b & 0x0F) << 12 | (s[i + 1] & 0x3Fu) << 6 | (s[i + 2] & 0x3Fu);
            if (cp >= 0x800 && (cp & 0xF800) != 0xD800) {
                *len = 3;
                return cls[cp];
            }
        }
    } else if (b >= 0xF0 && b <= 0xF4) {
        if (i + 3 < n && ((s[i + 1] | (uint32_t)s[i + 2] << 8 | (uint32_t)s[i + 3] << 16) &
                          0xC0C0C0) == 0x808080) {
            uint32_t cp = (b & 0x07) << 18 | (s[i + 1] & 0x3Fu) << 12 | (s[i + 2] & 0x3Fu) << 6 |
                          (s[i + 3] & 0x3Fu);
            if (cp >= 0x10000 && cp < IG_CP_LIMIT) {
                *len = 4;
                return cls[cp];
            }
        }
    }
    *len = 1;
    return 0;
}

#define IS_OTHER(c) (!((c) & (IG_CL_L | IG_CL_N | IG_CL_WS)))

/* End of the run of characters whose class has any bit of `mask` (want != 0) or none of the bits
 * of `mask` (want == 0), from i. */
static inline size_t run_of(const uint8_t *cls, const uint8_t *s, size_t i, size_t n, uint8_t mask,
                            int want) {
    int stop = !want; /* an ASCII byte with (class & mask) != 0 equal to this ends the run */
    while (i < n) {
        while (s[i] < 0x80) { /* ASCII, most text: one table load per byte */
            if (((cls[s[i]] & mask) != 0) == stop) return i;
            if (++i == n) return i;
        }
        size_t l;
        uint8_t c = cls_at(cls, s, i, n, &l);
        if (((c & mask) != 0) != (want != 0)) break;
        i += l;
    }
    return i;
}

/* The end of the run of ASCII letters [A-Za-z] from i, 16 bytes a step (SSE2) while 16 remain:
 * one compare and no branch per byte where the byte loop mispredicts at every word's end. Bytes
 * >= 0x80 end it too (the general loop takes them on). */
static inline size_t ascii_letters(const uint8_t *s, size_t i, size_t n) {
#if defined(__SSE2__)
    const __m128i case_bit = _mm_set1_epi8(0x20), before_a = _mm_set1_epi8('a' - 1),
                  after_z = _mm_set1_epi8('z' + 1);
    while (i + 16 <= n) {
        __m128i v = _mm_or_si128(_mm_loadu_si128((const __m128i *)(s + i)), case_bit);
        /* signed compares: bytes >= 0x80 are negative, so never letters */
        __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(v, before_a), _mm_cmplt_epi8(v, after_z));
        unsigned not_letter = ~(unsigned)_mm_movemask_epi8(letter) & 0xFFFFu;
        if (not_letter) return i + (size_t)__builtin_ctz(not_letter);
        i += 16;
    }
#endif
    while (i < n && (uint8_t)((s[i] | 0x20) - 'a') < 26) i++;
    return i;
}

static inline size_t run_letters(const uint8_t *cls, const uint8_t *s, size_t i, size_t n) {
    i = ascii_letters(s, i, n);
    if (i == n || s[i] < 0x80) return i;
    return run_of(cls, s, i, n, IG_CL_L, 1);
}

static inline size_t run_other(const uint8_t *cls, const uint8_t *s, size_t i, size_t n) {
    return run_of(cls, s, i, n, IG_CL_L | IG_CL_N | IG_CL_WS, 0);
}

/* A contraction 's 't 're 've 'm 'll 'd at s[i] == '\''; case-insensitive (with the simple case
 * folding of the reference engines: 's' also matches U+017F LATIN SMALL LETTER LONG S) or not.
 * Returns its end, or 0. */
static inline size_t contraction(const uint8_t *s, size_t i, size_t n, int icase) {
    if (i + 1 >= n) return 0;
    uint8_t a = s[i + 1];
    if (icase && a == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return i + 3; /* 'ſ */
    if (icase && a >= 'A' && a <= 'Z') a = (uint8_t)(a + 32);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= n) return 0;
    uint8_t b = s[i + 2];
    if (icase && b >= 'A' && b <= 'Z') b = (uint8_t)(b + 32);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
}

/* The white-space alternatives shared by the three patterns, at a white-space character s[i]:
 * (cl100k/o200k only) \s*[\r\n]+, then \s+(?!\S), then \s+. */
static inline size_t white_space(const uint8_t *cls, const uint8_t *s, size_t i, size_t n,
                                 int crlf_rule) {
    size_t j = i, last = i, count = 0, crlf_end = 0;
    while (j < n) {
        size_t l;
        uint8_t c = cls_at(cls, s, j, n, &l);
        if (!(c & IG_CL_WS)) break;
        if (c & IG_CL_CRLF) crlf_end = j + l;
        last = j;
        j += l;
        count++;
    }
    if (crlf_rule && crlf_end) return crlf_end;
    if (j == n || count == 1) return j;
    return last; /* give back the last space: it starts the next pre-token */
}

static size_t next_gpt2(const uint8_t *cls, const uint8_t *s, size_t i, size_t n) {
    if (s[i] == '\'') {
        size_t e = contraction(s, i, n, 0);
        if (e) return e;
    }
    size_t l0;
    uint8_t c = cls_at(cls, s, i, n, &l0);
    if (s[i] == ' ' && i + 1 < n) {
        size_t l1;
        uint8_t c1 = cls_at(cls, s, i + 1, n, &l1);
        if (c1 & IG_CL_L) return run_letters(cls, s, i + 1 + l1, n);
        if (c1 & IG_CL_N) return run_of(cls, s, i + 1 + l1, n, IG_CL_N, 1);
        if (IS_OTHER(c1)) return run_other(cls, s, i + 1 + l1, n);
    }
    if (c & IG_CL_L) return run_letters(cls, s, i + l0, n);
    if (c & IG_CL_N) return run_of(cls, s, i + l0, n, IG_CL_N, 1);
    if (IS_OTHER(c)) return run_other(cls, s, i + l0, n);
    return white_space(cls, s, i, n, 0);
}

/* ` ?[^\s\p{L}\p{N}]+` followed by a run of bytes in `tail` ("\r\n" or "\r\n/"); 0 if no match. */
static inline size_t punct_run(const uint8_t *cls, const uint8_t *s, size_t i, size_t n, uint8_t c,
                               size_t l0, int slash) {
    size_t j;
    if (IS_OTHER(c)) {
        j = run_other(cls, s, i + l0, n);
    } else if (s[i] == ' ' && i + 1 < n) {
        size_t l1;
        uint8_t c1 = cls_at(cls, s, i + 1, n, &l1);
        if (!IS_OTHER(c1)) return 0;
        j = run_other(cls, s, i + 1 + l1, n);
    } else {
        return 0;
    }
    while (j < n && (s[j] == '\r' || s[j] == '\n' || (slash && s[j] == '/'))) j++;
    return j;
}

/* \p{N}{1,3} from a number at i (its length l0). */
static inline size_t digits3(const uint8_t *cls, const uint8_t *s, size_t i, size_t n, size_t l0) {
    size_t j = i + l0;
    for (int k = 1; k < 3 && j < n; k++) {
        size_t l;
        if (!(cls_at(cls, s, j, n, &l) & IG_CL_N)) break;
        j += l;
    }
    return j;
}

static size_t next_cl100k(const uint8_t *cls, const uint8_t *s, size_t i, size_t n) {
    if (s[i] == '\'') {
        size_t e = contraction(s, i, n, 1);
        if (e) return e;
    }
    size_t l0;
    uint8_t c = cls_at(cls, s, i, n, &l0);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (!(c & (IG_CL_L | IG_CL_N | IG_CL_CRLF)) && i + l0 < n) {
        size_t l1;
        if (cls_at(cls, s, i + l0, n, &l1) & IG_CL_L) return run_letters(cls, s, i + l0 + l1, n);
    }
    if (c & IG_CL_L) return run_letters(cls, s, i + l0, n);
    if (c & IG_CL_N) return digits3(cls, s, i, n, l0);
    size_t e = punct_run(cls, s, i, n, c, l0, 0);
    if (e) return e;
    return white_space(cls, s, i, n, 1);
}

/* o200k's U*W+ (first == 0) or U+W* (first == 1) from s (U: IG_CL_UP, W: IG_CL_LO), with the
 * optional contraction after it. Returns the end, or 0 when it does not match at s. */
static inline size_t o200k_word(const uint8_t *cls, const uint8_t *s, size_t p, size_t n,
                                int upper_first) {
    size_t j = p, last_w_end = 0;
    while (j < n) {
        size_t l;
        uint8_t c = cls_at(cls, s, j, n, &l);
        if (!(c & IG_CL_UP)) break;
        j += l;
        if (c & IG_CL_LO) last_w_end = j;
    }
    size_t e;
    if (upper_first) {
        if (j == p) return 0;
        e = run_of(cls, s, j, n, IG_CL_LO, 1);
    } else {
        size_t l;
        if (j < n && (cls_at(cls, s, j, n, &l) & IG_CL_LO)) {
            e = run_of(cls, s, j + l, n, IG_CL_LO, 1);
        } else if (last_w_end) {
            e = last_w_end; /* U* gives back up to its last W character */
        } else {
            return 0;
        }
    }
    if (e < n && s[e] == '\'') {
        size_t ce = contraction(s, e, n, 1);
        if (ce) return ce;
    }
    return e;
}

static size_t next_o200k(const uint8_t *cls, const uint8_t *s, size_t i, size_t n) {
    size_t l0;
    uint8_t c = cls_at(cls, s, i, n, &l0);
    int prefix = !(c & (IG_CL_L | IG_CL_N | IG_CL_CRLF)) && i + l0 < n;
    size_t e;
    for (int alt = 0; alt < 2; alt++) {
        if (prefix && (e = o200k_word(cls, s, i + l0, n, alt))) return e;
        if ((e = o200k_word(cls, s, i, n, alt))) return e;
    }
    if (c & IG_CL_N) return digits3(cls, s, i, n, l0);
    e = punct_run(cls, s, i, n, c, l0, 1);
    if (e) return e;
    return white_space(cls, s, i, n, 1);
}

#if defined(__SSE2__)
/* The pieces of ASCII text without an apostrophe, 64 bytes at a time, from bit masks and no
 * branch per piece (the three patterns). On such text each pattern reduces to rules on
 * a byte and its near neighbours (classes: letter, digit, white space, carriage return or line
 * feed, other), written below as bit operations on the window's masks. A start decided from bytes
 * before the first byte that is not ASCII or is an apostrophe (where contractions and Unicode
 * classes come in), or that begins a pattern the rules leave out, is the general scanner's too;
 * the pieces between such starts are emitted and the rest is left to the general scanner. */

/* The classes of the 64 bytes from s[i] (bit j: byte i + j) and of the byte after them. */
typedef struct ascii_masks {
    uint64_t letter, digit, ws, sp, crlf, stop; /* stop: not ASCII, or an apostrophe */
    uint64_t upper, slash;                      /* [A-Z] and '/', for o200k only */
    uint8_t next;                               /* s[i + 64] */
} ascii_masks;

static inline void ascii_classes(const uint8_t *s, size_t i, int o200k, ascii_masks *m) {
    const __m128i case_bit = _mm_set1_epi8(0x20), before_a = _mm_set1_epi8('a' - 1),
                  after_z = _mm_set1_epi8('z' + 1), before_0 = _mm_set1_epi8('0' - 1),
                  after_9 = _mm_set1_epi8('9' + 1), space = _mm_set1_epi8(' '),
                  apos = _mm_set1_epi8('\''), before_tab = _mm_set1_epi8(8),
                  after_cr = _mm_set1_epi8(14), cr = _mm_set1_epi8('\r'), lf = _mm_set1_epi8('\n'),
                  slash = _mm_set1_epi8('/'), before_A = _mm_set1_epi8('A' - 1),
                  after_Z = _mm_set1_epi8('Z' + 1);
    memset(m, 0, sizeof *m);
    for (int q = 0; q < 4; q++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + i + 16 * q));
        __m128i lo = _mm_or_si128(v, case_bit);
        __m128i is_sp = _mm_cmpeq_epi8(v, space);
        uint64_t l = (unsigned)_mm_movemask_epi8(
            _mm_and_si128(_mm_cmpgt_epi8(lo, before_a), _mm_cmplt_epi8(lo, after_z)));
        uint64_t d = (unsigned)_mm_movemask_epi8(
            _mm_and_si128(_mm_cmpgt_epi8(v, before_0), _mm_cmplt_epi8(v, after_9)));
        uint64_t w = (unsigned)_mm_movemask_epi8(_mm_or_si128(
            is_sp, _mm_and_si128(_mm_cmpgt_epi8(v, before_tab), _mm_cmplt_epi8(v, after_cr))));
        uint64_t c =
            (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, lf)));
        uint64_t x = (unsigned)_mm_movemask_epi8(_mm_or_si128(v, _mm_cmpeq_epi8(v, apos)));
        m->letter |= l << (16 * q);
        m->digit |= d << (16 * q);
        m->ws |= w << (16 * q);
        m->sp |= (uint64_t)(unsigned)_mm_movemask_epi8(is_sp) << (16 * q);
        m->crlf |= c << (16 * q);
        m->stop |= x << (16 * q);
        if (o200k) {
            uint64_t u = (unsigned)_mm_movemask_epi8(
                _mm_and_si128(_mm_cmpgt_epi8(v, before_A), _mm_cmplt_epi8(v, after_Z)));
            m->upper |= u << (16 * q);
            m->slash |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, slash)) << (16 * q);
        }
    }
    m->next = s[i + 64];
}

static inline int is_ascii_ws(uint8_t b) {
    return b == ' ' || (b >= 9 && b <= 13);
}

/* GPT-2: a letter, digit or other byte starts a piece when the byte before it is of another class
 * and not a space (after a space, the space starts it: ` ?\p{L}+` and the like); a white-space
 * byte starts one when the byte before it is not white space (a run's first), and when it is the
 * last of a run of two or more that text follows (`\s+(?!\S)` leaves it to start the next piece,
 * a space taken by ` ?\p{L}+`..., or to be one, `\s+`). *stop64: the byte after the window
 * stops (bits past 63 of stop). */
static inline uint64_t gpt2_starts(const ascii_masks *m, uint64_t *stop, int *stop64) {
    uint64_t letter = m->letter, digit = m->digit, ws = m->ws;
    uint64_t other = ~(letter | digit | ws);
    uint64_t same =
        (letter & letter << 1) | (digit & digit << 1) | (other & other << 1) | (ws & ws << 1);
    uint64_t next_ws = (uint64_t)is_ascii_ws(m->next) << 63;
    *stop = m->stop;
    *stop64 = m->next >= 0x80 || m->next == '\'';
    return (~ws & ~same & ~(m->sp << 1)) | (ws & ~(ws << 1)) |
           (ws & ws << 1 & ~(ws >> 1 | next_ws));
}

/* cl100k:
 * - white space: a run's first byte starts a piece (`\s*[\r\n]+` takes the run up to its last \r
 *   or \n), unless it is a \r or \n after an other byte (the `[\r\n]*` of that byte's piece takes
 *   the run's leading \r\n bytes); so does the first byte after the leading \r\n bytes, and the
 *   last of two or more other white-space bytes that text follows (`\s+(?!\S)`);
 * - other bytes: a run's first, unless a space comes before it (taken by `' ?'` before the run);
 * - digits: a run's first (runs of four or more, cut in threes, are left out);
 * - letters: a run's first, unless a white-space byte other than \r \n comes before it, or a
 *   single other byte not after a space (`[^\r\n\p{L}\p{N}]?\p{L}+` takes it as the prefix).
 * Left out (stops): runs of white space with \r or \n after other white space, and the fourth
 * digit in a row. */
static inline uint64_t cl100k_starts(const ascii_masks *m, uint64_t *stop, int *stop64) {
    uint64_t letter = m->letter, digit = m->digit, ws = m->ws, sp = m->sp, crlf = m->crlf;
    uint64_t other = ~(letter | digit | ws), wnc = ws & ~crlf;
    uint8_t nb = m->next;
    int next_crlf = nb == '\r' || nb == '\n';
    uint64_t next_ws = ws >> 1 | (uint64_t)is_ascii_ws(nb) << 63;
    uint64_t next_cr = crlf >> 1 | (uint64_t)next_crlf << 63;
    uint64_t digits4 = digit & digit << 1 & digit << 2 & digit << 3;
    uint64_t st = m->stop | digits4;
    /* the byte after the window stops only as GPT-2's does: what follows the window's bytes
     * decides nothing else in it (a fourth digit after its last three) */
    *stop64 = nb >= 0x80 || nb == '\'';
    /* Where a run of white space's pieces end depends on its last \r or \n: a run with \r or \n
     * after other white space, and one that reaches the first stop or goes on past the window
     * (it may go on in U+0085 or U+00A0, and on to a \r or \n), is left out from its first
     * byte. */
    uint64_t late = wnc & next_cr;
    size_t f = st ? (size_t)__builtin_ctzll(st) : *stop64 ? 64 : 65;
    if (f >= 1 && f <= 64 && ((ws >> (f - 1)) & 1))
        late |= (uint64_t)1 << (f - 1);
    else if (f == 65 && (ws >> 63) && is_ascii_ws(nb))
        late |= (uint64_t)1 << 63;
    if (late) {
        uint64_t before = ~ws & ((((uint64_t)1) << __builtin_ctzll(late)) - 1);
        st |= (uint64_t)1 << (before ? 64 - __builtin_clzll(before) : 0);
    }
    *stop = st;
    uint64_t w =
        (ws & ~(ws << 1) & ~(crlf & other << 1)) | (wnc & crlf << 1) | (wnc & wnc << 1 & ~next_ws);
    uint64_t o = other & ~(other << 1) & ~(sp << 1);
    uint64_t d = digit & ~(digit << 1);
    uint64_t single_other = other << 1 & ~(other << 2) & ~(sp << 2);
    uint64_t l = letter & ~(letter << 1) & ~(wnc << 1) & ~single_other;
    return w | o | d | l;
}

/* Appends the ends of the pieces whose starts are sure (starts: the window's, bit 0 the caller's
 * boundary at i) and returns the new position, a piece boundary; or, with none, i and how far the
 * general scanner goes on (*scalar_until). */
static inline size_t emit_sure(size_t i, uint64_t starts, uint64_t stop, int stop64, size_t *ends,
                               size_t *k, size_t max, size_t *scalar_until) {
    /* sure: the starts whose neighbours (the byte after included) come before the first stop */
    size_t p = stop ? (size_t)__builtin_ctzll(stop) : stop64 ? 64 : 65;
    uint64_t sure = p < 2 ? 0 : p - 1 >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << (p - 1)) - 1);
    uint64_t more = starts & sure & ~(uint64_t)1;
    if (!more) {
        /* no whole piece here: the general scanner takes the window on where the text is mostly
         * not ASCII (every word would stop a window again), or up to the first stop */
        *scalar_until = i + (__builtin_popcountll(stop) > 2 ? 64 : p + 1);
        return i;
    }
    size_t at = i;
    while (more && *k < max) {
        at = i + (size_t)__builtin_ctzll(more);
        ends[(*k)++] = at;
        more &= more - 1;
    }
    return at;
}

/* o200k: cl100k's rules, but a letter run splits where a capital follows a small letter (its
 * words are `[A-Z]*[a-z]+` or `[A-Z]+[a-z]*` in ASCII, after the same optional prefix), and an
 * other byte's piece takes `[\r\n/]*` after it: a `/` after \r or \n is left out (a stop). */
static inline uint64_t o200k_starts(const ascii_masks *m, uint64_t *stop, int *stop64) {
    uint64_t starts = cl100k_starts(m, stop, stop64);
    uint64_t lower = m->letter & ~m->upper;
    *stop |= m->slash & m->crlf << 1;
    return starts | (m->upper & lower << 1);
}

static size_t ascii_window(ig_pattern pattern, const uint8_t *s, size_t i, size_t n, size_t *ends,
                           size_t *k, size_t max, size_t *scalar_until) {
    if (n - i < 65) {
        *scalar_until = n;
        return i;
    }
    ascii_masks m;
    ascii_classes(s, i, pattern == IG_PAT_O200K, &m);
    uint64_t stop, starts;
    int stop64;
    if (pattern == IG_PAT_GPT2)
        starts = gpt2_starts(&m, &stop, &stop64);
    else if (pattern == IG_PAT_CL100K)
        starts = cl100k_starts(&m, &stop, &stop64);
    else
        starts = o200k_starts(&m, &stop, &stop64);
    return emit_sure(i, starts | 1, stop, stop64, ends, k, max, scalar_until);
}
#endif

size_t ig_pretok_split(const ig_pretok *pt, const uint8_t *s, size_t i, size_t n, size_t *ends,
                       size_t max) {
    size_t k = 0;
    switch (pt->pattern) {
    case IG_PAT_GPT2:
    case IG_PAT_CL100K:
    case IG_PAT_O200K:
        for (size_t scalar_until = 0; i < n && k < max;) {
#if defined(__SSE2__)
            if (i >= scalar_until) {
                size_t j = ascii_window(pt->pattern, s, i, n, ends, &k, max, &scalar_until);
                if (j != i) {
                    i = j;
                    continue;
                }
            }
#endif
            ends[k++] = i = pt->pattern == IG_PAT_GPT2     ? next_gpt2(pt->cls, s, i, n)
                            : pt->pattern == IG_PAT_CL100K ? next_cl100k(pt->cls, s, i, n)
                                                           : next_o200k(pt->cls, s, i, n);
        }
        break;
    }
    return k;
}

size_t ig_pretok_next(const ig_pretok *pt, const uint8_t *s, size_t i, size_t n) {
    switch (pt->pattern) {
    case IG_PAT_GPT2:
        return next_gpt2(pt->cls, s, i, n);
    case IG_PAT_CL100K:
        return next_cl100k(pt->cls, s, i, n);
    case IG_PAT_O200K:
        return next_o200k(pt->cls, s, i, n);
    }
    return n;
}
