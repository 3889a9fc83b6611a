/* tokenizer_spm_norm.c - SentencePiece's normaliser: the precompiled character map, the
 * user-defined symbols kept as they are, and the white-space rules.
 *
 * A precompiled character map (NormalizerSpec.precompiled_charsmap, which carries nmt_nfkc,
 * nfkc, their _cf case-folding variants or a user's rules; identity has none) is
 *   u32 (little-endian) T · a darts-clone double array of T bytes (32-bit units) · strings
 * where the double array holds every UTF-8 sequence that has a rule, and a leaf's value is the
 * byte offset of its NUL-terminated replacement in the strings. A unit packs, from bit 0: the
 * label (8 bits), has_leaf (bit 8), an offset scale flag (bit 9), the offset (bits 10..30, times
 * 256 when bit 9 is set); bit 31 marks a leaf unit, whose bits 0..30 are the value. From a unit at
 * index i with offset o, the child by byte c is at (i ^ o) ^ c when its label is c, and the leaf
 * at i ^ o. At each position the longest rule wins (SentencePiece looks at the first 32 prefixes).
 *
 * The map comes from an untrusted file, so it is checked once when loaded: every unit a lookup
 * can reach from the root, every leaf's value inside the strings and NUL-terminated. Lookups
 * still bound every index (a unit may point past the array: that ends the match).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_spm_internal.h"

#define UNIT_LABEL(u)    ((u) & (0x80000000u | 0xFFu))
#define UNIT_HAS_LEAF(u) (((u) >> 8) & 1u)
#define UNIT_VALUE(u)    ((u)&0x7FFFFFFFu)
#define UNIT_OFFSET(u)   (((u) >> 10) << (((u) & (1u << 9)) >> 6))

#define MAX_CHARSMAP_RESULTS 32 /* SentencePiece's kMaxTrieResultsSize */
#define MAX_USER_RESULTS     64 /* its PrefixMatcher's kResultSize */

static ig_status map_error(const ig_spm_norm *ns, const char *where, size_t blob_off, ig_err *err,
                           const char *what) {
    if (ns->charsmap_at != SIZE_MAX)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: byte offset %zu (byte %zu of the precompiled_charsmap of "
                          "normalizer '%s'): %s",
                          where, ns->charsmap_at + blob_off, blob_off, ns->name, what);
    return ig_err_set(err, IG_ERR_FORMAT, "%s: byte %zu of the precompiled_charsmap: %s", where,
                      blob_off, what);
}

static int has_path(const ig_spm_norm *ns, const uint8_t *s, size_t n);

/* Whether the trie has a rule for the one byte c. */
static int has_leaf1(const ig_spm_norm *ns, uint8_t c) {
    uint32_t pos = UNIT_OFFSET(ns->units[0]) ^ c;
    return pos < ns->n_units && UNIT_LABEL(ns->units[pos]) == c && UNIT_HAS_LEAF(ns->units[pos]);
}

/* The bytes that are their own normalisation (ig_spm_norm.plain, alone, after). */
static void set_plain(ig_spm_norm *ns, const ig_spm_trie *user) {
    memset(ns->alone, 0, sizeof ns->alone);
    memset(ns->after, 0, sizeof ns->after);
    for (uint32_t c = 0; c < 256; c++) {
        int user_starts = 0;
        if (user && user->u) {
            uint32_t next = (uint32_t)(user->u[0].base + (int32_t)c);
            user_starts = next < user->n && user->u[next].check == 0;
        }
        ns->plain[c] = c < 0x80 && c != ' ' && !ns->first[c] && !user_starts;
        if (c >= 0x80 || user_starts) continue;
        if (!ns->first[c]) {
            ns->alone[c] = 1; /* no rule at all; a space still needs escaping */
            continue;
        }
        if (has_leaf1(ns, (uint8_t)c)) continue;
        ns->alone[c] = 1;
        for (uint32_t b = 0; b < 256; b++) {
            uint8_t two[2] = {(uint8_t)c, (uint8_t)b};
            if (has_path(ns, two, 2)) ns->after[c][b >> 3] |= (uint8_t)(1u << (b & 7));
        }
    }
}

