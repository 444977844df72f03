/* relay.c -- ps-relay's engine: key setup (mirror the upstream shapes as
 * local ACCUM tensors, refuse what does not fit), then the take / push /
 * ack / mirror cycle of relay.h, with progress lines. */

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "clock.h"
#include "protocol.h"
#include "relay.h"

/* One relayed tensor key. */
typedef struct relayKey {
    char *name;
    int ndim;
    uint64_t dims[8];
    uint64_t n;               /* elements */
    uint64_t mirror_version;  /* local version after the last mirror */
} relayKey;

typedef struct relay {
    const relayOpts *o;
    psClient *local, *up;
    relayKey *keys;
    int nkeys;
    uint64_t seqfloor;        /* wall clock in us at start: seqs of a wiped local server move on */
    relayStats st;
    long long start_ms, last_pull_ms, last_progress_ms;
    long long round_start_ms; /* first push of the open round seen; -1: none */
    long long last_warn_ms;   /* rate limit of the "upstream unreachable" line */
    const char *fault;        /* PS_RELAY_FAULT "phase:n": SIGKILL itself (tests) */
} relay;

static volatile sig_atomic_t Stop = 0;

static void on_signal(int sig) {
    (void)sig;
    Stop = 1;
}

static long long mono_ms(void) { return (long long)ps_mono_ms(); }

/* Sleeps 'ms', cut short only by a stop request. */
static void sleep_ms(long ms) {
    while ((ms = ps_sleep_ms(ms)) > 0 && !Stop) {
    }
}

static void say(const relay *r, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "ps-relay %s: ", r->o->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Tests only: PS_RELAY_FAULT=phase:n kills the relay (SIGKILL, no cleanup)
 * right after the n-th completion of 'phase' (take, push or ack), so that
 * the crash points of the exactly-once argument are hit on purpose. */
static void fault_point(relay *r, const char *phase) {
    static long count[3];
    static const char *const phases[3] = {"take", "push", "ack"};
    if (!r->fault) return;
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(phases[i]);
        if (strcmp(phase, phases[i]) || strncmp(r->fault, phase, l) || r->fault[l] != ':') continue;
        if (++count[i] == atol(r->fault + l + 1)) {
            fflush(NULL);
            raise(SIGKILL);
        }
    }
}

/* ========================================================================
 * Setup: keys, shapes, local ACCUM tensors
 * ====================================================================== */

/* PS.INFO of 'name' on 'c' into '*ki' (psInfo). 0 for a tensor; 1 on a
 * connection problem; 2 when the key answers an error or is no tensor (a
 * table answers as a reply the relay does not expect); 3 when it does not
 * exist. '*why' says what went wrong. */
static int tensor_info(psClient *c, const char *name, psKeyInfo *ki, const char **why) {
    *why = c->errstr;
    if (psInfo(c, name, ki) == PS_OK) {
        if (!ki->is_table) return 0;
        *why = "unexpected PS.INFO reply";
        return 2;
    }
    if (c->err == PS_ERR_NOKEY) return 3;
    return c->err == PS_ERR_SERVER || c->err == PS_ERR_PROTOCOL ? 2 : 1;
}

static void shape_str(char *buf, size_t len, int ndim, const uint64_t *dims) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && o + 2 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRIu64, i ? " " : "", dims[i]);
}

/* Adds a key name (copied). 0, or -1 when there are too many. */
static int add_key(relay *r, const char *name, size_t len) {
    if (r->nkeys == RELAY_MAX_KEYS) return -1;
    relayKey *k = &r->keys[r->nkeys++];
    memset(k, 0, sizeof(*k));
    k->name = strndup(name, len);
    return k->name ? 0 : -1;
}

static int cmp_keys(const void *a, const void *b) {
    return strcmp(((const relayKey *)a)->name, ((const relayKey *)b)->name);
}

