/* json_file.c - the one way ingot reads a whole JSON file (shard manifests and lists, frame
 * shards' manifests, tokenizer files): a regular file of bounded size, never a FIFO or a device
 * (refused without being opened for a blocking read: a FIFO would hang, /dev/zero fill memory),
 * parsed by jansson from memory with duplicate keys refused (two values for one key is a file
 * someone edited wrongly, and jansson would keep the last one silently), and "\u0000" refused
 * (a string that C code would cut short). */
#include "core/core.h"

#include <jansson.h>
#include <stdlib.h>

ig_status ig_json_load_file(const char *path, size_t max_bytes, const char *what, json_t **out,
                            ig_err *err) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    /* read whole, then parse from memory: jansson's file reader goes a character at a time */
    ig_status st = ig_read_file_max(path, max_bytes, &text, &len, err);
    if (st != IG_OK) return st;
    json_error_t je;
    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!*out)
        return ig_err_set(err, IG_ERR_FORMAT, "%s:%d:%d: malformed JSON in %s: %s", path, je.line,
                          je.column, what ? what : "this file", je.text);
    return IG_OK;
}
