/* module.c - finds and loads ingot's own modules (libingot_NAME.so: today the CUDA backend and
 * the NCCL communicator, libingot_cuda.so) when they are first asked for, so that the libraries
 * they link are not loaded, nor their initialisers run, at every start of the program.
 *
 * The dynamic loader keeps what it loaded and counts the dlopen calls, so nothing is cached
 * here: every call looks the module up again (a few stat calls) and dlopen returns the handle of
 * the copy already loaded. A module is never closed (the CUDA runtime and NCCL start threads and
 * register exit handlers: unloading them under those is not safe). */
#include "core.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef IG_MODULE_INSTALL_DIR
#define IG_MODULE_INSTALL_DIR "/usr/local/lib/ingot"
#endif

/* dir/libingot_NAME.so into buf; 1 when it is there and readable. */
static int try_dir(const char *dir, size_t dlen, const char *name, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%.*s/libingot_%s.so", (int)dlen, dir, name);
    return n > 0 && (size_t)n < cap && access(buf, R_OK) == 0;
}

/* The directory of the running program into buf (its length; 0 when unknown). A program started
 * through the dynamic loader (`ld-linux-x86-64.so.2 PROGRAM`, as tools/gpu/check.sh may) has the
 * loader as /proc/self/exe: its directory is not the program's, and is not used. */
static size_t program_dir(char *buf, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1) return 0;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash || strncmp(slash + 1, "ld-linux", 8) == 0) return 0;
    *slash = '\0';
    return (size_t)(slash - buf);
}

int ig_module_find(const char *name, char *buf, size_t cap) {
    const char *env = getenv("IG_MODULE_DIR");
    if (env && *env) {
        if (try_dir(env, strlen(env), name, buf, cap)) return 1;
        snprintf(buf, cap, "IG_MODULE_DIR=%s", env);
        return 0;
    }
    char exe[4096];
    size_t elen = program_dir(exe, sizeof exe);
    if (elen && try_dir(exe, elen, name, buf, cap)) return 1;
    if (try_dir(IG_MODULE_INSTALL_DIR, strlen(IG_MODULE_INSTALL_DIR), name, buf, cap)) return 1;
    snprintf(buf, cap, "%s%s%s", elen ? exe : "", elen ? ", " : "", IG_MODULE_INSTALL_DIR);
    return 0;
}

/* The library that dlopen could not find, from its message ("libX.so.N: cannot open shared
 * object file: ..."), into buf; 0 when the message is about something else. */
static int missing_library(const char *why, char *buf, size_t cap) {
    const char *end = strstr(why, ": cannot open shared object file");
    if (!end) return 0;
    const char *start = end;
    while (start > why && start[-1] != ' ' && start[-1] != '/') start--;
    snprintf(buf, cap, "%.*s", (int)(end - start), start);
    return end > start;
}

ig_status ig_module_symbol(const char *name, const char *symbol, const char *what, void **out,
                           ig_err *err) {
    *out = NULL;
    char path[4096], file[256];
    snprintf(file, sizeof file, "libingot_%s.so", name);
    int found = ig_module_find(name, path, sizeof path);
    const char *env = getenv("IG_MODULE_DIR");
    if (!found && env && *env)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s needs %s, which is not in IG_MODULE_DIR=%s (unset it to look beside "
                          "the program)",
                          what, file, env);
    /* not in a directory of ours: the loader's search path (LD_LIBRARY_PATH, ld.so.cache) */
    void *h = dlopen(found ? path : file, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        char lib[256];
        if (!why) why = "unknown reason";
        if (!found && missing_library(why, lib, sizeof lib) && strcmp(lib, file) == 0)
            return ig_err_set(err, IG_ERR_UNSUPPORTED,
                              "%s needs %s, which is not found (looked in %s and the library "
                              "path): a CUDA build makes it beside the ingot program; copy it "
                              "there, or set IG_MODULE_DIR to its directory",
                              what, file, path);
        if (missing_library(why, lib, sizeof lib))
            return ig_err_set(err, IG_ERR_UNSUPPORTED,
                              "%s needs %s, which is not found on this machine (%s; loading %s): "
                              "install it, or put its directory on LD_LIBRARY_PATH",
                              what, lib, why, found ? path : file);
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s cannot be loaded: %s (loading %s)", what,
                          why, found ? path : file);
    }
    dlerror();
    *out = dlsym(h, symbol);
    if (!*out)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s: %s has no %s: it is not the module of this ingot (built from "
                          "another version?)",
                          what, found ? path : file, symbol);
    return IG_OK;
}

ig_status ig_module_entry(const char *name, const char *symbol, const char *what, size_t ops_size,
                          size_t obj_size, const void **out, ig_err *err) {
    void *p = NULL;
    ig_status st = ig_module_symbol(name, symbol, what, &p, err);
    if (st != IG_OK) return st;
    const ig_module_stamp *m = p;
    if (strcmp(m->version, IG_VERSION_STRING) != 0 || m->ops_size != ops_size ||
        m->obj_size != obj_size)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: the module found (libingot_%s.so of ingot %s) is not this ingot's "
                          "(%s, or its tables differ): use the module built with this program "
                          "(IG_MODULE_DIR names its directory)",
                          what, name, m->version, IG_VERSION_STRING);
    *out = p;
    return IG_OK;
}
