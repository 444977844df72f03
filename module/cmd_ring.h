/* cmd_ring.h -- what the two halves of the ring protocol share: cmd_ring.c
 * (the commands on tensors and tables) and cmd_ring_table.c (a table's
 * JOIN, push hooks, PS.INFO fields and persistence). */

#ifndef PS_CMD_RING_H
#define PS_CMD_RING_H

#include "ring.h"
#include "ring_table.h"
#include "embed_glue.h"
#include "redismodule.h"

#define RW (REDISMODULE_READ | REDISMODULE_WRITE)

/* The reply of a failed ring operation (status PS_RING_E* / PS_RINGT_E*). */
int ps_ring_reply_error(RedisModuleCtx *ctx, int st);

/* Opens the tensor or the table at 'kn': returns the tensor, or NULL with
 * *tab the table, or NULL with *tab NULL after replying the error (no such
 * key, WRONGTYPE, a table being restored) with the key closed. */
PSTensor *ps_ring_open(RedisModuleCtx *ctx, RedisModuleString *kn, int mode,
                       RedisModuleKey **key, PSEmbedValue **tab);

/* The FROM origin seq triples of JOIN / JOINBEGIN from argv[first] on, into
 * 'from' (PS_RING_MAX_ORIGINS + 1 entries). Their count, or -1 with the
 * error replied. */
long ps_ring_parse_from(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int first,
                        PSRingFrom *from);

/* PS.RING key ROWS | JOINBEGIN | JOINROWS | JOINEND (a table's JOIN). */
int ps_ring_rows(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int ps_ring_join_begin(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int ps_ring_join_rows(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int ps_ring_join_end(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

#endif /* PS_CMD_RING_H */
