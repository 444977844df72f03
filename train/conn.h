/* conn.h -- ps-train's connection to the servers: connect with the
 * options' address, credentials and policies (refusing a server without
 * the module), and run a command whose error is printed (conn.c). */
#ifndef PS_TRAIN_CONN_H
#define PS_TRAIN_CONN_H

#include "opts.h"
#include "redis-ps/ps.h"

/* Prints, once per process, the server(s) behind the connection (--addr,
 * standalone or cluster node/master counts, port, version, run_id). */
void tr_announce_server(const trainOpts *o, psClient *c);
/* Connects with the options' address and credentials (and announces the
 * server, tr_announce_server); prints the error and returns NULL on failure. */
psClient *tr_connect(const trainOpts *o, int push_window, int wait_replicas);
/* tr_connect() whose pushes carry "ID <client_id> seq" (NULL: libps's own id). */
psClient *tr_connect_as(const trainOpts *o, int push_window, int wait_replicas,
                        const char *client_id);
/* Parses --on-degraded / --on-lost-state names into PS_DURABILITY_* /
 * PS_LOST_STATE_*. Returns 0 or -1. */
int tr_parse_policies(const trainOpts *o, int *durability, int *lost_state);
/* Runs a command routed by 'key': every %s of 'fmt' is one argument,
 * literals split on spaces. Returns the reply, or NULL after printing the
 * client error or the server error reply (which is freed). */
redisReply *tr_cmd_ok(const trainOpts *o, psClient *c, const char *key, const char *fmt, ...);

#endif
