/* conn.c -- ps-train's connection to the servers (conn.h). */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "util.h"

/* 1 when the server knows PS.PULL, 0 after printing how to load the
 * module. It sends PS.PULL without arguments: Redis answers "unknown
 * command" before anything else when the module is missing, and an arity
 * error otherwise, before any ACL check (so the worker role needs no
 * +command and the ACL log stays clean) and without running it. Checked at
 * connect, before anything is written, so a server without the module is
 * left untouched. */
static int module_loaded(const trainOpts *o, psClient *c) {
    redisReply *r = psCommand(c, NULL, "PS.PULL");
    if (r == NULL) {
        tr_err(o, "--addr %s: %s", o->addr, c->errstr);
        return 0;
    }
    int missing = r->type == REDIS_REPLY_ERROR && strstr(r->str, "unknown command") != NULL;
    freeReplyObject(r);
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


psClient *tr_connect(const trainOpts *o, int push_window, int wait_replicas) {
    psOptions opt = {0};
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

