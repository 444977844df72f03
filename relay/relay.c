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

#include "agent.h"
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
    long long summed;         /* pushes summed at the last peek (-1: pending slot) */
    uint64_t backlog;         /* un-forwarded gradients at the last peek (summed; with
                                 a pending slot the server's count, pending_backlogs) */
    uint64_t seq, part;       /* the part taken this cycle: its seq and gradients */
    float *buf;               /* the scaled part (--mean, or a split take) */
} relayKey;

typedef struct relay {
    const relayOpts *o;
    psClient *local, *up;
    relayKey *keys;
    int nkeys, capkeys;
    long long max_backlog;    /* MAXBACKLOG sent with every take */
    long long max_round;      /* MAXROUND sent with every take (0: none) */
    int full_said;            /* the backlog was full at the last peek */
    uint64_t full_episodes;   /* full episodes since the last "backlog full" line */
    long long last_full_say_ms;
    uint64_t seqfloor;        /* wall clock in us at start: seqs of a wiped local server move on */
    relayStats st;
    long long start_ms, last_pull_ms, last_progress_ms;
    long long round_start_ms; /* first push of the open round seen; -1: none */
    long long last_warn_ms;   /* rate limit of the "upstream unreachable" line */
    const char *fault;        /* PS_RELAY_FAULT "phase:n": SIGKILL itself (tests) */
    int peek_ok;              /* the last peek answered for every key (k->backlog is
                                 then what each key had summed or pending) */
    long long stop_ms;        /* when the loop saw the stop request; -1: not yet */
    const psStop *stop;       /* the clients' bounded shutdown (libps stamps when
                                 a call first saw the request) */
} relay;