/* Fills r->keys from --keys or from SCAN MATCH on the upstream. 0 or -1. */
static int find_keys(relay *r) {
    const relayOpts *o = r->o;
    if (o->keys) {
        for (const char *p = o->keys; *p;) {
            const char *e = strchr(p, ',');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l && add_key(r, p, l) != 0) return -1;
            p += l + (e ? 1 : 0);
        }
    } else {
        if (r->up->cluster) {
            say(r, "--match needs a standalone upstream (a SCAN reaches one node): give --keys");
            return -1;
        }
        char cursor[32] = "0";
        do {
            redisReply *rep = psCommand(r->up, NULL, "SCAN %s MATCH %s TYPE ps-tensor COUNT 1000",
                                        cursor, o->match);
            if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
                say(r, "SCAN upstream: %s", rep && rep->type == REDIS_REPLY_ERROR ? rep->str
                                                                               : r->up->errstr);
                if (rep) freeReplyObject(rep);
                return -1;
            }
            snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
            const redisReply *ks = rep->element[1];
            for (size_t i = 0; i < ks->elements; i++)
                if (add_key(r, ks->element[i]->str, ks->element[i]->len) != 0) {
                    freeReplyObject(rep);
                    say(r, "more than %d keys", RELAY_MAX_KEYS);
                    return -1;
                }
            freeReplyObject(rep);
        } while (strcmp(cursor, "0") != 0);
    }
    if (r->nkeys == 0) {
        say(r, "no tensor keys %s%s upstream", o->keys ? "in --keys" : "match ",
            o->keys ? "" : o->match);
        return -1;
    }
    qsort(r->keys, (size_t)r->nkeys, sizeof(relayKey), cmp_keys);
    return 0;
}

/* Checks key 'k' upstream and creates or checks its local ACCUM tensor.
 * Returns 0, 1 on a connection problem, 2 when the tensors do not fit. */
static int setup_key(relay *r, relayKey *k) {
    char a[128], b[128];
    psKeyInfo ui, li;
    redisReply *rep;
    const char *why;
    int st = tensor_info(r->up, k->name, &ui, &why);
    if (st == 1) {
        say(r, "PS.INFO %s upstream: %s", k->name, why);
        return 1;
    }
    if (st != 0) {
        say(r, "upstream key %s is not a tensor the relay can serve: %s", k->name, why);
        return 2;
    }
    const char *optim = ui.optimizer;
    k->ndim = ui.ndim;
    memcpy(k->dims, ui.dims, sizeof(ui.dims));
    k->n = 1;
    for (int i = 0; i < k->ndim; i++) k->n *= k->dims[i];
    const int accum = PS_PROTO_OPT_ACCUM;
    if (r->o->optim && strcasecmp(optim, r->o->optim) &&
        ps_proto_optim_parse(optim, strlen(optim)) != accum) {
        say(r, "upstream tensor %s has optimizer %s, but --optim says %s: refusing to relay it",
            k->name, optim, r->o->optim);
        return 2;
    }
    shape_str(a, sizeof(a), k->ndim, k->dims);
    for (int attempt = 0; attempt < 2; attempt++) {
        st = tensor_info(r->local, k->name, &li, &why);
        if (st == 1) {
            say(r, "PS.INFO %s local: %s", k->name, why);
            return 1;
        }
        if (st == 3) {
            /* Create it mirroring the upstream shape; NX: a concurrent
             * creator wins and is checked on the next round. */
            const char *argv[16];
            size_t argl[16];
            char dbuf[8][24];
            int c = 0;
            argv[c++] = "PS.CREATE", argv[c++] = k->name, argv[c++] = "SHAPE";
            for (int i = 0; i < k->ndim; i++) {
                snprintf(dbuf[i], sizeof(dbuf[i]), "%" PRIu64, k->dims[i]);
                argv[c++] = dbuf[i];
            }
            argv[c++] = "OPTIM", argv[c++] = "ACCUM", argv[c++] = "NX";
            for (int i = 0; i < c; i++) argl[i] = strlen(argv[i]);
            rep = psCommandArgv(r->local, k->name, c, argv, argl);
            if (!rep || rep->type == REDIS_REPLY_ERROR) {
                say(r, "PS.CREATE %s local: %s", k->name, rep ? rep->str : r->local->errstr);
                if (rep) freeReplyObject(rep);
                return rep ? 2 : 1;
            }
            freeReplyObject(rep);
            continue;
        }
        if (st != 0) {
            say(r, "local key %s is not a tensor: %s", k->name, why);
            return 2;
        }
        const char *lopt = li.optimizer;
        if (ps_proto_optim_parse(lopt, strlen(lopt)) != accum) {
            say(r, "local tensor %s has optimizer %s: a relay's local tensors must be ACCUM "
                   "tensors (delete it and start the relay before the local workers' init; "
                   "the relay creates it)", k->name, lopt);
            return 2;
        }
        shape_str(b, sizeof(b), li.ndim, li.dims);
        if (strcmp(a, b) != 0) {
            say(r, "local tensor %s has shape [%s] but the upstream one has shape [%s]: "
                   "refusing to relay it", k->name, b, a);
            return 2;
        }
        k->mirror_version = li.version;
        return 0;
    }
    say(r, "local tensor %s could not be created", k->name);
    return 1;
}

