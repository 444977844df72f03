/* errors.h -- every error string the module answers, in one place.
 * Each starts with a code (ERR, WRONGTYPE, BUSYKEY, STALE, OOM, ...), as
 * Redis clients expect. Strings with a %-placeholder go through
 * ps_reply_errorf() in ps_module.h. The texts clients tell apart (no such
 * key, a VERSION from the future, option errors) and the lists of formats
 * and optimizers inside messages come from common/protocol.h; a code that
 * clients classify (STALE, BUSY, ...) is a PS_PROTO_ERRORS row there. */

#ifndef PS_ERRORS_H
#define PS_ERRORS_H

#include "protocol.h"

#define PSERR_NOKEY PS_PROTO_ERRTEXT_NOKEY
#define PSERR_BUSYKEY "BUSYKEY Target key name already exists."
#define PSERR_SYNTAX_F PS_PROTO_ERRTEXT_SYNTAX
#define PSERR_UNKNOWN_OPT_F PS_PROTO_ERRTEXT_UNKNOWN_OPT
#define PSERR_DUP_OPT_F PS_PROTO_ERRTEXT_DUP_OPT
#define PSERR_MISSING_ARG_F PS_PROTO_ERRTEXT_MISSING_ARG
#define PSERR_NOT_INT_F "ERR %s: value is not an integer or out of range"
#define PSERR_NOT_FLOAT_F "ERR %s: value is not a valid finite float"
#define PSERR_SHAPE_F "ERR invalid shape: %s"
#define PSERR_NO_SHAPE "ERR SHAPE is required"
#define PSERR_INIT_AND_DATA "ERR INIT and DATA are mutually exclusive"
#define PSERR_FORMAT_F "ERR unknown FORMAT '%s' (" PS_PROTO_FORMAT_NAMES ", VALUES)"
#define PSERR_FORMAT_NOT_HERE_F "ERR FORMAT %s is not allowed here"
#define PSERR_BLOBLEN_F "ERR %s has %zu bytes; the shape needs %zu bytes as %s"
#define PSERR_VALUES_COUNT_F "ERR VALUES has %zu numbers; the shape needs %llu"
#define PSERR_TOPK "ERR TOPK gradient is malformed (length or index out of range)"
#define PSERR_ROWS "ERR ROWS must be a non-empty blob of little-endian uint32 row indices < dim 0"
#define PSERR_ROWS_FORMAT "ERR ROWS needs a dense gradient (" PS_PROTO_DENSE_FORMAT_NAMES " or VALUES)"
#define PSERR_NONFINITE "ERR gradient contains NaN or Inf; nothing applied"
#define PSERR_RANGE "ERR effective step (LR x SCALE) overflows float32; nothing applied"
#define PSERR_NONFINITE_DATA "ERR data contains NaN or Inf"
#define PSERR_STALE_F "STALE gradient from version %llu is %llu versions behind %llu (MAXSTALENESS %lld)"
#define PSERR_ROUND_F "STALE sync round for version %llu is closed (current version %llu)"
#define PSERR_FUTURE_F PS_PROTO_ERRTEXT_FUTURE
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
#define PSERR_OPTIM_F "ERR unknown OPTIM '%s' (" PS_PROTO_TENSOR_OPTIM_NAMES ")"
#define PSERR_FORMAT_NEEDS_DATA "ERR FORMAT needs DATA"
#define PSERR_INTERNAL "ERR internal error"
/* Embedding tables (cmd_embed.c). */
#define PSERR_IDFORMAT_F "ERR unknown IDFORMAT '%s' (" PS_PROTO_ID_FORMAT_NAMES ")"
#define PSERR_IDS_EF_F "ERR IDS (IDFORMAT EF) is malformed: %s"
#define PSERR_IDS_EF_COUNT_F "ERR IDS (IDFORMAT EF) declares %llu ids: must be 1..%llu and at most 8 per byte of its %zu bytes"
#define PSERR_EMBED_IDS "ERR IDS must be a non-empty blob of little-endian uint64 ids (a multiple of 8 bytes, at most 16777216 ids)"
#define PSERR_EMBED_NEEDS_IDS "ERR a table is pulled and pushed by IDS"
#define PSERR_EMBED_VALUES_F "ERR VALUES has %zu numbers; %zu ids x dim %u need %llu"
#define PSERR_EMBED_PULL_BIG_F "ERR pull of %llu ids x dim %u (%llu bytes) exceeds ps.max-pull-bytes (%llu)"
#define PSERR_EMBED_FULL "ERR the table would exceed 67108863 rows; nothing applied"
#define PSERR_EMBED_RESTORING "BUSY the table is being restored (PS._RESTORE EMBED without EEND)"
#define PSERR_EMBED_NO_DIM "ERR DIM is required"
#define PSERR_EMBED_CAPACITY "ERR CAPACITY must be >= 1 (omit it for no bound)"
#define PSERR_EMBED_OPTIM_F "ERR unknown OPTIM '%s' for a table (" PS_PROTO_TABLE_OPTIM_NAMES ")"
#define PSERR_EMBED_PARAM_F "ERR unknown or read-only table parameter '%s'"
#define PSERR_EMBED_REBASE_F PS_PROTO_ERRTEXT_REBASE " SINCE %llu is not after the tombstone horizon %llu or is after the table version %llu: the rows gone since are not known; export every row again (SINCE 0)"
#define PSERR_PULL_TOO_BIG_F "ERR pull of %llu elements (%llu bytes) exceeds ps.max-pull-bytes (%llu)"
#define PSERR_PULL_ROWS_F "ERR ROWS has %zu indices (repeats count); a pull returns at most dim 0 = %llu rows"
#define PSERR_TOO_MANY_WAITERS_F "BUSY %llu pulls are waiting on MINVERSION, the limit ps.max-blocked-pulls; retry later"
#define PSERR_KEY_GONE "ERR the key was deleted while the pull waited for MINVERSION"
#define PSERR_NOT_ACCUM_F "ERR not an ACCUM tensor (its optimizer is %s): create it with OPTIM ACCUM"
/* Retryable: nothing changed; libps waits (backoff, within its retry budget) and resends. */
#define PSERR_BACKLOG PS_PROTO_ERRTEXT_BACKLOG " the ACCUM tensor holds MAXBACKLOG gradients not yet forwarded upstream (PS.INFO max_backlog): its relay is down or behind; retry later (nothing changed)"
#define PSERR_TAKEWAIT_MINCOUNT "ERR PS.TAKEWAIT needs MINCOUNT"
#define PSERR_TAKEWAIT_GONE "ERR the key was deleted while PS.TAKEWAIT waited"
#define PSERR_ACCUM_SYNC "ERR an ACCUM tensor takes no SYNC (the relay forms the rounds)"
/* Ring tracking (cmd_ring.c, ring.h): one text per PS_RING_E* status. */
#define PSERR_RING_TABLE_EVICT "ERR a ring-tracked table keeps its rows: no CAPACITY, TTL or PS.EVICT while tracked (PS.RING key UNTRACK first; TRACK refuses a table with CAPACITY or TTL)"
#define PSERR_RING_TABLE_FTRL "ERR an FTRL table is not ring-tracked (its values are a function of z and n, a received delta cannot move them)"
#define PSERR_RING_ROWSIZE "ERR a table delta is ids (8 bytes each, strictly ascending) and rows x dim F32 values"
#define PSERR_RING_TABLE_JOIN "ERR PS.RING JOIN copies a tensor only: a table joins by copying a neighbour's rows (PS.RING key ROWS on the neighbour; JOINBEGIN, JOINROWS, JOINEND here)"
#define PSERR_RING_JOINING "BUSY a JOIN of the table is in progress (PS.RING key JOINBEGIN without JOINEND; PS.INFO ring_joining): pushes and ring traffic wait for JOINEND (or a new JOINBEGIN)"
#define PSERR_RING_NOJOIN "ERR no JOIN of the table is in progress (PS.RING key JOINBEGIN first)"
#define PSERR_RING_JOINPAGE "ERR JOINROWS pages come in order 0, 1, ... and JOINEND names the pages and rows sent (PS.INFO ring_join_pages, ring_join_rows); nothing changed"
#define PSERR_RING_JOINDUP "ERR a JOINROWS row is in the table already (copied by an earlier page); nothing changed"
#define PSERR_RING_ROWS_TENSOR "ERR PS.RING ROWS pages a table; a tensor's copy is PS.RING key STATE"
#define PSERR_RING_JOIN_TENSOR "ERR JOINBEGIN, JOINROWS and JOINEND copy a table; a tensor joins with PS.RING key JOIN"
#define PSERR_RING_SUB_F "ERR unknown PS.RING subcommand '%s' (TRACK, STATE, JOIN, UNTRACK, ROWS, JOINBEGIN, JOINROWS, JOINEND)"
#define PSERR_RING_ID "ERR PS.APPLYDELTA needs ID origin seq after the key"
#define PSERR_RING_UNTRACKED "ERR the tensor is not ring-tracked (PS.RING key TRACK origin)"
#define PSERR_RING_ORIGIN "ERR an origin is 1-64 bytes of A-Z a-z 0-9 _ . : -"
#define PSERR_RING_OTHER "ERR the tensor is ring-tracked under another origin (PS.RING key JOIN changes it)"
#define PSERR_RING_COUNT "ERR a delta has 1 to (tensor length) elements: indices and values of 4 bytes each"
#define PSERR_RING_INDEX "ERR delta indices must be little-endian u32, strictly ascending and < the tensor length"
#define PSERR_RING_NONFINITE "ERR delta values must be finite and keep the tensor finite; nothing applied"
#define PSERR_RING_ORIGINS "ERR too many ring origins (at most 64)"
#define PSERR_RING_DUPFROM "ERR FROM names an origin more than once"
#define PSERR_RING_ACCUM "ERR an ACCUM tensor (a relay's mirror) is not ring-tracked: track the group server's tensor"
#define PSERR_RING_BIG "ERR a ring-tracked tensor has at most 2^32 elements (u32 indices)"
#define PSERR_RING_SEQ "ERR a ring seq is 1 to 2^63-1 (a FROM seq 0 to 2^63-1)"
#define PSERR_RING_BACKLOG PS_PROTO_ERRTEXT_BACKLOG " the ring forward queue holds MAXQUEUE bytes not yet passed on (PS.INFO ring_fwd_bytes): the ring agent is down or behind; retry later (nothing changed)"
#define PSERR_RING_LAG_F PS_PROTO_ERRTEXT_BACKLOG " this group is %llu pushes ahead of what the ring has acknowledged (MAXLAG %llu, PS.INFO ring_lag): the ring agent is down or behind; retry (nothing changed)"
#define PSERR_RING_LAG PS_PROTO_ERRTEXT_BACKLOG " this group is MAXLAG pushes ahead of what the ring has acknowledged (PS.INFO ring_lag); retry (nothing changed)"
#define PSERR_RING_GAP PS_PROTO_ERRTEXT_GAP " this group lacks a delta of that origin before this one (its mark is below PREV): nothing applied; the group must copy the ring again (PS.RING JOIN)"
#define PSERR_RING_MAXLAG "ERR MAXLAG is 0 (no bound) to 2147483648 own pushes"
/* CONFIG SET ps.* refusals: Redis puts them after its own "ERR CONFIG SET
 * failed (possibly related to argument '...') - ", so they carry no code. */
