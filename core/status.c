/* status.c - status names and the ig_err error buffer. */
#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[IG_STATUS_COUNT] = {
    [IG_OK] = "ok",
    [IG_ERR_INVALID_ARG] = "invalid argument",
    [IG_ERR_IO] = "I/O error",
    [IG_ERR_NOMEM] = "out of memory",
    [IG_ERR_FORMAT] = "malformed input",
    [IG_ERR_CHECKSUM] = "checksum mismatch",
    [IG_ERR_EXISTS] = "already exists",
    [IG_ERR_NOT_FOUND] = "not found",
    [IG_ERR_CONFIG] = "configuration error",
    [IG_ERR_UNSUPPORTED] = "unsupported",
    [IG_ERR_CANCELLED] = "cancelled",
    [IG_ERR_INTERNAL] = "internal error",
};

const char *ig_status_str(ig_status status) {
    if ((unsigned)status >= IG_STATUS_COUNT) return "unknown status";
    return status_names[status];
}

ig_status ig_err_setv(ig_err *err, ig_status status, const char *fmt, va_list ap) {
    if (err) {
        err->status = status;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        err->fix_option = err->fix_value = NULL;
    }
    return status;
}

ig_status ig_err_set(ig_err *err, ig_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ig_err_setv(err, status, fmt, ap);
    va_end(ap);
    return status;
}

ig_status ig_err_errno(ig_err *err, int errno_value, const char *fmt, ...) {
    ig_status status = errno_value == ENOMEM   ? IG_ERR_NOMEM
                       : errno_value == ENOENT ? IG_ERR_NOT_FOUND
                       : errno_value == EEXIST ? IG_ERR_EXISTS
                                               : IG_ERR_IO;
    if (!err) return status;
    va_list ap;
    va_start(ap, fmt);
    ig_err_setv(err, status, fmt, ap);
    va_end(ap);
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, ": %s", strerror(errno_value));
    return status;
}

ig_status ig_err_prefix(ig_err *err, ig_status status, const char *fmt, ...) {
    if (!err) return status;
    char prefix[IG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (n > 0) {
        char old[IG_ERR_MSG_MAX];
        memcpy(old, err->msg, sizeof old);
        size_t plen = strlen(prefix);
        if (plen > sizeof err->msg - 3) plen = sizeof err->msg - 3;
        memcpy(err->msg, prefix, plen);
        memcpy(err->msg + plen, ": ", 2);
        size_t rest = sizeof err->msg - plen - 3, olen = strlen(old);
        if (olen > rest) olen = rest;
        memcpy(err->msg + plen + 2, old, olen);
        err->msg[plen + 2 + olen] = '\0';
    }
    err->status = status;
    return status;
}

void ig_err_clear(ig_err *err) {
    if (!err) return;
    err->status = IG_OK;
    err->msg[0] = '\0';
    err->fix_option = err->fix_value = NULL;
}

ig_status ig_err_fix(ig_err *err, const char *option, const char *value) {
    if (!err) return IG_ERR_INTERNAL;
    err->fix_option = option;
    err->fix_value = value;
    return err->status;
}
