/* progress.h -- a worker's progress line and progress hash fields, and its
 * durability state from libps events (progress.c). */
#ifndef PS_TRAIN_PROGRESS_H
#define PS_TRAIN_PROGRESS_H

#include <stddef.h>

struct workCtx;

/* Prints the progress line (every --interval-ms, or now when 'final') and
 * writes the window's loss and rate to the progress hash. */
void print_progress(struct workCtx *w, int final);
/* libps event callback (udata: the workCtx). */
void tw_on_event(void *udata, int ev, const char *node, const char *msg);
/* The durability state for the progress hash. */
void tw_durability_text(const struct workCtx *w, char *buf, size_t len);

#endif