/* ========================================================================
 * The cycle
 * ====================================================================== */

/* A batch of one command per key, argv held by the caller. */
typedef struct batch {
    int n;
    const char *keys[RELAY_MAX_KEYS];
    int argc[RELAY_MAX_KEYS];
    const char **argv[RELAY_MAX_KEYS];
    const size_t *argl[RELAY_MAX_KEYS];
    int idx[RELAY_MAX_KEYS]; /* key index of each command */
    redisReply *rep[RELAY_MAX_KEYS];
} batch;

/* Pulls every key upstream and mirrors it locally. 0, or -1 (retry later). */
static int pull_and_mirror(relay *r, batch *b) {
    static const char *pargv[RELAY_MAX_KEYS][2];
    static size_t pargl[RELAY_MAX_KEYS][2];
    b->n = 0;
    for (int i = 0; i < r->nkeys; i++) {
        pargv[i][0] = "PS.PULL", pargv[i][1] = r->keys[i].name;
        pargl[i][0] = 7, pargl[i][1] = strlen(r->keys[i].name);
        b->keys[i] = r->keys[i].name, b->argc[i] = 2, b->argv[i] = pargv[i], b->argl[i] = pargl[i];
        b->idx[i] = i;
        b->n++;
    }
    if (psCommandBatchArgv(r->up, b->n, b->keys, b->argc, b->argv, b->argl, b->rep) < 0) return -1;
    static const char *margv[RELAY_MAX_KEYS][4];
    static size_t margl[RELAY_MAX_KEYS][4];
    static char vbuf[RELAY_MAX_KEYS][24];
    batch *m = malloc(sizeof(batch));
    int rc = m ? 0 : -1;
    if (m) m->n = 0;
    for (int i = 0; m && i < b->n; i++) {
        redisReply *p = b->rep[i];
        relayKey *k = &r->keys[i];
        if (!p || p->type != REDIS_REPLY_ARRAY || p->elements != 2 ||
            p->element[1]->type != REDIS_REPLY_STRING || p->element[1]->len != k->n * 4) {
            rc = -1;
            continue;
        }
        snprintf(vbuf[i], sizeof(vbuf[i]), "%lld", p->element[0]->integer);
        if (i == 0) r->st.up_version = (uint64_t)p->element[0]->integer;
        margv[i][0] = "PS.MIRROR", margv[i][1] = k->name, margv[i][2] = vbuf[i];
        margv[i][3] = p->element[1]->str;
        margl[i][0] = 9, margl[i][1] = strlen(k->name), margl[i][2] = strlen(vbuf[i]);
        margl[i][3] = p->element[1]->len;
        int j = m->n++;
        m->keys[j] = k->name, m->argc[j] = 4, m->argv[j] = margv[i], m->argl[j] = margl[i];
        m->idx[j] = i;
    }
    if (m && m->n && psCommandBatchArgv(r->local, m->n, m->keys, m->argc, m->argv, m->argl,
                                        m->rep) >= 0) {
        for (int j = 0; j < m->n; j++) {
            if (m->rep[j] && m->rep[j]->type == REDIS_REPLY_INTEGER)
                r->keys[m->idx[j]].mirror_version = (uint64_t)m->rep[j]->integer;
            else rc = -1;
            if (m->rep[j]) freeReplyObject(m->rep[j]);
        }
    } else if (m && m->n) {
        rc = -1;
    }
    for (int i = 0; i < b->n; i++)
        if (b->rep[i]) freeReplyObject(b->rep[i]);
    free(m);
    if (rc == 0) r->st.pulls++;
    r->last_pull_ms = mono_ms();
    return rc;
}

static void progress(relay *r, const char *what) {
    const relayStats *s = &r->st;
    double saved = s->bytes_local ? 100.0 * (1.0 - (double)s->bytes_up / (double)s->bytes_local) : 0;
    fprintf(stdout,
            "[relay %s] %s%.1fs | local pushes in %" PRIu64 " | upstream pushes out %" PRIu64
            " (resent %" PRIu64 ", rounds not of N %" PRIu64 ") | bytes in %.1f MB out %.1f MB "
            "saved %.1f%% | upstream version %" PRIu64 " | upstream staleness %.2f\n",
            r->o->name, what, (double)(mono_ms() - r->start_ms) / 1000.0, s->local_pushes,
            s->up_pushes, s->resends, s->uneven_rounds, (double)s->bytes_local / 1e6,
            (double)s->bytes_up / 1e6, saved,
            s->up_version, s->up_pushes ? (double)s->stale_sum / (double)s->up_pushes : 0.0);
    fflush(stdout);
}