static void say(const relay *r, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "ps-relay %s: ", r->o->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
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
    if (r->nkeys == r->capkeys) {
        int cap = r->capkeys ? r->capkeys * 2 : 16;
        relayKey *nk = realloc(r->keys, (size_t)cap * sizeof(relayKey));
        if (!nk) return -1;
        r->keys = nk;
        r->capkeys = cap;
    }
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
                    say(r, "out of memory");
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
            if (psAccumCreate(r->local, k->name, k->ndim, k->dims) != PS_OK) {
                say(r, "PS.CREATE %s local: %s", k->name, r->local->errstr);
                return r->local->err == PS_ERR_SERVER ? 2 : 1;
            }
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

/* Scratch item arrays, one item per key, reused by every call. */
typedef struct relayItems {
    psAccumItem *take;   /* per key: its peek / take */
    psAccumItem *up;     /* the forwards (or pulls) of this cycle */
    psAccumItem *loc;    /* the acks (or mirrors) of this cycle */
    int *idx;            /* key index of each up / loc item */
    float *pulled;       /* room for every key's values (pulls) */
    psRingOp *info;      /* PS.INFO of the keys a peek found pending (pending_backlogs) */
    psKeyInfo *ki;       /* their answers */
} relayItems;

static void items_free(relayItems *it, int nkeys) {
    if (it->take) psAccumItemsRelease(it->take, (size_t)nkeys);
    free(it->take), free(it->up), free(it->loc), free(it->idx), free(it->pulled);
    free(it->info), free(it->ki);
    memset(it, 0, sizeof(*it));
}

static int items_init(relay *r, relayItems *it) {
    if (r->nkeys < 1) return -1;
    size_t n = (size_t)(unsigned)r->nkeys, floats = 0;
    for (int i = 0; i < r->nkeys; i++) floats += r->keys[i].n;
    it->take = calloc(n, sizeof(psAccumItem));
    it->up = calloc(n, sizeof(psAccumItem));
    it->loc = calloc(n, sizeof(psAccumItem));
    it->idx = calloc(n, sizeof(int));
    it->pulled = malloc((floats ? floats : 1) * sizeof(float));
    it->info = calloc(n, sizeof(psRingOp));
    it->ki = calloc(n, sizeof(psKeyInfo));
    if (!it->take || !it->up || !it->loc || !it->idx || !it->pulled || !it->info || !it->ki)
        return -1;
    for (int i = 0; i < r->nkeys; i++) {
        it->take[i].key = r->keys[i].name;
        it->take[i].n = r->keys[i].n;
    }
    return 0;
}

/* Item j of 'arr' for key i (the rest of the item cleared). */
static psAccumItem *item_for(relay *r, relayItems *it, psAccumItem *arr, int j, int i) {
    psAccumItem *x = &arr[j];
    memset(x, 0, sizeof(*x));
    x->key = r->keys[i].name;
    x->n = r->keys[i].n;
    it->idx[j] = i;
    return x;
}

/* Pulls every key upstream and mirrors it locally. 0, or -1 (retry later). */
static int pull_and_mirror(relay *r, relayItems *it) {
    size_t off = 0;
    for (int i = 0; i < r->nkeys; i++) {
        item_for(r, it, it->up, i, i)->dst = it->pulled + off;
        off += r->keys[i].n;
    }
    int rc = psAccumPull(r->up, it->up, (size_t)r->nkeys) == PS_OK ? 0 : -1;
    int m = 0;
    for (int i = 0; i < r->nkeys; i++) {
        const psAccumItem *p = &it->up[i];
        if (p->status != PS_OK) {
            rc = -1;
            continue;
        }
        if (i == 0) r->st.up_version = p->version;
        psAccumItem *x = &it->loc[m++];
        memset(x, 0, sizeof(*x));
        x->key = p->key;
        x->n = p->n;
        x->data = p->dst;
        x->version = p->version;
    }
    if (m && psAccumMirror(r->local, it->loc, (size_t)m) != PS_OK) rc = -1;
    for (int j = 0, i = 0; j < m; j++) {
        while (i < r->nkeys && strcmp(r->keys[i].name, it->loc[j].key)) i++;
        if (i < r->nkeys && it->loc[j].status == PS_OK) r->keys[i].mirror_version = it->loc[j].version;
        else rc = -1;
    }
    if (rc == 0) r->st.pulls++;
    r->last_pull_ms = agent_mono_ms();
    return rc;
}

static void progress(relay *r, const char *what) {
    const relayStats *s = &r->st;
    double saved = s->bytes_local ? 100.0 * (1.0 - (double)s->bytes_up / (double)s->bytes_local) : 0;
    uint64_t backlog = 0;
    for (int i = 0; i < r->nkeys; i++)
        if (r->keys[i].backlog > backlog) backlog = r->keys[i].backlog;
    fprintf(stdout,
            "[relay %s] %s%.1fs | local pushes in %" PRIu64 " | upstream pushes out %" PRIu64
            " (resent %" PRIu64 ", rounds not of N %" PRIu64 ", split parts %" PRIu64
            ", largest take %" PRIu64 ", largest push %" PRIu64 ") | backlog %" PRIu64
            " of %lld%s (full %" PRIu64 "x) | bytes in %.1f MB out %.1f MB saved %.1f%% | "
            "upstream version %" PRIu64 " | upstream staleness %.2f\n",
            r->o->name, what, (double)(agent_mono_ms() - r->start_ms) / 1000.0, s->local_pushes,
            s->up_pushes, s->resends, s->uneven_rounds, s->split_parts, s->largest_take,
            s->largest_part, backlog, r->max_backlog,
            r->max_backlog && backlog >= (uint64_t)r->max_backlog ? " FULL: workers paused" : "",
            s->backlog_full, (double)s->bytes_local / 1e6, (double)s->bytes_up / 1e6, saved,
            s->up_version, s->up_pushes ? (double)s->stale_sum / (double)s->up_pushes : 0.0);
    fflush(stdout);
}

/* The fewest pushes a take needs now: the round size until the round's
 * time is up (or the relay stops), then 1. */
static long long take_mincount(const relay *r, long long now) {
    const relayOpts *o = r->o;
    if (AgentStop) return 1;
    long long limit = o->sync ? o->round_timeout_ms : o->every_ms;
    if (r->round_start_ms >= 0 && now - r->round_start_ms >= limit) return 1;
    if (o->sync) return o->workers;
    return o->every_pushes > 0 ? o->every_pushes : (1LL << 62);
}

/* PS.TAKE key MINCOUNT 'min' SEQFLOOR f MAXROUND r MAXBACKLOG b for every
 * key on the local server. 0, or -1 when some take got no reply. */
static int take_all(relay *r, relayItems *it, long long min) {
    psAccumTakeOpts t = {(uint64_t)min, r->seqfloor, (uint64_t)r->max_round, r->max_backlog};
    return psAccumTake(r->local, it->take, (size_t)r->nkeys, &t) == PS_OK ? 0 : -1;
}

/* Sets the backlog of each key whose peek found a pending slot (summed -1)
 * to the local server's own count, PS.INFO's backlog: the slot's parts not
 * acknowledged plus the pushes summed since its take, what MAXBACKLOG
 * bounds. PS.TAKE answers the slot's take count only, which misses those
 * pushes: a relay restarted after a kill between its take and its ack
 * found its workers refused (the slot's count plus the pushes after it at
 * MAXBACKLOG) but took the backlog for the slot's count, below the bound,
 * and neither announced nor counted the full backlog. One pipelined batch;
 * a key that gets no answer keeps the take's count. */
static void pending_backlogs(relay *r, relayItems *it) {
    size_t n = 0;
    for (int i = 0; i < r->nkeys; i++) {
        if (r->keys[i].summed != -1) continue;
        psRingOp *op = &it->info[n];
        memset(op, 0, sizeof(*op));
        op->op = PS_RING_OP_INFO;
        op->key = r->keys[i].name;
        op->info = &it->ki[n++];
    }
    if (!n) return;
    psRingBatch *b = psRingSend(r->local, it->info, n);
    if (!b) return;
    psRingWait(r->local, b);
    for (int i = 0, j = 0; i < r->nkeys && (size_t)j < n; i++) {
        if (r->keys[i].summed != -1) continue;
        const psRingOp *op = &it->info[j++];
        if (op->status == PS_OK && op->rc == PS_OK) r->keys[i].backlog = op->info->backlog;
    }
}

/* Whether a round is due: a pending slot is there (to resend), or enough
 * is summed: async, some key has the round's count; sync, EVERY key has
 * the N pushes (a worker pushes its keys one after the other, and a round
 * taken between two of them would split that model push over two rounds).
 * A round is decided once for all keys, so a worker's push of the whole
 * model lands in one upstream push per round and one pull follows it (not
 * one per key). A peek is a PS.TAKE whose MINCOUNT cannot be met: it
 * changes nothing (but sets MAXBACKLOG the first time). Sets each key's
 * 'summed' and 'backlog' and *summed when any key has something summed. */
static int round_due(relay *r, relayItems *it, long long need, int *summed) {
    r->peek_ok = 0;
    if (take_all(r, it, 1LL << 62) != 0) return 0;
    r->peek_ok = 1;
    long long most = 0, least = 1LL << 62;
    int pending = 0, slots = 0;
    for (int i = 0; i < r->nkeys; i++) {
        const psAccumItem *t = &it->take[i];
        relayKey *k = &r->keys[i];
        if (t->status != PS_OK) {
            k->summed = 0;
            pending = 1; /* the take below reports it */
            r->peek_ok = 0;
        } else if (t->count) {
            pending = slots = 1;
            k->summed = -1;
            k->backlog = t->total;
        } else {
            k->summed = (long long)t->summed;
            k->backlog = t->summed;
            if (k->summed > most) most = k->summed;
            if (k->summed < least) least = k->summed;
        }
    }
    psAccumItemsRelease(it->take, (size_t)r->nkeys);
    if (slots) pending_backlogs(r, it);
    /* Announce a full backlog (the workers are refused): the first time of an
     * episode, at most every 5 s (a relay that keeps falling behind would
     * say it every round), with how many episodes the line stands for. */
    uint64_t worst = 0;
    for (int i = 0; i < r->nkeys; i++) {
        const uint64_t b = r->keys[i].backlog;
        if (r->max_backlog && b >= (uint64_t)r->max_backlog) r->st.backlog_full++;
        if (b > worst) worst = b;
    }
    const int full = r->max_backlog && worst >= (uint64_t)r->max_backlog;
    if (full && !r->full_said) {
        r->full_episodes++;
        const long long t = agent_mono_ms();
        if (r->last_full_say_ms == 0 || t - r->last_full_say_ms >= 5000) {
            say(r, "local backlog full (%" PRIu64 " of MAXBACKLOG %lld gradients; %" PRIu64
                   " time%s since the last such line): the local workers' pushes are refused "
                   "(they wait) until it goes upstream in parts of at most %lld",
                worst, r->max_backlog, r->full_episodes, r->full_episodes == 1 ? "" : "s",
                r->max_round);
            r->last_full_say_ms = t;
            r->full_episodes = 0;
        }
    }
    r->full_said = full;
    *summed = most > 0;
    /* need 1 is a closing round (timeout, stop): whatever any key has. */
    long long have = r->o->sync && need > 1 ? least : most;
    return pending || (most > 0 && have >= need);
}

/* Sleeps on the local server (PS.TAKEWAIT) until a round may be due: on
 * the key that decides it (sync: the one with the fewest pushes summed;
 * async: the one with the most), for the round's count, at most until the
 * round's time is up, the next pull or progress line, or --poll-ms. */
static void wait_for_round(relay *r, long long need, long long now) {
    const relayOpts *o = r->o;
    long long timeout = o->poll_ms;
    int pick = 0;
    long long min = 1;
    if (r->round_start_ms >= 0) {
        long long limit = o->sync ? o->round_timeout_ms : o->every_ms;
        long long left = r->round_start_ms + limit - now;
        if (left < timeout) timeout = left;
        for (int i = 1; i < r->nkeys; i++)
            if (o->sync ? r->keys[i].summed < r->keys[pick].summed
                        : r->keys[i].summed > r->keys[pick].summed)
                pick = i;
        min = need;
    }
    if (!o->sync) {
        long long left = r->last_pull_ms + o->pull_ms - now;
        if (left < timeout) timeout = left;
    }
    if (o->progress_ms > 0) {
        long long left = r->last_progress_ms + o->progress_ms - now;
        if (left < timeout) timeout = left;
    }
    if (timeout < 1) timeout = 1;
    if (min < 1) min = 1;
    r->st.waits++;
    if (psAccumWait(r->local, r->keys[pick].name, (uint64_t)min, (int)timeout) < 0)
        agent_sleep_ms(timeout); /* an error: the takes report it */
}

/* One cycle over every key. Returns the number of upstream pushes
 * acknowledged, 0 when nothing was due, -1 on a fatal error. */
static int cycle(relay *r, relayItems *it) {
    long long now = agent_mono_ms();
    int summed = 0;
    const long long need = take_mincount(r, now);
    const int due = round_due(r, it, need, &summed);
    if (summed && r->round_start_ms < 0) r->round_start_ms = now;
    if (!due) {
        if (!AgentStop) wait_for_round(r, need, now);
        return 0;
    }
    if (take_all(r, it, 1) != 0) { /* no reply: what was taken is resent next cycle */
        psAccumItemsRelease(it->take, (size_t)r->nkeys);
        return 0;
    }
    int fatal = 0, npu = 0;
    for (int i = 0; i < r->nkeys; i++) {
        const psAccumItem *t = &it->take[i];
        relayKey *k = &r->keys[i];
        if (t->status == PS_ERR_SERVER || t->status == PS_ERR_PROTOCOL) {
            say(r, "PS.TAKE %s: %s", k->name, t->err);
            fatal = 1;
            continue;
        }
        if (t->status != PS_OK || t->count == 0) continue;
        k->part = t->count;
        k->seq = t->seq;
        if (t->total > r->st.largest_take) r->st.largest_take = t->total;
        if (t->count > r->st.largest_part) r->st.largest_part = t->count;
        const float *data = t->sum;
        if (r->o->mean || t->count != t->total) {
            /* The mean of the total pushes (each element divided once), or
             * this part's share of the sum: count / total of it, so the
             * parts add up to the sum and none carries more than MAXROUND
             * gradients. A whole sum is sent as it is (bit for bit). */
            float *mb = realloc(k->buf, k->n * sizeof(float));
            if (!mb) return -1;
            k->buf = mb;
            const float tot = (float)t->total, part = (float)t->count;
            if (r->o->mean)
                for (uint64_t e = 0; e < k->n; e++) mb[e] = t->sum[e] / tot;
            else
                for (uint64_t e = 0; e < k->n; e++) mb[e] = t->sum[e] * part / tot;
            data = mb;
        }
        if (t->count != t->total) r->st.split_parts++;
        psAccumItem *x = item_for(r, it, it->up, npu++, i);
        x->data = data;
        x->seq = k->seq;
    }
    for (int j = 0; r->o->sync && j < npu; j++)
        if (r->keys[it->idx[j]].part != (uint64_t)r->o->workers) {
            r->st.uneven_rounds++;
            break;
        }
    if (npu) agent_fault_point(r->fault, "take");
    int acked = 0;
    if (npu) {
        psAccumForward(r->up, it->up, (size_t)npu);
        agent_fault_point(r->fault, "push");
        int nak = 0;
        int *akidx = malloc((size_t)npu * sizeof(int));
        if (!akidx) return -1;
        for (int j = 0; j < npu; j++) {
            const psAccumItem *p = &it->up[j];
            const int i = it->idx[j];
            relayKey *k = &r->keys[i];
            if (p->status == PS_ERR_SERVER) {
                /* ERR and WRONGTYPE do not pass by themselves; the rest
                 * (STALE, BUSY, OOM, ...) may. */
                const ps_proto_error cls = ps_proto_error_class(p->err, strlen(p->err));
                const int bad = ps_proto_error_is_err(cls) || cls == PS_PROTO_ERR_WRONGTYPE;
                say(r, "upstream PS.PUSHGRAD %s: %s%s", k->name, p->err,
                    !bad ? " (kept pending, retried)"
                         : " (kept pending; fix the upstream tensor and restart the relay)");
                if (bad) fatal = 1;
            } else if (p->status != PS_OK) {
                /* no answer: the slot stays pending and is resent next cycle */
                long long t = agent_mono_ms();
                if (t - r->last_warn_ms >= 1000) {
                    say(r, "upstream push of %s: %s (kept pending, retried)", k->name,
                        r->up->errstr[0] ? r->up->errstr : p->err[0] ? p->err : "no reply");
                    r->last_warn_ms = t;
                }
            } else {
                const uint64_t v = p->version;
                r->st.stale_sum += v > k->mirror_version + 1 ? v - k->mirror_version - 1 : 0;
                r->st.local_pushes += k->part;
                r->st.bytes_local += k->part * k->n * 4;
                r->st.bytes_up += k->n * 4;
                akidx[nak++] = i;
            }
        }
        for (int m = 0; m < nak; m++) item_for(r, it, it->loc, m, akidx[m])->seq = r->keys[akidx[m]].seq;
        free(akidx);
        if (nak) {
            psAccumAck(r->local, it->loc, (size_t)nak);
            for (int m = 0; m < nak; m++) {
                if (it->loc[m].status != PS_OK) continue;
                acked++;
                r->st.up_pushes++;
                if (it->loc[m].acked == 0) r->st.resends++;
            }
            agent_fault_point(r->fault, "ack");
        }
    }
    psAccumItemsRelease(it->take, (size_t)r->nkeys);
    if (acked) r->round_start_ms = -1;
    return fatal ? -1 : acked;
}

/* After a stop: 0 when the last look found nothing summed or pending on
 * any key. Otherwise says what was not forwarded and where it stays, and
 * returns RELAY_EXIT_LEFT. The relay holds no gradient of its own: a take
 * only moves the sum into the local tensor's pending slot (with its seq),
 * which stays there until an ack, so what it did not forward is in the
 * local server (kept as that server keeps its data: AOF/RDB). */
static int stop_result(relay *r, int timed_out) {
    char list[480];
    size_t o = 0;
    uint64_t left = 0;
    list[0] = '\0';
    for (int i = 0; i < r->nkeys; i++) {
        const relayKey *k = &r->keys[i];
        if (!k->backlog) continue;
        left += k->backlog;
        if (o + 64 < sizeof(list))
            o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s %" PRIu64, o ? ", " : "",
                                  k->name, k->backlog);
    }
    if (r->peek_ok && left == 0) return 0;
    const long long since = r->stop && r->stop->seen_ms_ ? r->stop->seen_ms_ : r->stop_ms;
    const long long waited = agent_mono_ms() - since;
    const char *why = timed_out ? "--stop-timeout-ms reached"
                      : !r->peek_ok ? (r->local->errstr[0] ? r->local->errstr : "no reply")
                                    : (r->up->errstr[0] ? r->up->errstr : "not acknowledged");
    if (r->peek_ok)
        say(r, "stopping: gave up %lld ms after the stop request with %" PRIu64 " gradient%s "
               "not confirmed upstream (%s): %s at the last look. They stay in the local "
               "server %s (summed, or in a pending take under its seq), so nothing is lost "
               "while that server keeps its data: a ps-relay started again with --name %s "
               "forwards them, a pending take with its seq (applied upstream once); the local "
               "workers' pushes wait (BACKLOG) once %lld are summed",
            waited, left, left == 1 ? "" : "s", why, list, r->o->local, r->o->name,
            r->max_backlog);
    else
        say(r, "stopping: gave up %lld ms after the stop request without reaching the local "
               "server %s (%s): what it holds (summed gradients, pending takes%s%s) stays "
               "there, so nothing the relay took is lost while that server keeps its data: a "
               "ps-relay started again with --name %s forwards it, a pending take with its "
               "seq (applied upstream once)",
            waited, r->o->local, why, left ? "; at the last look: " : "", left ? list : "",
            r->o->name);
    return RELAY_EXIT_LEFT;
}

