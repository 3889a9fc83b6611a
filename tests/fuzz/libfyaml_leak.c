/* libfyaml_leak.c - libfyaml 0.7.12's own leak, shown without ingot (tests/fuzz/lsan.supp names
 * it; fuzz_buckets and fuzz_config found it through ingot's loaders).
 *
 * A single-quoted scalar with a long run of escaped quotes makes fy_atom_format_text() compute
 * one size and format another; it returns NULL without calling fy_atom_iter_finish(), which
 * leaks the atom iterator's chunk array (realloc'd, 1 KiB here), and fy_token_get_text() then
 * gets the text another way. Shorter runs read wrongly: 'a''''b' reads as "a'''" where YAML
 * says "a''b".
 * Fixed upstream after 0.7.12 (libfyaml issue #233; commits 0af6061 "atom: Call iter_finish on
 * error in fy_atom_format_text()" and c0a716e "atom: Correctly handle streams of single quoted
 * single quotes"). ingot refuses such scalars before libfyaml formats them (core/config_yaml.c),
 * so its loaders never reach this path; the suppression stays for libfyaml's sake.
 *
 * Build and run (LeakSanitizer reports 1024 bytes leaked from realloc <- ... <-
 * fy_atom_format_text <- fy_token_get_text <- fy_node_get_scalar <- main; the slow unwinder is
 * needed to name libfyaml's frames, which have no frame pointers):
 *   cc -g -fsanitize=address tests/fuzz/libfyaml_leak.c $(pkg-config --cflags --libs libfyaml) \
 *       -o /tmp/libfyaml_leak
 *   ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 /tmp/libfyaml_leak
 * It prints what libfyaml read for each input, then the leak report (exit status 1). With
 * LSAN_OPTIONS=suppressions=tests/fuzz/lsan.supp the report is suppressed (exit status 0), but
 * only under fast_unwind_on_malloc=0: the fast unwinder stops at libfyaml's first frame, never
 * sees the suppressed one, and the leak is reported (as it was for fuzz_buckets).
 */
#include <libfyaml.h>
#include <stdio.h>
#include <string.h>

/* Parses one YAML text and prints the first scalar of its root (the key of a mapping). */
static void show(const char *yaml) {
    struct fy_parse_cfg cfg = {.flags = FYPCF_QUIET};
    struct fy_document *doc = fy_document_build_from_string(&cfg, yaml, strlen(yaml));
    if (!doc) {
        printf("%-34s does not parse\n", yaml);
        return;
    }
    struct fy_node *n = fy_document_root(doc);
    if (fy_node_is_mapping(n)) {
        void *it = NULL;
        n = fy_node_pair_key(fy_node_mapping_iterate(n, &it));
    }
    size_t len = 0;
    const char *text = fy_node_get_scalar(n, &len); /* leaks for the first input */
    printf("%-34s reads as [%.*s]\n", yaml, text ? (int)len : 0, text ? text : "");
    fflush(stdout);
    fy_document_destroy(doc); /* everything the program owns is freed */
}

int main(void) {
    show("{''''''''''''''''''''''''''''}"); /* fuzz_buckets' input: 13 escaped quotes */
    show("'a''''b'");                       /* YAML: a''b */
    show("'it''s'");                        /* one escaped quote reads right: it's */
    return 0;
}
