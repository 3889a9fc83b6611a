/* fuzz_jsonl.c - libFuzzer target for the JSONL reader and the JSON line parser.
 *
 * The input is read as a .jsonl file from memory (or as a .jsonl.zst when it starts with the zstd
 * magic, which fuzzes the streaming decompressor too). Every record is parsed with the key
 * "text" and, as a differential check, through both the fast path and jansson: whenever the fast
 * path accepts a line, jansson must accept it and decode the same bytes, and the default mode must
 * give jansson's status and message. Any disagreement aborts, which libFuzzer reports as a crash.
 */
#include "preprocess/reader_internal.h"

#include <stdlib.h>
#include <string.h>

static void check(int ok) {
    if (!ok) abort();
}

static void parse_one(const ig_record *rec) {
    static const char *const keys[] = {"text", "id"};
    for (size_t nk = 1; nk <= 2; nk++) {
        ig_doc f, j, a;
        ig_err ef = {0}, ej = {0}, ea = {0};
        ig_status sf = ig_record_parse_json(rec, "fuzz", keys, nk, IG_JSON_FAST_ONLY, &f, &ef);
        ig_status sj = ig_record_parse_json(rec, "fuzz", keys, nk, IG_JSON_JANSSON, &j, &ej);
        ig_status sa = ig_record_parse_json(rec, "fuzz", keys, nk, IG_JSON_AUTO, &a, &ea);
        check(sa == sj);
        if (sj != IG_OK) check(strcmp(ea.msg, ej.msg) == 0);
        if (sf == IG_OK) {
            check(sj == IG_OK);
            for (size_t k = 0; k < nk; k++) {
                check(f.len[k] == j.len[k] && f.len[k] == a.len[k]);
                check(memcmp(f.text[k], j.text[k], f.len[k]) == 0);
                check(memcmp(a.text[k], j.text[k], j.len[k]) == 0);
                size_t bad;
                check(ig_utf8_valid(f.text[k], f.len[k], &bad));
            }
        } else {
            check(sf == IG_ERR_UNSUPPORTED || (sf == IG_ERR_FORMAT && sj == IG_ERR_FORMAT));
        }
        ig_doc_release(&f);
        ig_doc_release(&j);
        ig_doc_release(&a);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int zst = size >= 4 && memcmp(data, "\x28\xb5\x2f\xfd", 4) == 0;
    ig_input_kind kind = zst ? IG_INPUT_JSONL_ZST : IG_INPUT_JSONL;
    ig_record_reader *r = NULL;
    ig_err err = {0};
    if (ig_record_reader_open_mem(&r, NULL, "fuzz.jsonl", data, size, kind, &err) != IG_OK) abort();
    ig_record_reader_set_max_record(r, (size_t)1 << 20);
    for (int n = 0; n < 100000; n++) {
        ig_record rec;
        int has = 0;
        if (ig_record_reader_next(r, &rec, &has, &err) != IG_OK || !has) break;
        check(rec.line >= 1);
        parse_one(&rec);
    }
    ig_record_reader_close(r);
    return 0;
}