/* The fewest pushes a take needs now: the round size until the round's
 * time is up (or the relay stops), then 1. */
static long long take_mincount(const relay *r, long long now) {
    const relayOpts *o = r->o;
    if (Stop) return 1;
    long long limit = o->sync ? o->round_timeout_ms : o->every_ms;
    if (r->round_start_ms >= 0 && now - r->round_start_ms >= limit) return 1;
    if (o->sync) return o->workers;
    return o->every_pushes > 0 ? o->every_pushes : (1LL << 62);
}

/* Fills 'tk' with PS.TAKE key MINCOUNT 'minb' SEQFLOOR 'floorb' for every
 * key and runs it on the local server. 0, or -1 when nothing came back. */
static int take_all(relay *r, batch *tk, const char *minb, const char *floorb) {
    static const char *targv[RELAY_MAX_KEYS][6];
    static size_t targl[RELAY_MAX_KEYS][6];
    tk->n = 0;
    for (int i = 0; i < r->nkeys; i++) {
        const char **a = targv[i];
        a[0] = "PS.TAKE", a[1] = r->keys[i].name, a[2] = "MINCOUNT", a[3] = minb;
        a[4] = "SEQFLOOR", a[5] = floorb;
        for (int j = 0; j < 6; j++) targl[i][j] = strlen(a[j]);
        tk->keys[i] = r->keys[i].name, tk->argc[i] = 6, tk->argv[i] = a, tk->argl[i] = targl[i];
        tk->idx[i] = i;
        tk->n++;
    }
    return psCommandBatchArgv(r->local, tk->n, tk->keys, tk->argc, tk->argv, tk->argl, tk->rep) < 0
               ? -1
               : 0;
}

static void free_replies(batch *b) {
    for (int i = 0; i < b->n; i++)
        if (b->rep[i]) freeReplyObject(b->rep[i]);
}

/* Whether a round is due: a pending slot is there (to resend), or enough
 * is summed: async, some key has the round's count; sync, EVERY key has
 * the N pushes (a worker pushes its keys one after the other, and a round
 * taken between two of them would split that model push over two rounds).
 * A round is decided once for all keys, so a worker's push of the whole
 * model lands in one upstream push per round and one pull follows it (not
 * one per key). A peek is a PS.TAKE whose MINCOUNT cannot be met: it
 * changes nothing. Sets *summed when any key has something summed. */
static int round_due(relay *r, batch *tk, long long need, int *summed) {
    static char peekb[24], floorb[24];
    snprintf(peekb, sizeof(peekb), "%lld", 1LL << 62);
    snprintf(floorb, sizeof(floorb), "%" PRIu64, r->seqfloor);
    if (take_all(r, tk, peekb, floorb) != 0) return 0;
    long long most = 0, least = 1LL << 62;
    int pending = 0;
    for (int i = 0; i < tk->n; i++) {
        const redisReply *t = tk->rep[i];
        if (t && t->type == REDIS_REPLY_ARRAY) pending = 1;
        if (t && t->type == REDIS_REPLY_INTEGER && t->integer > most) most = t->integer;
        if (t && t->type == REDIS_REPLY_INTEGER && t->integer < least) least = t->integer;
        if (t && t->type == REDIS_REPLY_ERROR) pending = 1; /* the take below reports it */
    }
    free_replies(tk);
    *summed = most > 0;
    /* need 1 is a closing round (timeout, stop): whatever any key has. */
    long long have = r->o->sync && need > 1 ? least : most;
    return pending || (most > 0 && have >= need);
}

/* One cycle over every key. Returns the number of upstream pushes
 * acknowledged, 0 when nothing was due, -1 on a fatal error. */