/* The defaults of --max-backlog and --max-round (relay.h). */
static void round_bounds(relay *r) {
    const relayOpts *o = r->o;
    long long round = o->sync ? o->workers : o->every_pushes; /* 0: time only */
    r->max_round = o->max_round >= 0 ? o->max_round : (o->sync ? round : 2 * round);
    r->max_backlog = o->max_backlog >= 0 ? o->max_backlog : (round ? 4 * round : 64);
}

/* ps-relay --status: the local tensors' persisted round counters. */
static int print_status(relay *r) {
    int bad = 0;
    printf("%-24s %8s %8s %10s %6s %6s %8s %8s %9s %8s\n", "key", "takes", "rounds", "forwarded",
           "min", "max", "backlog", "max_bl", "refusals", "pending");
    for (int i = 0; i < r->nkeys; i++) {
        psKeyInfo ki;
        const char *why;
        if (tensor_info(r->local, r->keys[i].name, &ki, &why) != 0) {
            printf("%-24s %s\n", r->keys[i].name, why);
            bad = 1;
            continue;
        }
        if (ps_proto_optim_parse(ki.optimizer, strlen(ki.optimizer)) != PS_PROTO_OPT_ACCUM) {
            printf("%-24s not an ACCUM tensor (%s)\n", r->keys[i].name, ki.optimizer);
            bad = 1;
            continue;
        }
        printf("%-24s %8llu %8llu %10llu %6llu %6llu %8llu %8llu %9llu %8llu\n", r->keys[i].name,
               (unsigned long long)ki.relay_takes, (unsigned long long)ki.relay_rounds,
               (unsigned long long)ki.relay_forwarded, (unsigned long long)ki.relay_round_min,
               (unsigned long long)ki.relay_round_max, (unsigned long long)ki.backlog,
               (unsigned long long)ki.max_backlog, (unsigned long long)ki.backlog_refusals,
               (unsigned long long)ki.pending_parts);
    }
    fflush(stdout);
    return bad ? 1 : 0;
}

