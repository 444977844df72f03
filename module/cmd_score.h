/* cmd_score.h -- PS.SCORE (cmd_score.c), registered by cmd_table.c. */
#ifndef PS_CMD_SCORE_H
#define PS_CMD_SCORE_H

#include "redismodule.h"

int PSScore_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

#endif /* PS_CMD_SCORE_H */
