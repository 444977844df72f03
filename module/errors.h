/* errors.h -- every error string the module answers, in one place.
 * Each starts with a code (ERR, WRONGTYPE, BUSYKEY, STALE, OOM, ...), as
 * Redis clients expect. Strings with a %-placeholder go through
 * ps_reply_errorf() in ps_module.h. */

#ifndef PS_ERRORS_H
#define PS_ERRORS_H

#define PSERR_NOKEY "ERR no such key"
#define PSERR_BUSYKEY "BUSYKEY Target key name already exists."
#define PSERR_SYNTAX_F "ERR syntax error near '%s'"
#define PSERR_UNKNOWN_OPT_F "ERR unknown option '%s'"
#define PSERR_DUP_OPT_F "ERR option '%s' given more than once"
#define PSERR_MISSING_ARG_F "ERR option '%s' needs a value"
#define PSERR_NOT_INT_F "ERR %s: value is not an integer or out of range"
#define PSERR_NOT_FLOAT_F "ERR %s: value is not a valid finite float"
#define PSERR_SHAPE_F "ERR invalid shape: %s"
#define PSERR_NO_SHAPE "ERR SHAPE is required"
#define PSERR_INIT_AND_DATA "ERR INIT and DATA are mutually exclusive"
#define PSERR_FORMAT_F "ERR unknown FORMAT '%s' (F32, F16, BF16, I8, TOPK, VALUES)"
#define PSERR_FORMAT_NOT_HERE_F "ERR FORMAT %s is not allowed here"
#define PSERR_BLOBLEN_F "ERR %s has %zu bytes; the shape needs %zu bytes as %s"
#define PSERR_VALUES_COUNT_F "ERR VALUES has %zu numbers; the shape needs %llu"
#define PSERR_TOPK "ERR TOPK gradient is malformed (length or index out of range)"
#define PSERR_ROWS "ERR ROWS must be a non-empty blob of little-endian uint32 row indices < dim 0"
#define PSERR_ROWS_FORMAT "ERR ROWS needs a dense gradient (F32, F16, BF16, I8 or VALUES)"
#define PSERR_NONFINITE "ERR gradient contains NaN or Inf; nothing applied"
#define PSERR_RANGE "ERR effective step (LR x SCALE) overflows float32; nothing applied"
#define PSERR_NONFINITE_DATA "ERR data contains NaN or Inf"
#define PSERR_STALE_F "STALE gradient from version %llu is %llu versions behind %llu (MAXSTALENESS %lld)"
#define PSERR_ROUND_F "STALE sync round for version %llu is closed (current version %llu)"
#define PSERR_FUTURE_F "ERR VERSION %llu is newer than the tensor's version %llu"
#define PSERR_OOM "OOM not enough memory for the tensor"
#define PSERR_TOO_BIG_F "ERR tensor of %llu bytes exceeds ps.max-tensor-bytes (%llu)"
#define PSERR_HYPER_F "ERR %s"
#define PSERR_NOSNAP "ERR no such snapshot"
#define PSERR_SNAP_EXISTS "ERR a snapshot with that name exists"
#define PSERR_SNAP_LIMIT_F "ERR tensor has %u snapshots, the limit ps.max-snapshots is %u"
#define PSERR_SYNC_CHANGE "ERR SYNC cannot be changed while a round is open"
#define PSERR_CONFIG_PARAM_F "ERR unknown or read-only tensor parameter '%s'"
#define PSERR_ROUND_OPEN "BUSY a sync round is open; retry once it closes (nothing changed)"
#define PSERR_ID "ERR ID needs a client id and a sequence number >= 1"

#define PSERR_VALUES_EMPTY "ERR VALUES needs numbers"
#define PSERR_VALUES_BAD_F "ERR VALUES: '%s' is not a valid float or option"
#define PSERR_TIMEOUT_NEEDS_MIN "ERR TIMEOUT needs MINVERSION"
#define PSERR_SNAP_NAME "ERR snapshot name must be 1..1024 bytes"
#define PSERR_INIT_UNIFORM "ERR INIT UNIFORM needs lo <= hi"
#define PSERR_INIT_NORMAL "ERR INIT NORMAL needs std >= 0"
#define PSERR_OPTIM_F "ERR unknown OPTIM '%s' (SGD, MOMENTUM, NESTEROV, ADAGRAD, RMSPROP, ADAM, ADAMW, ACCUM)"
#define PSERR_FORMAT_NEEDS_DATA "ERR FORMAT needs DATA"
#define PSERR_INTERNAL "ERR internal error"
#define PSERR_NOT_ACCUM_F "ERR not an ACCUM tensor (its optimizer is %s): create it with OPTIM ACCUM"
#define PSERR_ACCUM_SYNC "ERR an ACCUM tensor takes no SYNC (the relay forms the rounds)"
/* PS._RESTORE (AOF replay) errors. */
#define PSERR_RESTORE_HEADER "ERR bad header"
#define PSERR_RESTORE_HEADER_F "ERR bad header: %s"
#define PSERR_RESTORE_CHUNK "ERR bad chunk"
#define PSERR_RESTORE_DEDUP "ERR bad dedup entry"
#define PSERR_RESTORE_SNAPSHOT "ERR bad snapshot"
#define PSERR_RESTORE_SYNTAX "ERR syntax error"

#endif /* PS_ERRORS_H */
