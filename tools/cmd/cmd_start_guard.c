/* cmd_start_guard.c - a multi-process `ingot train` is watched from its first instant. The
 * trainer's watchdog (train/watchdog.c) can only start once MPI is up, and MPI_Init itself waits
 * for every rank of the launch: one rank stopped or stuck before or inside it left all the others
 * waiting in MPI_Init forever. So the program arms this guard as soon as it has read the
 * configuration (parallel.timeout comes from the file), before MPI starts: a thread that, unless
 * the watchdog has taken over (ig_start_guard_disarm) within the timeout, prints what this rank
 * waited for and ends the process with status 3, as the watchdog does; the launcher then ends the
 * other ranks.
 *
 * To name the rank that never came, each rank leaves a start mark, RUN_DIR/.heartbeat/start-NNNNN
 * holding the launch's id (PMIX_NAMESPACE, OpenMPI's job id or Slurm's job and step), before it
 * starts MPI; a rank that times out lists the ranks without a mark of this launch (the run
 * directory is shared between nodes, as the watchdog's heartbeats need). The marks are removed
 * when the process ends normally.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmd.h"

struct ig_start_guard {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int armed, quit;
    struct timespec deadline;
    double timeout;
    int rank, world;
    const char *what; /* what this rank waits for now (a static string) */
    char run_dir[4096], dir[4200], mark[4300], launch[256];
    int made_run_dir; /* RUN_DIR was made by this launch (this rank, or a rank before it: see
                         ig_start_guard_arm): removed again when the run left nothing in it */
};

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}

/* The launch's id, the same on every rank of one mpirun / srun and another for the next. */
static void launch_id(char *buf, size_t cap) {
    const char *ns = getenv("PMIX_NAMESPACE"), *job = getenv("OMPI_MCA_ess_base_jobid");
    const char *sj = getenv("SLURM_JOB_ID"), *ss = getenv("SLURM_STEP_ID");
    if (ns && *ns)
        snprintf(buf, cap, "pmix:%s", ns);
    else if (job && *job)
        snprintf(buf, cap, "ompi:%s", job);
    else if (sj && *sj)
        snprintf(buf, cap, "slurm:%s.%s", sj, ss ? ss : "");
    else
        buf[0] = '\0';
}

/* Whether rank r left a start mark of this launch. */
static int started(const ig_start_guard *g, int r) {
    char path[4400], text[300] = "";
    snprintf(path, sizeof path, "%s/start-%05d", g->dir, r);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    text[strcspn(text, "\n")] = '\0';
    return ok && strcmp(text, g->launch) == 0;
}

/* The ranks without a start mark of this launch, into buf (at most a few dozen named). */
static void missing(const ig_start_guard *g, char *buf, size_t cap) {
    size_t n = 0;
    int count = 0;
    buf[0] = '\0';
    for (int r = 0; r < g->world; r++) {
        if (started(g, r)) continue;
        if (++count <= 32 && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%d", count > 1 ? ", " : "", r);
    }
    if (count > 32 && n < cap) snprintf(buf + n, cap - n, " and %d more", count - 32);
}

static void *guard_main(void *arg) {
    ig_start_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->quit && g->armed) {
        int rc = pthread_cond_timedwait(&g->cv, &g->mu, &g->deadline);
        if (rc != ETIMEDOUT || g->quit || !g->armed) continue;
        char who[512] = "";
        if (g->launch[0]) missing(g, who, sizeof who);
        char why[4800];
        if (who[0])
            snprintf(why, sizeof why,
                     "rank%s %s never started (no start mark of this launch in %s): stopped, "
                     "dead or not started",
                     strchr(who, ',') || strstr(who, "more") ? "s" : "", who, g->dir);
        else if (g->launch[0])
            snprintf(why, sizeof why,
                     "every rank started (each left its mark in %s), and one of them stopped "
                     "before it finished starting MPI",
                     g->dir);
        else
            snprintf(why, sizeof why, "a rank is stopped, dead or was not started");
        fprintf(stderr,
                "ingot: error: rank %d: no progress for %.0f s while %s (parallel.timeout %g): %s. "
                "Stopping every rank\n",
                g->rank, g->timeout, g->what, g->timeout, why);
        fflush(stderr);
        _exit(IG_EXIT_HUNG); /* the launcher ends the other ranks */
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* 1 when dir holds nothing but (maybe) its .heartbeat folder: another rank of this launch made
 * it an instant ago (ig_mkdir_p makes the run directory, then .heartbeat). A directory the user
 * made and left empty passes too: it is empty, so nothing is lost when a refused run removes it. */
static int holds_only_marks(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int other = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        other |=
            strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, ".heartbeat");
    closedir(d);
    return !other;
}

ig_start_guard *ig_start_guard_arm(double timeout, const char *run_dir) {
    int world = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1));
    int rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMI_RANK", 0));
    if (world < 2 || rank < 0 || rank >= world || !(timeout > 0) || !run_dir || !*run_dir)
        return NULL; /* one process waits for no other */
    ig_start_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->timeout = timeout, g->rank = rank, g->world = world, g->armed = 1;
    g->what = "starting MPI (MPI_Init and the launch's first exchanges wait for every rank)";
    launch_id(g->launch, sizeof g->launch);
    snprintf(g->dir, sizeof g->dir, "%s/.heartbeat", run_dir);
    snprintf(g->run_dir, sizeof g->run_dir, "%s", run_dir);
    if (g->launch[0]) {
        struct stat sb;
        /* Every rank of a refused run removes the run directory if this launch made it, since
         * which rank leaves last (and can) is a race: a rank that finds it holding nothing but
         * the marks' folder counts it as made by a rank before it. */
        int had = stat(run_dir, &sb) == 0, made_before = had && holds_only_marks(run_dir);
        ig_err err = {0};
        if (ig_mkdir_p(g->dir, &err) == IG_OK) {
            g->made_run_dir = !had || made_before;
            snprintf(g->mark, sizeof g->mark, "%s/start-%05d", g->dir, rank);
            FILE *f = fopen(g->mark, "w");
            if (f) {
                fprintf(f, "%s\n", g->launch);
                if (fclose(f) != 0) g->mark[0] = '\0';
            } else {
                g->mark[0] = '\0';
            }
        }
    }
    clock_gettime(CLOCK_REALTIME, &g->deadline);
    double end = (double)g->deadline.tv_sec + g->deadline.tv_nsec * 1e-9 + timeout;
    g->deadline.tv_sec = (time_t)end;
    g->deadline.tv_nsec = (long)((end - (double)(time_t)end) * 1e9);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        if (g->mark[0]) unlink(g->mark);
        free(g);
        return NULL;
    }
    return g;
}

void ig_start_guard_phase(ig_start_guard *g, const char *what) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->what = what;
    pthread_mutex_unlock(&g->mu);
}

void ig_start_guard_disarm(ig_start_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->armed = 0;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void ig_start_guard_free(ig_start_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->quit = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    if (g->mark[0]) unlink(g->mark);
    rmdir(g->dir); /* the last rank out removes the folder (the watchdog's too) */
    if (g->made_run_dir) rmdir(g->run_dir); /* a run refused before it wrote anything */
    free(g);
}