static int cycle(relay *r, batch *tk, batch *pu, batch *ak) {
    static char floorb[32];
    long long now = mono_ms();
    int summed = 0;
    const int due = round_due(r, tk, take_mincount(r, now), &summed);
    if (summed && r->round_start_ms < 0) r->round_start_ms = now;
    if (!due) return 0;
    snprintf(floorb, sizeof(floorb), "%" PRIu64, r->seqfloor);
    if (take_all(r, tk, "1", floorb) != 0) return 0;
    static const char *pargv[RELAY_MAX_KEYS][7];
    static size_t pargl[RELAY_MAX_KEYS][7];
    static char seqb[RELAY_MAX_KEYS][24];
    static float *meanbuf[RELAY_MAX_KEYS];
    uint64_t counts[RELAY_MAX_KEYS];
    int fatal = 0;
    pu->n = 0;
    for (int i = 0; i < tk->n; i++) {
        redisReply *t = tk->rep[i];
        if (!t) continue;
        if (t->type == REDIS_REPLY_INTEGER) continue;
        if (t->type == REDIS_REPLY_ERROR) {
            say(r, "PS.TAKE %s: %s", r->keys[i].name, t->str);
            fatal = 1;
            continue;
        }
        if (t->type != REDIS_REPLY_ARRAY || t->elements != 3 ||
            t->element[2]->len != r->keys[i].n * 4) {
            say(r, "PS.TAKE %s: unexpected reply", r->keys[i].name);
            fatal = 1;
            continue;
        }
        relayKey *k = &r->keys[i];
        const redisReply *blob = t->element[2];
        counts[i] = (uint64_t)t->element[1]->integer;
        snprintf(seqb[i], sizeof(seqb[i]), "%lld", t->element[0]->integer);
        const char *data = blob->str;
        if (r->o->mean) {
            /* The mean of the count pushes: each element divided once. */
            float *mb = realloc(meanbuf[i], blob->len);
            if (!mb) return -1;
            meanbuf[i] = mb;
            memcpy(mb, blob->str, blob->len);
            for (uint64_t e = 0; e < k->n; e++) mb[e] = mb[e] / (float)counts[i];
            data = (const char *)mb;
        }
        const char **a = pargv[i];
        a[0] = "PS.PUSHGRAD", a[1] = k->name, a[2] = data, a[3] = "ID", a[4] = r->o->name;
        a[5] = seqb[i];
        for (int j = 0; j < 6; j++) pargl[i][j] = j == 2 ? blob->len : strlen(a[j]);
        int j = pu->n++;
        pu->keys[j] = k->name, pu->argc[j] = 6, pu->argv[j] = a, pu->argl[j] = pargl[i];
        pu->idx[j] = i;
    }
    for (int j = 0; r->o->sync && j < pu->n; j++)
        if (counts[pu->idx[j]] != (uint64_t)r->o->workers) {
            r->st.uneven_rounds++;
            break;
        }
    if (pu->n) fault_point(r, "take");
    int acked = 0;
    if (pu->n && psCommandBatchArgv(r->up, pu->n, pu->keys, pu->argc, pu->argv, pu->argl,
                                    pu->rep) >= 0) {
        fault_point(r, "push");
        static const char *aargv[RELAY_MAX_KEYS][3];
        static size_t aargl[RELAY_MAX_KEYS][3];
        ak->n = 0;
        for (int j = 0; j < pu->n; j++) {
            redisReply *p = pu->rep[j];
            int i = pu->idx[j];
            relayKey *k = &r->keys[i];
            if (!p) { /* no answer: the slot stays pending and is resent next cycle */
                long long t = mono_ms();
                if (t - r->last_warn_ms >= 1000) {
                    say(r, "upstream push of %s: %s (kept pending, retried)", k->name,
                        r->up->errstr[0] ? r->up->errstr : "no reply");
                    r->last_warn_ms = t;
                }
                continue;
            }
            if (p->type == REDIS_REPLY_ERROR) {
                /* ERR and WRONGTYPE do not pass by themselves; the rest
                 * (STALE, BUSY, OOM, ...) may. */
                const ps_proto_error cls = ps_proto_error_class(p->str, p->len);
                const int bad = ps_proto_error_is_err(cls) || cls == PS_PROTO_ERR_WRONGTYPE;
                say(r, "upstream PS.PUSHGRAD %s: %s%s", k->name, p->str,
                    !bad ? " (kept pending, retried)"
                         : " (kept pending; fix the upstream tensor and restart the relay)");
                if (bad) fatal = 1;
            } else if (p->type == REDIS_REPLY_INTEGER) {
                uint64_t v = (uint64_t)p->integer;
                r->st.stale_sum += v > k->mirror_version + 1 ? v - k->mirror_version - 1 : 0;
                r->st.local_pushes += counts[i];
                r->st.bytes_local += counts[i] * k->n * 4;
                r->st.bytes_up += k->n * 4;
                const char **a = aargv[i];
                a[0] = "PS.TAKEACK", a[1] = k->name, a[2] = seqb[i];
                for (int m = 0; m < 3; m++) aargl[i][m] = strlen(a[m]);
                int m = ak->n++;
                ak->keys[m] = k->name, ak->argc[m] = 3, ak->argv[m] = a, ak->argl[m] = aargl[i];
                ak->idx[m] = i;
            }
        }
        if (ak->n && psCommandBatchArgv(r->local, ak->n, ak->keys, ak->argc, ak->argv, ak->argl,
                                        ak->rep) >= 0) {
            for (int m = 0; m < ak->n; m++) {
                redisReply *a = ak->rep[m];
                if (a && a->type == REDIS_REPLY_INTEGER) {
                    acked++;
                    r->st.up_pushes++;
                    if (a->integer == 0) r->st.resends++;
                }
                if (a) freeReplyObject(a);
            }
            fault_point(r, "ack");
        }
        for (int j = 0; j < pu->n; j++)
            if (pu->rep[j]) freeReplyObject(pu->rep[j]);
    }
    free_replies(tk);
    if (acked) r->round_start_ms = -1;
    return fatal ? -1 : acked;
}

