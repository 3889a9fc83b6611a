/* corpus_driver.c - a fuzz target without libFuzzer: main() runs the target's
 * LLVMFuzzerTestOneInput once on every file of the corpus directories (or files) given, so that
 * `make test` runs each target over its committed corpus (tests/fuzz/corpus/NAME/) as a
 * regression in the ordinary gcc build, and under ASan+UBSan in the sanitizer build
 * (tests/tests.cmake links it with each tests/fuzz/fuzz_*.c as NAME_corpus, one ctest NAME each).
 * `make fuzz` still builds the targets with clang's libFuzzer for real fuzzing (fuzz.cmake).
 *
 * LLVMFuzzerInitialize is called first when the target defines it (a weak reference). Inputs are
 * read into buffers of exactly their size (ASan sees a read past the end) in name order, hidden
 * files skipped. A target reports a bug by crashing or aborting; the driver exits 1 when a path
 * cannot be read or no input was found (a target without a corpus is a regression test of
 * nothing), else 0, after printing how many inputs ran.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Runs the target on the file at path; 0 when it cannot be read. */
static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "corpus_driver: %s: %s\n", path, strerror(errno));
        return 0;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *b = realloc(buf, cap *= 2);
        if (!b) free(buf);
        buf = b;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "corpus_driver: %s: cannot read it\n", path);
        free(buf);
        return 0;
    }
    /* exactly the input's size: a read past it is past the allocation */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return 0;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 1;
}

static int visible(const struct dirent *e) {
    return e->d_name[0] != '.';
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    size_t ran = 0;
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "corpus_driver: %s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            if (run_file(argv[i]))
                ran++;
            else
                failed = 1;
            continue;
        }
        struct dirent **names = NULL;
        int n = scandir(argv[i], &names, visible, alphasort);
        if (n < 0) {
            fprintf(stderr, "corpus_driver: %s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        for (int k = 0; k < n; k++) {
            size_t len = strlen(argv[i]) + strlen(names[k]->d_name) + 2;
            char *path = malloc(len);
            if (path) {
                snprintf(path, len, "%s/%s", argv[i], names[k]->d_name);
                if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
                    if (run_file(path))
                        ran++;
                    else
                        failed = 1;
                }
            }
            free(path);
            free(names[k]);
        }
        free(names);
    }
    printf("%s: %zu inputs ran\n", argv[0], ran);
    if (ran == 0) fprintf(stderr, "corpus_driver: no inputs: a target needs a corpus\n");
    return failed || ran == 0 ? 1 : 0;
}