int relay_run(const relayOpts *o) {
    relay r;
    memset(&r, 0, sizeof(r));
    r.o = o;
    r.fault = getenv("PS_RELAY_FAULT");
    r.round_start_ms = -1;
    r.start_ms = r.last_progress_ms = agent_mono_ms();
    round_bounds(&r);
    r.seqfloor = ps_wall_us();
    r.stop_ms = -1;
    agent_catch_signals();
    char second[400];
    snprintf(second, sizeof(second),
             "ps-relay %s: a second signal: exiting at once (status %d); what was not "
             "forwarded stays in the local server %s (summed, or in a pending take that a "
             "ps-relay started again with --name %s resends with its seq)",
             o->name, RELAY_EXIT_LEFT, o->local, o->name);
    agent_exit_on_second_signal(RELAY_EXIT_LEFT, second);
    /* A stop bounds every call of both clients (libps gives up a command
     * --stop-timeout-ms after the stop request was first seen). */
    psStop stop = {&AgentStop, (int)o->stop_timeout_ms, 0};
    r.stop = &stop;

    int rc = 1;
    relayItems items;
    memset(&items, 0, sizeof(items));
    psOptions opt = {0};
    opt.client_id = o->name;
    r.local = psConnect(o->local, &opt);
    r.up = o->status ? NULL : psConnect(o->upstream, &opt);
    if (!r.local || (!o->status && !r.up)) {
        say(&r, "out of memory");
        goto out;
    }
    psSetStop(r.local, &stop);
    psSetStop(r.up, &stop);
    if (r.local->err) {
        say(&r, "--local %s: %s", o->local, r.local->errstr);
        goto out;
    }
    if (o->status) {
        /* The keys as given, or matched on the local server. */
        r.up = r.local;
        rc = find_keys(&r) != 0 ? 2 : print_status(&r);
        r.up = NULL;
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
    if (items_init(&r, &items) != 0) {
        say(&r, "out of memory");
        goto out;
    }
    if (pull_and_mirror(&r, &items) != 0) {
        say(&r, "the first upstream pull failed: %s", r.up->err ? r.up->errstr : "bad reply");
        goto out;
    }
    printf("[relay %s] relaying %d keys from %s to %s, %s, sending the %s, seq floor %" PRIu64
           ", at most %lld gradients per upstream push%s, local backlog bound %lld%s\n",
           o->name, r.nkeys, o->local, o->upstream, o->sync ? "sync rounds" : "async",
           o->mean ? "mean" : "sum", r.seqfloor, r.max_round, r.max_round ? "" : " (no bound)",
           r.max_backlog, r.max_backlog ? "" : " (none)");
    fflush(stdout);
    int timed_out = 0;
    for (;;) {
        int stopping = AgentStop;
        if (stopping && r.stop_ms < 0) r.stop_ms = agent_mono_ms();
        int n = cycle(&r, &items);
        if (n < 0) goto out;
        long long now = agent_mono_ms();
        /* Sync: the local version moves only after a forwarded round, so a
         * worker waiting for the version above its model's (ps-train
         * --sync-rounds, MINVERSION) wakes when its own round is upstream,
         * never on a periodic pull of the other relays' progress. */
        if (n > 0 || (!o->sync && now - r.last_pull_ms >= o->pull_ms))
            pull_and_mirror(&r, &items);
        if (o->progress_ms > 0 && now - r.last_progress_ms >= o->progress_ms) {
            progress(&r, "");
            r.last_progress_ms = now;
        }
        /* Stopping: one more cycle took everything summed (MINCOUNT 1); stop
         * once a cycle forwards nothing. */
        if (stopping && n == 0) break;
        /* Workers that keep pushing keep a cycle busy: the bound holds anyway. */
        if (stopping && agent_mono_ms() - r.stop_ms >= o->stop_timeout_ms) {
            timed_out = 1;
            break;
        }
    }
    progress(&r, "stopped after ");
    rc = stop_result(&r, timed_out);
out:
    psClientFree(r.local);
    psClientFree(r.up);
    for (int i = 0; r.keys && i < r.nkeys; i++) free(r.keys[i].name), free(r.keys[i].buf);
    free(r.keys);
    items_free(&items, r.nkeys);
    return rc;
}
