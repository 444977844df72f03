/* run.c -- ps-train run: process orchestration. run = init + --workers
 * local worker processes (fork + exec of this binary's "work") + eval, and
 * prints the final accuracy (or AUC), total time and samples/s. */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmds.h"
#include "conn.h"
#include "kind.h"
#include "runlog.h"
#include "tasks.h"
#include "util.h"

static pid_t *Children;
static int NChildren;
static volatile sig_atomic_t Interrupted; /* the signal run got, 0: none */

/* SIGINT/SIGTERM in run: pass it on to the workers (by pid) and let the
 * wait loop collect them. */
static void forward_signal(int sig) {
    Interrupted = sig;
    for (int i = 0; i < NChildren; i++)
        if (Children[i] > 0) kill(Children[i], sig);
}

/* Spawns worker 'i' running "<self> work ...". Returns its pid or -1. */
static pid_t spawn_worker(const trainOpts *o, int i) {
    char name[128], lease[24], window[24], wait[24], interval[24], batch[24], threads[24];
    const char *progress = o->progress;
    if (!strcmp(progress, "auto")) progress = o->workers > 1 || !isatty(1) ? "line" : "tty";
    snprintf(name, sizeof(name), "%s-w%d", o->job, i + 1);
    snprintf(lease, sizeof(lease), "%d", o->lease_ms);
    snprintf(window, sizeof(window), "%d", o->window);
    snprintf(wait, sizeof(wait), "%d", o->wait);
    snprintf(interval, sizeof(interval), "%d", o->interval_ms);
    snprintf(batch, sizeof(batch), "%d", o->batch);
    snprintf(threads, sizeof(threads), "%d", o->threads > 0 ? o->threads : 1);
    char pull_every[16], overlap[16];
    snprintf(pull_every, sizeof(pull_every), "%d", o->pull_every);
    snprintf(overlap, sizeof(overlap), "%d", o->overlap);
    const char *argv[48];
    int n = 0;
    argv[n++] = o->self;
    argv[n++] = "work";
    argv[n++] = "--addr";
    argv[n++] = o->addr;
    argv[n++] = "--job";
    argv[n++] = o->job;
    argv[n++] = "--name";
    argv[n++] = name;
    argv[n++] = "--lease-ms";
    argv[n++] = lease;
    argv[n++] = "--window";
    argv[n++] = window;
    argv[n++] = "--wait";
    argv[n++] = wait;
    argv[n++] = "--interval-ms";
    argv[n++] = interval;
    argv[n++] = "--progress";
    argv[n++] = progress;
    argv[n++] = "--threads";
    argv[n++] = threads;
    argv[n++] = "--pull-every";
    argv[n++] = pull_every;
    argv[n++] = "--overlap";
    argv[n++] = overlap;
    if (o->pull_format) {   /* else the job's default */
        argv[n++] = "--pull-format";
        argv[n++] = o->pull_format;
    }
    if (o->push_format) {   /* else the job's (init recorded it) */
        argv[n++] = "--push-format";
        argv[n++] = o->push_format;
    }
    argv[n++] = "--on-degraded";
    argv[n++] = o->on_degraded;
    argv[n++] = "--on-lost-state";
    argv[n++] = o->on_lost_state;
    if (tr_given(o, "--batch")) {
        argv[n++] = "--batch";
        argv[n++] = batch;
    }
    if (o->user) {
        argv[n++] = "--user";
        argv[n++] = o->user;
    }
    if (o->log_json) {
        argv[n++] = "--log-json";
        argv[n++] = o->log_json;
    }
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* The password goes through the environment, not the process list. */
        if (o->password) setenv("PS_PASSWORD", o->password, 1);
        setenv("OPENBLAS_NUM_THREADS", threads, 1);
        execv("/proc/self/exe", (char *const *)argv);
        execvp(o->self, (char *const *)argv);
        fprintf(stderr, "ps-train run: cannot exec %s: %s\n", o->self, strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Reads progress field 'f' of the job as a double (0 when missing). */
static double progress_double(const trainOpts *o, const char *f) {
    char key[128];
    double v = 0;
    psClient *c = tr_connect(o, 0, 0);
    if (c == NULL) return 0;
    tr_key(key, sizeof(key), o->job, "progress");
    redisReply *r = psCommand(c, key, "HGET %s %s", key, f);
    if (r && r->type == REDIS_REPLY_STRING) v = atof(r->str);
    if (r) freeReplyObject(r);
    psClientFree(c);
    return v;
}

/* run with log 'lg' (may be NULL). Returns the exit code. */
static int run_job(const trainOpts *o, runLog *lg) {
    double t0 = tr_now();
    const modelKind *kind;
    int rc = tr_cmd_init(o);
    if (rc != TR_EXIT_OK) return rc;
    {
        /* The final eval's data must fit before anything trains. */
        jobConfig cfg;
        psClient *c = tr_connect(o, 0, 0);
        if (c == NULL) return TR_EXIT_FAIL;
        rc = tr_load_config(c, o->job, &cfg);
        psClientFree(c);
        if (rc != 0) return TR_EXIT_FAIL;
        kind = tr_kind_of(&cfg);
        if (kind->check_test(o, &cfg) != 0) return TR_EXIT_USAGE;
        kind->log_start(o, lg, &cfg);
    }
    long long samples0 = tr_samples_trained(o);

    Children = calloc((size_t)o->workers, sizeof(pid_t));
    if (Children == NULL) return TR_EXIT_FAIL;
    NChildren = o->workers;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = forward_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    double t1 = tr_now();
    printf("ps-train run: starting %d workers\n", o->workers);
    for (int i = 0; i < o->workers; i++) {
        Children[i] = spawn_worker(o, i);
        if (Children[i] < 0) {
            tr_err(o, "fork: %s", strerror(errno));
            forward_signal(SIGTERM);
            Interrupted = 0;
            break;
        }
    }
    int failed = 0;
    for (int i = 0; i < o->workers; i++) {
        if (Children[i] <= 0) {
            failed++;
            continue;
        }
        int st;
        while (waitpid(Children[i], &st, 0) < 0 && errno == EINTR) {}
        if (Interrupted && ((WIFEXITED(st) && WEXITSTATUS(st) == TR_EXIT_INTERRUPTED) ||
                            (WIFSIGNALED(st) && WTERMSIG(st) == Interrupted))) {
            Children[i] = 0;
            continue;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            failed++;
            if (WIFSIGNALED(st))
                tr_err(o, "worker %d (pid %d) killed by signal %d", i + 1, (int)Children[i],
                       WTERMSIG(st));
            else
                tr_err(o, "worker %d (pid %d) exited with %d", i + 1, (int)Children[i],
                       WEXITSTATUS(st));
        }
        Children[i] = 0;
    }
    double train_secs = tr_now() - t1;
    free(Children);
    Children = NULL;
    NChildren = 0;
    if (Interrupted) {
        tr_err(o, "interrupted (signal %d); job %s is resumable: rerun the same command "
                  "(ps-train run --addr %s --job %s ...) to continue where it stopped, its "
                  "workers take back their unfinished tasks at once; 'ps-train status' shows "
                  "the progress", (int)Interrupted, o->job, o->addr, o->job);
        RUNLOG(lg, "interrupted", RL_STR("job", o->job), RL_INT("signal", Interrupted));
        return TR_EXIT_INTERRUPTED;
    }
    if (failed == o->workers) {
        tr_err(o, "every worker failed");
        return TR_EXIT_FAIL;
    }
    long long samples = tr_samples_trained(o) - samples0;
    /* Training span: first worker's first step to the last one's end
     * (process start-up and data loading excluded, as in bench/baseline). */
    double span0 = 0, span1 = 0;
    for (int i = 0; i < o->workers; i++) {
        char f[160];
        snprintf(f, sizeof(f), "w:%s-w%d:train_start", o->job, i + 1);
        double a = progress_double(o, f);
        snprintf(f, sizeof(f), "w:%s-w%d:train_end", o->job, i + 1);
        double b = progress_double(o, f);
        if (a <= 0 || b < a) continue;
        if (span0 == 0 || a < span0) span0 = a;
        if (b > span1) span1 = b;
    }
    double span = span1 > span0 ? span1 - span0 : 0;
    /* Payload bytes per model push (one mini-batch step of one worker). */
    double push_bytes = 0, pull_bytes = 0, steps = 0;
    for (int i = 0; i < o->workers; i++) {
        char f[160];
        snprintf(f, sizeof(f), "w:%s-w%d:push_bytes", o->job, i + 1);
        push_bytes += progress_double(o, f);
        snprintf(f, sizeof(f), "w:%s-w%d:pull_bytes", o->job, i + 1);
        pull_bytes += progress_double(o, f);
        snprintf(f, sizeof(f), "w:%s-w%d:model_pushes", o->job, i + 1);
        steps += progress_double(o, f);
    }

    runTotals rt = {t0, train_secs, samples, span, push_bytes, pull_bytes, steps, failed};
    return kind->run_result(o, lg, &rt);
}

int tr_cmd_run(const trainOpts *o) {
    runLog *lg;
    if (tr_open_log(o, &lg) != 0) return TR_EXIT_FAIL;
    /* The workers count "t" from the run's start too. */
    if (lg && runlog_export_origin(lg) != 0) tr_err(o, "--log-json: cannot set %s", RUNLOG_T0_ENV);
    int rc = run_job(o, lg);
    runlog_close(lg);
    return rc;
}
