/* script_chars.h - the characters the tokenizer tests make text of: ASCII, two-, three- and
 * four-byte characters of many scripts (Cyrillic, Greek, Latin with accents, Arabic, Hebrew,
 * Devanagari, Malayalam, Bengali, CJK, Hangul, Georgian, Thai, an emoji) and bytes that are not
 * UTF-8 (a lone lead byte, a lone continuation byte, a cut three-byte character, overlong forms,
 * 0xFF). Neighbours in the list are mostly of one script, so a run of them reads like a word.
 * Used by test_tokenizer.c and test_tokenizer_threads.c.
 */
#ifndef INGOT_TESTS_SCRIPT_CHARS_H
#define INGOT_TESTS_SCRIPT_CHARS_H

#include <stddef.h>

/* clang-format off */
static const char *const igt_script_chars[] = {
    " ", "a", "Z", "1", "'", "e", "n",
    "\xd0\xb0", "\xd0\xbf", "\xd1\x80", "\xd0\xb8", "\xd0\x92",
    "\xce\xb1", "\xce\xbb", "\xc3\xa9", "\xc3\xb1",
    "\xd8\xa7", "\xd9\x84", "\xd7\xa9",
    "\xe0\xa4\x95", "\xe0\xa4\xbe", "\xe0\xb4\xa4", "\xe0\xb5\x8d", "\xe0\xa6\x95",
    "\xe4\xb8\xad", "\xe6\x96\x87", "\xea\xb0\x80", "\xe1\x83\x90", "\xe0\xb8\x81",
    "\xf0\x9f\x98\x80",
    "\xd0", "\xb0", "\xe0\xa4", "\xe0\x80\x80", "\xc0\xaf", "\xff",
};
/* clang-format on */
#define IGT_N_SCRIPT_CHARS (sizeof igt_script_chars / sizeof igt_script_chars[0])

#endif