#define PSERR_CONF_DEFAULT_LR "ps.default-lr must be a finite number >= 0"
#define PSERR_CONF_POLICY "ps.default-staleness-policy must be reject or scale"
/* PS.SCORE (cmd_score.c). */
#define PSERR_SCORE_NEEDS "ERR PS.SCORE needs MODEL, COUNTS and IDS"
#define PSERR_SCORE_MODEL_F "ERR unknown MODEL '%s' (LR, FM, MLP)"
#define PSERR_SCORE_DIM_F "ERR MODEL %s needs a table of dim %s; this table has dim %u"
#define PSERR_SCORE_COUNTS "ERR COUNTS must be a non-empty blob of little-endian uint32 feature counts, one per sample (a multiple of 4 bytes)"
#define PSERR_SCORE_IDS_F "ERR IDS has %zu bytes; COUNTS sum to %llu features, which need %llu bytes of little-endian uint64 ids (at most 16777216 ids)"
#define PSERR_SCORE_VALS_F "ERR VALS has %zu bytes; %llu features need %llu bytes of little-endian float32 values"
#define PSERR_SCORE_BIAS "ERR BIAS must be a finite float32"
#define PSERR_SCORE_FORMAT_F "ERR unknown FORMAT '%s' (PS.SCORE answers F64 or VALUES; MODEL MLP F32 or VALUES)"
#define PSERR_SCORE_FORMAT_MODEL_F "ERR FORMAT %s does not go with MODEL %s (LR and FM answer F64 or VALUES, MLP F32 or VALUES)"
#define PSERR_SCORE_MLP_NEEDS "ERR MODEL MLP needs FIELDS and FIELDCOUNT"
#define PSERR_SCORE_MLP_ONLY "ERR FIELDS and FIELDCOUNT are MODEL MLP's (LR and FM take neither)"
#define PSERR_SCORE_MLP_BIAS "ERR MODEL MLP takes no BIAS (it answers the pooled input, before any layer)"
#define PSERR_SCORE_FIELDCOUNT "ERR FIELDCOUNT must be an integer in 1..256 (the MLP's fields)"
#define PSERR_SCORE_FIELDS_F "ERR FIELDS has %zu bytes; %llu features need %llu bytes of little-endian uint32 field ids"
#define PSERR_SCORE_FIELD_F "ERR FIELDS: feature %llu has field %u; FIELDCOUNT %u allows 0..%u"
#define PSERR_SCORE_BIG_F "ERR score of %llu samples, %llu ids x dim %u (%llu bytes) exceeds ps.max-pull-bytes (%llu)"
#define PSERR_SCORE_POOL_BIG_F "ERR score of %llu samples x %u fields, %llu ids x dim %u (%llu bytes) exceeds ps.max-pull-bytes (%llu)"
/* PS._RESTORE (AOF replay) errors. */
#define PSERR_RESTORE_HEADER "ERR bad header"
#define PSERR_RESTORE_HEADER_F "ERR bad header: %s"
#define PSERR_RESTORE_CHUNK "ERR bad chunk"
#define PSERR_RESTORE_DEDUP "ERR bad dedup entry"
#define PSERR_RESTORE_SNAPSHOT "ERR bad snapshot"
#define PSERR_RESTORE_SYNTAX "ERR syntax error"
#define PSERR_RESTORE_RING "ERR bad ring state"

#endif /* PS_ERRORS_H */
