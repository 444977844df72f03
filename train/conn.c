/* conn.c -- ps-train's connection to the servers (conn.h). */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "util.h"

/* 1 when the server knows PS.PULL, 0 after printing how to load the
 * module (psModuleLoaded: PS.PULL without arguments, refused before any ACL
 * check, so the worker role needs no +command and the ACL log stays clean).
 * Checked at connect, before anything is written, so a server without the
 * module is left untouched. */
static int module_loaded(const trainOpts *o, psClient *c) {
    const int loaded = psModuleLoaded(c);
    if (loaded == PS_ERR) {
        tr_err(o, "--addr %s: %s", o->addr, c->errstr);
        return 0;
    }
    const int missing = !loaded;
    if (missing)
        tr_err(o, "--addr %s: the server does not have the ps module loaded: load build/ps.so "
                  "(redis-server --loadmodule /path/to/build/ps.so, or MODULE LOAD "
                  "/path/to/build/ps.so)", o->addr);
    return !missing;
}


int tr_parse_policies(const trainOpts *o, int *durability, int *lost_state) {
    const char *d = o->on_degraded ? o->on_degraded : "degrade";
    const char *l = o->on_lost_state ? o->on_lost_state : "stop";
    if (!strcmp(d, "degrade")) *durability = PS_DURABILITY_DEGRADE;
    else if (!strcmp(d, "block")) *durability = PS_DURABILITY_BLOCK;
    else if (!strcmp(d, "fail")) *durability = PS_DURABILITY_FAIL;
    else return -1;
    if (!strcmp(l, "stop")) *lost_state = PS_LOST_STATE_STOP;
    else if (!strcmp(l, "continue")) *lost_state = PS_LOST_STATE_CONTINUE;
    else return -1;
    return 0;
}


/* Copies INFO field 'name' ("run_id") of 'info' into buf ("?" when absent). */
static void info_value(const char *info, const char *name, char *buf, size_t len) {
    size_t n = strlen(name);
    snprintf(buf, len, "?");
    for (const char *l = info; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, name, n) == 0 && l[n] == ':') {
            size_t k = strcspn(l + n + 1, "\r\n");
            snprintf(buf, len, "%.*s", (int)(k < len ? k : len - 1), l + n + 1);
            return;
        }
    }
}


/* Says once per process which server(s) this command works on: the --addr
 * given, standalone or a cluster with its node and master counts (from
 * CLUSTER SLOTS), and the answering node's port, Redis version and run_id
 * (INFO server: a role needs +info|server, else "?"), so a job that reached
 * an unexpected server shows it in its first line. */
void tr_announce_server(const trainOpts *o, psClient *c) {
    static int done;
    char runid[48], version[32], port[16], role[16], where[160] = "standalone";
    if (done) return;
    done = 1;
    redisReply *r = psCommand(c, NULL, "INFO server");
    const char *info = r && r->type == REDIS_REPLY_STRING ? r->str : "";
    info_value(info, "run_id", runid, sizeof(runid));
    info_value(info, "redis_version", version, sizeof(version));
    info_value(info, "tcp_port", port, sizeof(port));
    if (r) freeReplyObject(r);
    if (c->cluster) {
        int nodes = 0, masters = 0;
        char seen[128][64];
        redisReply *s = psCommand(c, NULL, "CLUSTER SLOTS");
        for (size_t i = 0; s && s->type == REDIS_REPLY_ARRAY && i < s->elements; i++) {
            const redisReply *e = s->element[i];
            for (size_t k = 2; e->type == REDIS_REPLY_ARRAY && k < e->elements; k++) {
                const redisReply *n = e->element[k];
                if (n->type != REDIS_REPLY_ARRAY || n->elements < 2) continue;
                char id[64];
                snprintf(id, sizeof(id), "%s:%lld", n->element[0]->str, n->element[1]->integer);
                int j = 0;
                while (j < nodes && strcmp(seen[j], id) != 0) j++;
                if (j < nodes || nodes == 128) continue;
                snprintf(seen[nodes++], sizeof(seen[0]), "%s", id);
                if (k == 2) masters++;
            }
        }
        if (s) freeReplyObject(s);
        snprintf(where, sizeof(where), "cluster of %d nodes (%d masters)", nodes, masters);
        snprintf(role, sizeof(role), "node");
    } else {
        snprintf(role, sizeof(role), "server");
    }
    printf("ps-train %s: server %s: %s; answering %s on port %s: redis %s, run_id %s\n", o->cmd,
           o->addr, where, role, port, version, runid);
    fflush(stdout);
}


psClient *tr_connect(const trainOpts *o, int push_window, int wait_replicas) {
    return tr_connect_as(o, push_window, wait_replicas, NULL);
}

psClient *tr_connect_as(const trainOpts *o, int push_window, int wait_replicas,
                        const char *client_id) {
    psOptions opt = {0};
    opt.client_id = client_id;
    opt.user = o->user;
    opt.password = o->password;
    opt.push_window = push_window;
    opt.wait_replicas = wait_replicas;
    tr_parse_policies(o, &opt.durability_policy, &opt.lost_state_policy);
    opt.on_event = o->on_event;
    opt.event_udata = o->event_udata;
    psClient *c = psConnect(o->addr, &opt);
    if (c == NULL) {
        tr_err(o, "out of memory");
        return NULL;
    }
    if (c->err) {
        tr_err(o, "--addr %s: %s", o->addr, c->errstr);
        psClientFree(c);
        return NULL;
    }
    if (!module_loaded(o, c)) {
        psClientFree(c);
        return NULL;
    }
    tr_announce_server(o, c);
    return c;
}


/* Runs a command routed by 'key'; returns the reply, or NULL after printing
 * the client error or the server error reply (which is freed). */
redisReply *tr_cmd_ok(const trainOpts *o, psClient *c, const char *key, const char *fmt, ...) {
    va_list ap;
    const char *argv[16];
    size_t argl[16];
    int argc = 0;
    /* A tiny space-free formatter: every %s is one argument, literals split
     * on spaces. Enough for the fixed commands used here. */
    char lit[512];
    snprintf(lit, sizeof(lit), "%s", fmt);
    va_start(ap, fmt);
    for (char *tok = strtok(lit, " "); tok && argc < 16; tok = strtok(NULL, " ")) {
        argv[argc] = strcmp(tok, "%s") == 0 ? va_arg(ap, const char *) : tok;
        argl[argc] = strlen(argv[argc]);
        argc++;
    }
    va_end(ap);
    redisReply *r = psCommandArgv(c, key, argc, argv, argl);
    if (r == NULL) {
        tr_err(o, "%s: %s", argv[0], c->errstr);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        tr_err(o, "%s %s: %s", argv[0], argc > 1 ? argv[1] : "", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