/* Whether the trie has a path through every byte of s[0..n). */
static int has_path(const ig_spm_norm *ns, const uint8_t *s, size_t n) {
    uint32_t pos = UNIT_OFFSET(ns->units[0]);
    for (size_t i = 0; i < n; i++) {
        pos ^= s[i];
        if (pos >= ns->n_units || UNIT_LABEL(ns->units[pos]) != s[i]) return 0;
        pos ^= UNIT_OFFSET(ns->units[pos]);
    }
    return 1;
}

/* ns->bmp_plain: the two- and three-byte characters no rule starts with. */
static ig_status set_bmp_plain(ig_spm_norm *ns, const char *where, ig_err *err) {
    free(ns->bmp_plain);
    ns->bmp_plain = calloc(0x10000 / 8, 1);
    if (!ns->bmp_plain) return ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", where);
    for (uint32_t cp = 0x80; cp < 0x10000; cp++) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        uint8_t b[3];
        size_t n;
        if (cp < 0x800) {
            b[0] = (uint8_t)(0xC0 | cp >> 6), b[1] = (uint8_t)(0x80 | (cp & 0x3F)), n = 2;
        } else {
            b[0] = (uint8_t)(0xE0 | cp >> 12), b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
            b[2] = (uint8_t)(0x80 | (cp & 0x3F)), n = 3;
        }
        if (!has_path(ns, b, n)) ns->bmp_plain[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
    return IG_OK;
}

ig_status ig_spm_norm_init(ig_spm_norm *ns, const ig_spm_trie *user, const char *where,
                           ig_err *err) {
    free(ns->units);
    free(ns->bmp_plain);
    ns->bmp_plain = NULL;
    ns->units = NULL;
    ns->n_units = 0;
    memset(ns->first, 0, sizeof ns->first);
    if (ns->charsmap_len == 0) { /* identity: no rules */
        set_plain(ns, user);
        return IG_OK;
    }
    const uint8_t *b = ns->charsmap;
    char msg[256];
    if (ns->charsmap_len <= 4)
        return map_error(ns, where, 0, err,
                         "expected a 4-byte trie size, the trie and its strings");
    uint32_t tsize =
        (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    if (tsize > ns->charsmap_len - 4 || tsize < 4) {
        snprintf(msg, sizeof msg,
                 "the trie size is %u bytes, expected 4 .. %zu (the bytes after the size)", tsize,
                 ns->charsmap_len - 4);
        return map_error(ns, where, 0, err, msg);
    }
    size_t nu = tsize / 4;
    ns->units = malloc(nu * sizeof *ns->units);
    uint8_t *seen = calloc(nu, 1);
    uint32_t *stack = malloc(nu * sizeof *stack);
    if (!ns->units || !seen || !stack) {
        free(seen);
        free(stack);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", where);
    }
    for (size_t i = 0; i < nu; i++) {
        const uint8_t *p = b + 4 + 4 * i;
        ns->units[i] =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    ns->n_units = nu;
    ns->strings = (const char *)b + 4 + tsize;
    ns->strings_len = ns->charsmap_len - 4 - tsize;
    /* every unit reachable from the root, depth first; a node is its unit's index, entered
     * through state (index ^ offset) */
    ig_status st = IG_OK;
    size_t sp = 0;
    uint32_t root_state = UNIT_OFFSET(ns->units[0]);
    for (int pass = 0; pass == 0 || (sp > 0 && st == IG_OK); pass++) {
        uint32_t state;
        if (pass == 0) {
            state = root_state;
        } else {
            uint32_t i = stack[--sp];
            uint32_t u = ns->units[i];
            state = i ^ UNIT_OFFSET(u);
            if (UNIT_HAS_LEAF(u)) {
                if (state >= nu) {
                    snprintf(msg, sizeof msg,
                             "unit %u's rule is at unit %u, past the %zu units of the trie", i,
                             state, nu);
                    st = map_error(ns, where, 4 + 4 * (size_t)i, err, msg);
                    break;
                }
                uint32_t v = UNIT_VALUE(ns->units[state]);
                if (v >= ns->strings_len || !memchr(ns->strings + v, '\0', ns->strings_len - v)) {
                    snprintf(msg, sizeof msg,
                             "unit %u's rule points to byte %u of the %zu bytes of replacement "
                             "strings%s",
                             state, v, ns->strings_len,
                             v < ns->strings_len ? ", whose string has no terminating NUL"
                                                 : ", past their end");
                    st = map_error(ns, where, 4 + 4 * (size_t)state, err, msg);
                    break;
                }
            }
        }
        for (uint32_t c = 0; c < 256; c++) {
            uint32_t j = state ^ c;
            if (j >= nu || seen[j] || UNIT_LABEL(ns->units[j]) != c) continue;
            seen[j] = 1;
            stack[sp++] = j;
            if (pass == 0) ns->first[c] = 1;
        }
    }
    free(seen);
    free(stack);
    set_plain(ns, user);
    if (st == IG_OK) st = set_bmp_plain(ns, where, err);
    return st;
}

void ig_spm_norm_free(ig_spm_norm *ns) {
    free(ns->charsmap);
    free(ns->units);
    free(ns->bmp_plain);
    ns->charsmap = NULL;
    ns->units = NULL;
    ns->bmp_plain = NULL;
    ns->n_units = ns->charsmap_len = 0;
}

int ig_spm_utf8_valid(const uint8_t *s, size_t n, size_t *len) {
    uint8_t c = s[0];
    *len = 1;
    if (c < 0x80) return 1;
    uint32_t cp;
    size_t l;
    if ((c & 0xE0) == 0xC0) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
        cp = (uint32_t)(c & 0x1F) << 6 | (s[1] & 0x3F);
        if (cp < 0x80) return 0;
        l = 2;
    } else if ((c & 0xF0) == 0xE0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        if (cp < 0x800) return 0;
        l = 3;
    } else if ((c & 0xF8) == 0xF0) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
             (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
        if (cp < 0x10000) return 0;
        l = 4;
    } else {
        return 0;
    }
    if (!(cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF))) return 0;
    *len = l;
    return 1;
}

size_t ig_spm_user_match(const ig_spm_trie *user, const uint8_t *s, size_t n) {
    const ig_spm_unit *u = user->u;
    if (!u) return 0;
    uint32_t cur = 0;
    size_t best = 0;
    int found = 0;
    for (size_t i = 0; i < n && found < MAX_USER_RESULTS; i++) {
        uint32_t next = (uint32_t)(u[cur].base + (int32_t)s[i]);
        if (next >= user->n || u[next].check != (int32_t)cur) break;
        cur = next;
        if (u[cur].value >= 0) best = i + 1, found++;
    }
    return best;
}

/* The longest rule of the character map at s[0..n) (n >= 1): its length in s, and *repl its
 * replacement; 0 when none. */
static size_t charsmap_match(const ig_spm_norm *ns, const uint8_t *s, size_t n, const char **repl) {
    const uint32_t *u = ns->units;
    size_t nu = ns->n_units;
    uint32_t pos = UNIT_OFFSET(u[0]);
    size_t best = 0;
    int found = 0;
    for (size_t i = 0; i < n && found < MAX_CHARSMAP_RESULTS; i++) {
        pos ^= s[i];
        if (pos >= nu) break;
        uint32_t unit = u[pos];
        if (UNIT_LABEL(unit) != s[i]) break;
        pos ^= UNIT_OFFSET(unit);
        if (UNIT_HAS_LEAF(unit)) {
            if (pos >= nu) break; /* checked at load: not reached */
            best = i + 1;
            *repl = ns->strings + UNIT_VALUE(u[pos]);
            found++;
        }
    }
    return best;
}

static const char k_replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* SentencePiece's NormalizePrefix: the normalised text of the next character(s) of s[0..n)
 * (n >= 1) in *p and *plen, and the input bytes it stands for (the return value). */
static inline size_t norm_prefix(const ig_spm_norm *ns, const ig_spm_trie *user, const uint8_t *s,
                                 size_t n, const uint8_t **p, size_t *plen) {
    uint8_t c = s[0];
    if (user->u) {
        uint32_t next = (uint32_t)(user->u[0].base + (int32_t)c);
        if (next < user->n && user->u[next].check == 0) {
            size_t m = ig_spm_user_match(user, s, n);
            if (m) {
                *p = s, *plen = m;
                return m;
            }
        }
    }
    if (ns->n_units && ns->first[c]) {
        if (c >= 0xC2 && c < 0xF0 && ns->bmp_plain) { /* a character no rule starts with */
            size_t l;
            if (ig_spm_utf8_valid(s, n, &l)) {
                uint32_t cp = l == 2 ? (uint32_t)(c & 0x1F) << 6 | (s[1] & 0x3F)
                                     : (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 |
                                           (s[2] & 0x3F);
                if (ns->bmp_plain[cp >> 3] >> (cp & 7) & 1) {
                    *p = s, *plen = l;
                    return l;
                }
            }
        }
        const char *r = NULL;
        size_t m = charsmap_match(ns, s, n, &r);
        if (m) {
            *p = (const uint8_t *)r;
            *plen = strlen(r);
            return m;
        }
    }
    size_t l;
    if (ig_spm_utf8_valid(s, n, &l)) {
        *p = s, *plen = l;
        return l;
    }
    *p = (const uint8_t *)k_replacement, *plen = 3;
    return 1;
}

static const uint8_t k_space[3] = {0xE2, 0x96, 0x81}; /* U+2581 */

int ig_spm_normalize(const ig_spm_norm *ns, const ig_spm_trie *user, int ws_suffix,
                     const uint8_t *s, size_t n, ig_spm_buf *out) {
    out->n = 0;
    const uint8_t *p;
    size_t plen, i = 0;
    int rm = ns->remove_extra_whitespaces, esc = ns->escape_whitespaces;
    if (rm) { /* leading white space */
        while (i < n) {
            size_t used = norm_prefix(ns, user, s + i, n - i, &p, &plen);
            if (plen != 1 || p[0] != ' ') break;
            i += used;
        }
    }
    if (i == n) return 0;
    if (ig_spm_buf_room(out, (n - i) + (n - i) / 2 + 16) != 0) return -1;
    if (!ws_suffix && ns->add_dummy_prefix) {
        if (esc)
            memcpy(out->p, k_space, 3), out->n = 3;
        else
            out->p[out->n++] = ' ';
    }
    int prev_space = rm;
    while (i < n) {
        uint8_t c = s[i];
        if (ns->plain[c]) { /* a run of ASCII characters without rules, the common case */
            size_t j = i + 1;
            while (j < n && ns->plain[s[j]]) j++;
            if (ig_spm_buf_room(out, j - i) != 0) return -1;
            memcpy(out->p + out->n, s + i, j - i);
            out->n += j - i;
            prev_space = 0;
            i = j;
            continue;
        }
        if (c < 0x80 && ns->alone[c] &&
            !(i + 1 < n && ns->after[c][s[i + 1] >> 3] >> (s[i + 1] & 7) & 1)) {
            /* an ASCII character no rule applies to here (what a longer rule needs does not
             * follow): itself, a space as the generic path below treats it */
            if (c != ' ') {
                if (ig_spm_buf_room(out, 1) != 0) return -1;
                out->p[out->n++] = c;
                prev_space = 0;
            } else if (!prev_space) {
                if (ig_spm_buf_room(out, 3) != 0) return -1;
                if (esc)
                    memcpy(out->p + out->n, k_space, 3), out->n += 3;
                else
                    out->p[out->n++] = ' ';
                prev_space = rm;
            }
            i++;
            continue;
        }
        size_t used = norm_prefix(ns, user, s + i, n - i, &p, &plen);
        if (prev_space)
            while (plen && p[0] == ' ') p++, plen--;
        if (plen) {
            if (ig_spm_buf_room(out, 3 * plen) != 0) return -1;
            uint8_t *o = out->p + out->n;
            for (size_t k = 0; k < plen; k++) {
                if (esc && p[k] == ' ')
                    memcpy(o, k_space, 3), o += 3;
                else
                    *o++ = p[k];
            }
            out->n = (size_t)(o - out->p);
            prev_space = p[plen - 1] == ' ';
        }
        i += used;
        if (!rm) prev_space = 0;
    }
    if (rm) { /* trailing white space (an escaped one: U+2581, also one of the text's own) */
        if (esc)
            while (out->n >= 3 && memcmp(out->p + out->n - 3, k_space, 3) == 0) out->n -= 3;
        else
            while (out->n >= 1 && out->p[out->n - 1] == ' ') out->n--;
    }
    if (ws_suffix && ns->add_dummy_prefix) {
        if (ig_spm_buf_room(out, 3) != 0) return -1;
        if (esc)
            memcpy(out->p + out->n, k_space, 3), out->n += 3;
        else
            out->p[out->n++] = ' ';
    }
    return 0;
}