int relay_run(const relayOpts *o) {
    relay r;
    memset(&r, 0, sizeof(r));
    r.o = o;
    r.fault = getenv("PS_RELAY_FAULT");
    r.round_start_ms = -1;
    r.start_ms = r.last_progress_ms = mono_ms();
    r.seqfloor = ps_wall_us();
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int rc = 1;
    batch *b[3] = {malloc(sizeof(batch)), malloc(sizeof(batch)), malloc(sizeof(batch))};
    r.keys = calloc(RELAY_MAX_KEYS, sizeof(relayKey));
    psOptions opt = {0};
    opt.client_id = o->name;
    r.local = psConnect(o->local, &opt);
    r.up = psConnect(o->upstream, &opt);
    if (!b[0] || !b[1] || !b[2] || !r.keys || !r.local || !r.up) {
        say(&r, "out of memory");
        goto out;
    }
    if (r.local->err) {
        say(&r, "--local %s: %s", o->local, r.local->errstr);
        goto out;
    }
    if (r.up->err) {
        say(&r, "--upstream %s: %s", o->upstream, r.up->errstr);
        goto out;
    }
    if (find_keys(&r) != 0) {
        rc = 2;
        goto out;
    }
    for (int i = 0; i < r.nkeys; i++)
        if ((rc = setup_key(&r, &r.keys[i])) != 0) goto out;
    rc = 1;
    if (pull_and_mirror(&r, b[0]) != 0) {
        say(&r, "the first upstream pull failed: %s", r.up->err ? r.up->errstr : "bad reply");
        goto out;
    }
    printf("[relay %s] relaying %d keys from %s to %s, %s, sending the %s, seq floor %" PRIu64 "\n",
           o->name, r.nkeys, o->local, o->upstream, o->sync ? "sync rounds" : "async",
           o->mean ? "mean" : "sum", r.seqfloor);
    fflush(stdout);
    for (;;) {
        int stopping = Stop;
        int n = cycle(&r, b[0], b[1], b[2]);
        if (n < 0) goto out;
        long long now = mono_ms();
        /* Sync: the local version moves only after a forwarded round, so a
         * worker waiting for the version above its model's (ps-train
         * --sync-rounds, MINVERSION) wakes when its own round is upstream,
         * never on a periodic pull of the other relays' progress. */
        if (n > 0 || (!o->sync && now - r.last_pull_ms >= o->pull_ms)) pull_and_mirror(&r, b[0]);
        if (o->progress_ms > 0 && now - r.last_progress_ms >= o->progress_ms) {
            progress(&r, "");
            r.last_progress_ms = now;
        }
        /* Stopping: one more cycle took everything summed (MINCOUNT 1); stop
         * once a cycle forwards nothing. */
        if (stopping && n == 0) break;
        if (n == 0) sleep_ms(o->poll_ms);
    }
    progress(&r, "stopped after ");
    rc = 0;
out:
    psClientFree(r.local);
    psClientFree(r.up);
    for (int i = 0; r.keys && i < r.nkeys; i++) free(r.keys[i].name);
    free(r.keys);
    for (int i = 0; i < 3; i++) free(b[i]);
    return rc;
}
