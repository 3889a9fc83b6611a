/* utf8.c - strict UTF-8 validation for the document readers.
 *
 * Strict means exactly the Unicode definition (Table 3-7 of the standard): no overlong forms, no
 * encoded surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no stray continuation bytes and no
 * truncated sequences. Runs of ASCII, the common case in corpora, are skipped 16 and 8 bytes at a
 * time. The offset reported for a bad sequence is that of its first byte, so that a message can
 * point the user at the start of the problem.
 */
#include "preprocess/preprocess.h"

#include <string.h>

#define HIGH_BITS 0x8080808080808080ULL

static inline int is_cont(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

int ig_utf8_valid(const char *s, size_t len, size_t *bad_offset) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (p[i] < 0x80) {
            /* ASCII fast path: 16, then 8 bytes per step while no byte has its high bit set. */
            while (i + 16 <= len) {
                uint64_t a, b;
                memcpy(&a, p + i, 8);
                memcpy(&b, p + i + 8, 8);
                if ((a | b) & HIGH_BITS) break;
                i += 16;
            }
            while (i + 8 <= len) {
                uint64_t a;
                memcpy(&a, p + i, 8);
                if (a & HIGH_BITS) break;
                i += 8;
            }
            while (i < len && p[i] < 0x80) i++;
            continue;
        }
        unsigned c = p[i];
        size_t rest = len - i - 1;     /* bytes available after the lead byte */
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        size_t need;                   /* continuation bytes */
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0; /* overlong below U+0800 */
            if (c == 0xED) hi = 0x9F; /* surrogates U+D800..U+DFFF */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90; /* overlong below U+10000 */
            if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
        } else {
            goto bad; /* 0x80..0xC1 (continuation or overlong lead) or 0xF5..0xFF */
        }
        if (rest < need) goto bad;
        if (p[i + 1] < lo || p[i + 1] > hi) goto bad;
        for (size_t k = 2; k <= need; k++)
            if (!is_cont(p[i + k])) goto bad;
        i += need + 1;
        continue;
    bad:
        if (bad_offset) *bad_offset = i;
        return 0;
    }
    return 1;
}
