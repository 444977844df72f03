/* stream.h -- ps-train stream (stream.c): online training from a Redis
 * Stream, and the global progressive AUC its workers share. */
#ifndef PS_TRAIN_STREAM_H
#define PS_TRAIN_STREAM_H

#include "redis-ps/ps.h"

#define SW_BUCKETS 2048     /* histogram buckets of the logit ... */
#define SW_LOGIT_MAX 16.0   /* ... over [-16, 16): 1/64 wide */
#define SW_SLOT_S 10        /* seconds per shared histogram hash */
#define SW_AUC_S 60         /* the global AUC covers the last minute ... */
#define SW_KEEP_S 120       /* ... so a slot's hash is kept 2 minutes (older ones
                               are never read: memory stays flat on an endless
                               stream) */

/* The histogram bucket of probability 'p'. */
int sw_hist_bucket(double p);
/* AUC of the histograms 'pos' and 'neg' (SW_BUCKETS counts each), pairs in
 * one bucket counted half; *bound: how far the exact AUC of the scores can
 * be from it (the share of positive-negative pairs in one bucket, halved).
 * NAN when a class is missing. */
double sw_hist_auc(const long long *pos, const long long *neg, double *bound);
/* The global progressive AUC of job 'job' over its workers' last 'seconds'
 * (whole 10 s slots), its bound, and the events it covers. */
double sw_global_auc(psClient *c, const char *job, int seconds, double *bound, long long *events);
/* status of a sparse job: when it trained from a stream, prints the
 * events trained and malformed (its stream_events tensor) and the global
 * progressive AUC of the last minute. */
struct trainOpts;
void tr_stream_status(const struct trainOpts *o, psClient *c);
/* A key prefix in the cluster slot of key 'stream' (0), or -1. */
int sw_slot_prefix(const char *stream, char *out, size_t len);

#endif
