/* protocol.h -- the protocol facts, each written once: wire formats,
 * optimizers (and which apply to tensors, which to tables), the error
 * replies clients tell apart, and the options of PS.PUSHGRAD.
 *
 * Shared by the module (module/), the client library (libps/) and the tools
 * (train/, ml/ref/, relay/). Everything else is derived from these tables with
 * X-macros: codec.h's ps_format, the module's optimizer enums and name
 * tables, the lists inside module/errors.h's messages, libps's format checks
 * and reply classification, ps-train's optimizer checks. Where another enum
 * must keep its own spelling (ps.h's public psWireFormat), a _Static_assert
 * next to it checks it against the table here.
 *
 * Adding a wire format: a row in PS_PROTO_FORMATS plus its codec in
 * common/codec.c (and a PS_WIRE_ name in libps/include/redis-ps/ps.h, which
 * the build checks). Adding an optimizer: a row in PS_PROTO_OPTIMIZERS, its
 * ID in PS_PROTO_TENSOR_OPTIMS and/or PS_PROTO_TABLE_OPTIMS, plus its kernel
 * (module/core/optim.c or module/core/embed_optim.c).
 *
 * Pure C11: no allocation, no Redis or hiredis header. */
#ifndef PS_PROTOCOL_H
#define PS_PROTOCOL_H

#include <stddef.h>

/* ---------------------------------------------------------------- helpers */

/* PS_PP_IF(flag, x): x when flag is 1, nothing when 0 (flag a literal 0/1). */
#define PS_PP_IF(flag, x) PS_PP_IF_(flag, x)
#define PS_PP_IF_(flag, x) PS_PP_IF_##flag(x)
#define PS_PP_IF_0(x)
#define PS_PP_IF_1(x) x

/* ============================================================ wire formats
 *
 * X(ID, DENSE, TABLE), in code order (the code is ps_format's value and
 * psWireFormat's; append, never renumber). The name on the wire is #ID
 * ("F32"), parsed case-insensitively. X1 is applied to the first row (F32,
 * the default of every command; keep it first) and X to the others: pass the
 * same macro twice unless you join the names with separators.
 *   DENSE  1: encodes a whole array (pull replies, SET/CREATE DATA, a push of
 *             the whole tensor or of ROWS); 0: push-only (TOPK, sparse)
 *   TABLE  1: embedding tables take it (pull, push, SCANROWS)
 * A tensor push takes every format. Layouts: common/codec.h. */
#define PS_PROTO_FORMATS(X1, X)                                                                    \
    X1(F32, 1, 1)                                                                                  \
    X(F16, 1, 1)                                                                                   \
    X(BF16, 1, 1)                                                                                  \
    X(I8, 1, 0)                                                                                    \
    X(TOPK, 0, 0)

/* ============================================================== optimizers
 *
 * PS_PROTO_OPTIMIZERS: X(ID, "name", UPDATES), every optimizer the server
 * knows. The name is what PS.INFO answers and what OPTIM / ps-train
 * --optim parse (case-insensitively). UPDATES 0: the optimizer updates no
 * weights (ACCUM sums pushes for a relay; see module/core/accum.h), so a trainer
 * does not offer it.
 *
 * PS_PROTO_TENSOR_OPTIMS / PS_PROTO_TABLE_OPTIMS: which apply to tensors and
 * which to embedding tables, in code order: an optimizer's position in the
 * list is the code a tensor's / a table's header stores (RDB, AOF): append,
 * never reorder. X1 is applied to the first row and X to the others (pass
 * the same macro twice unless you join the names with separators). */
#define PS_PROTO_OPTIMIZERS(X)                                                                     \
    X(SGD, "sgd", 1)                                                                               \
    X(MOMENTUM, "momentum", 1)                                                                     \
    X(NESTEROV, "nesterov", 1)                                                                     \
    X(ADAGRAD, "adagrad", 1)                                                                       \
    X(RMSPROP, "rmsprop", 1)                                                                       \
    X(ADAM, "adam", 1)                                                                             \
    X(ADAMW, "adamw", 1)                                                                           \
    X(ACCUM, "accum", 0)                                                                           \
    X(ROWADAGRAD, "rowadagrad", 1)                                                                 \
    X(FTRL, "ftrl", 1)

#define PS_PROTO_TENSOR_OPTIMS(X1, X)                                                              \
    X1(SGD) X(MOMENTUM) X(NESTEROV) X(ADAGRAD) X(RMSPROP) X(ADAM) X(ADAMW) X(ACCUM)

#define PS_PROTO_TABLE_OPTIMS(X1, X)                                                               \
    X1(SGD) X(MOMENTUM) X(ADAGRAD) X(ROWADAGRAD) X(ADAM) X(FTRL)

/* ========================================================== error replies
 *
 * The replies a client tells apart, each a template: the code word, then
 * the message with printf placeholders (%s any text, %llu %lld %u %zu a
 * number). A template that is one word matches every reply with that code.
 * ps_proto_error_class() answers the first row in PS_PROTO_ERRORS whose
 * template matches the whole reply, so specific rows come before their
 * code's catch-all. The module answers these texts through module/errors.h,
 * which takes them from here. Codes the server itself (Redis) answers are
 * listed too, so a client classifies every reply through one function. */
#define PS_PROTO_ERRTEXT_NOKEY "ERR no such key"
#define PS_PROTO_ERRTEXT_FUTURE "ERR VERSION %llu is newer than the tensor's version %llu"
#define PS_PROTO_ERRTEXT_SYNTAX "ERR syntax error near '%s'"
#define PS_PROTO_ERRTEXT_UNKNOWN_OPT "ERR unknown option '%s'"
#define PS_PROTO_ERRTEXT_DUP_OPT "ERR option '%s' given more than once"
#define PS_PROTO_ERRTEXT_MISSING_ARG "ERR option '%s' needs a value"
#define PS_PROTO_ERRTEXT_NOCLUSTER "ERR This instance has cluster support disabled"
#define PS_PROTO_ERRTEXT_STALE "STALE"         /* a push too old (MAXSTALENESS, closed round) */
#define PS_PROTO_ERRTEXT_BUSY "BUSY"           /* retry later (round open, table restoring) */
#define PS_PROTO_ERRTEXT_BACKLOG "BACKLOG"     /* a relay's ACCUM tensor at MAXBACKLOG: retry later */
#define PS_PROTO_ERRTEXT_REBASE "REBASE"       /* PS.TOMBSTONES: SINCE is past the log's horizon:
                                                  export every row again (SINCE 0) */
#define PS_PROTO_ERRTEXT_WRONGTYPE "WRONGTYPE" /* the key holds another type */
#define PS_PROTO_ERRTEXT_BUSYKEY "BUSYKEY"     /* PS.CREATE without NX of an existing key */
#define PS_PROTO_ERRTEXT_OOM "OOM"
#define PS_PROTO_ERRTEXT_MOVED "MOVED"         /* Redis Cluster: "MOVED slot host:port" */
#define PS_PROTO_ERRTEXT_ASK "ASK"
#define PS_PROTO_ERRTEXT_TRYAGAIN "TRYAGAIN"
#define PS_PROTO_ERRTEXT_CLUSTERDOWN "CLUSTERDOWN"
#define PS_PROTO_ERRTEXT_LOADING "LOADING"
#define PS_PROTO_ERRTEXT_MASTERDOWN "MASTERDOWN"
#define PS_PROTO_ERRTEXT_READONLY "READONLY"
#define PS_PROTO_ERRTEXT_NOAUTH "NOAUTH"
#define PS_PROTO_ERRTEXT_WRONGPASS "WRONGPASS"
#define PS_PROTO_ERRTEXT_NOPERM "NOPERM"
#define PS_PROTO_ERRTEXT_ERR "ERR"             /* any other ERR */

#define PS_PROTO_ERRORS(X)                                                                         \
    X(NOKEY) X(FUTURE) X(SYNTAX) X(UNKNOWN_OPT) X(DUP_OPT) X(MISSING_ARG) X(NOCLUSTER) X(STALE)    \
    X(BUSY) X(BACKLOG) X(REBASE) X(WRONGTYPE) X(BUSYKEY) X(OOM) X(MOVED) X(ASK) X(TRYAGAIN) X(CLUSTERDOWN) X(LOADING)   \
    X(MASTERDOWN) X(READONLY) X(NOAUTH) X(WRONGPASS) X(NOPERM) X(ERR)

/* ====================================================== PS.PUSHGRAD options
 *
 * X(ID, NVALS, TENSOR, TABLE): the keyword is #ID, followed by NVALS values;
 * TENSOR / TABLE 1 when a tensor push / a table push takes it:
 *   PS.PUSHGRAD key grad [FORMAT f] [ROWS blob] [VERSION v] [ID client seq] [SCALE s]
 *   PS.PUSHGRAD key grad [FORMAT f] IDS idblob [VERSION v] [ID client seq]
 * (VALUES g1 .. gn in place of grad takes no FORMAT.) */
#define PS_PROTO_PUSH_OPTIONS(X)                                                                   \
    X(FORMAT, 1, 1, 1)                                                                             \
    X(ROWS, 1, 1, 0)                                                                               \
    X(VERSION, 1, 1, 1)                                                                            \
    X(ID, 2, 1, 1)                                                                                 \
    X(SCALE, 1, 1, 0)                                                                              \
    X(IDS, 1, 0, 1)                                                                                \
    X(IDFORMAT, 1, 0, 1)

/* ============================================================== id formats
 *
 * X(ID): how the IDS blob of a table's PS.PULL / PS.PUSHGRAD is encoded,
 * named by its IDFORMAT option (case-insensitively), in code order (append,
 * never renumber). X1 is applied to the first row (RAW, the default when
 * IDFORMAT is absent; keep it first) and X to the others.
 *   RAW  little-endian uint64 ids, 8 bytes each, in any order; a pull
 *        answers the rows in the order given (a repeated id each time)
 *   EF   a non-decreasing list, Elias-Fano coded (common/idlist.h, byte by
 *        byte in docs/commands.md "Compressed id lists"): about
 *        2 + log2(spread / n) bits per id; a pull answers the rows in the
 *        list's order, which is ascending (a repeated id each time)
 * A server without IDFORMAT answers "ERR unknown option 'IDFORMAT'" and
 * changes nothing: libps then resends the request as RAW and sends RAW on
 * that client from then on (libps/batch_int.h). */
#define PS_PROTO_ID_FORMATS(X1, X)                                                                 \
    X1(RAW)                                                                                        \
    X(EF)

/* ============================================================ derived enums */

/* Every optimizer (an index into PS_PROTO_OPTIMIZERS; not stored anywhere). */
typedef enum {
#define PS_PROTO_OPT_ENUM_(ID, name, upd) PS_PROTO_OPT_##ID,
    PS_PROTO_OPTIMIZERS(PS_PROTO_OPT_ENUM_)
#undef PS_PROTO_OPT_ENUM_
    PS_PROTO_OPT_COUNT
} ps_proto_optim;

/* The error classes (PS_PROTO_ERR_NONE: not an error reply). */
typedef enum {
    PS_PROTO_ERR_NONE = 0,
#define PS_PROTO_ERR_ENUM_(ID) PS_PROTO_ERR_##ID,
    PS_PROTO_ERRORS(PS_PROTO_ERR_ENUM_)
#undef PS_PROTO_ERR_ENUM_
    PS_PROTO_ERR_COUNT
} ps_proto_error;

/* The push options. */
typedef enum {
#define PS_PROTO_PUSH_ENUM_(ID, n, t, e) PS_PROTO_PUSH_##ID,
    PS_PROTO_PUSH_OPTIONS(PS_PROTO_PUSH_ENUM_)
#undef PS_PROTO_PUSH_ENUM_
    PS_PROTO_PUSH_COUNT
} ps_proto_push_option;

/* The id formats (PS_PROTO_ID_FORMATS). */
typedef enum {
#define PS_PROTO_IDFMT_ENUM_(ID) PS_PROTO_IDFMT_##ID,
    PS_PROTO_ID_FORMATS(PS_PROTO_IDFMT_ENUM_, PS_PROTO_IDFMT_ENUM_)
#undef PS_PROTO_IDFMT_ENUM_
    PS_PROTO_IDFMT_COUNT
} ps_proto_idformat;

/* Numbers of tensor / table optimizers (the codes run 0 .. count-1). */
#define PS_PROTO_ONE_(ID) +1
#define PS_PROTO_TENSOR_OPTIM_COUNT (0 PS_PROTO_TENSOR_OPTIMS(PS_PROTO_ONE_, PS_PROTO_ONE_))
#define PS_PROTO_TABLE_OPTIM_COUNT (0 PS_PROTO_TABLE_OPTIMS(PS_PROTO_ONE_, PS_PROTO_ONE_))

/* ------------------------------------------------ joined names for messages */

/* Format names joined by ", ": every format, the dense ones, the table
 * ones ("F32, F16, BF16, I8, TOPK"). The first row is F32, which is all. */
#define PS_PROTO_FMT1_(ID, dense, table) #ID
#define PS_PROTO_FMTN_(ID, dense, table) ", " #ID
#define PS_PROTO_FMTN_DENSE_(ID, dense, table) PS_PP_IF(dense, ", " #ID)
#define PS_PROTO_FMTN_TABLE_(ID, dense, table) PS_PP_IF(table, ", " #ID)
#define PS_PROTO_FORMAT_NAMES PS_PROTO_FORMATS(PS_PROTO_FMT1_, PS_PROTO_FMTN_)
#define PS_PROTO_DENSE_FORMAT_NAMES PS_PROTO_FORMATS(PS_PROTO_FMT1_, PS_PROTO_FMTN_DENSE_)
#define PS_PROTO_TABLE_FORMAT_NAMES PS_PROTO_FORMATS(PS_PROTO_FMT1_, PS_PROTO_FMTN_TABLE_)

/* Id format names joined by ", ": "RAW, EF". */
#define PS_PROTO_IDF1_(ID) #ID
#define PS_PROTO_IDFN_(ID) ", " #ID
#define PS_PROTO_ID_FORMAT_NAMES PS_PROTO_ID_FORMATS(PS_PROTO_IDF1_, PS_PROTO_IDFN_)

/* Upper-case optimizer names joined by ", ": "SGD, MOMENTUM, ...". */
#define PS_PROTO_OPT1_(ID) #ID
#define PS_PROTO_OPTN_(ID) ", " #ID
#define PS_PROTO_TENSOR_OPTIM_NAMES PS_PROTO_TENSOR_OPTIMS(PS_PROTO_OPT1_, PS_PROTO_OPTN_)
#define PS_PROTO_TABLE_OPTIM_NAMES PS_PROTO_TABLE_OPTIMS(PS_PROTO_OPT1_, PS_PROTO_OPTN_)

/* ================================================================ functions
 * (common/protocol.c; pure, no allocation) */

/* Lower-case name of optimizer 'o' ("sgd"), or "unknown" out of range. */
const char *ps_proto_optim_name(int o);

/* Parses an optimizer name of 'len' bytes, case-insensitively. Returns its
 * PS_PROTO_OPT_* or -1. */
int ps_proto_optim_parse(const char *s, size_t len);

/* 1 when optimizer 'o' updates weights (all but ACCUM), else 0. */
int ps_proto_optim_updates(int o);

/* The code of optimizer 'o' in a tensor's / a table's header, or -1 when
 * it does not apply to tensors / tables. */
int ps_proto_optim_tensor_code(int o);
int ps_proto_optim_table_code(int o);

/* The optimizer of tensor / table code 'code', or -1. */
int ps_proto_optim_of_tensor_code(int code);
int ps_proto_optim_of_table_code(int code);

/* Kinds of key an optimizer applies to (ps_proto_optim_names). */
#define PS_PROTO_KIND_TENSOR 1
#define PS_PROTO_KIND_TABLE 2

/* The optimizer 'name' names when it applies to 'kind' (and updates
 * weights, when 'updates' is 1), else -1. Case-insensitive. */
int ps_proto_optim_for(const char *name, int kind, int updates);

/* Writes the lower-case names of the optimizers of 'kind' (only those that
 * update weights when 'updates' is 1), in code order, joined by 'sep', into
 * 'buf' (room 'cap', NUL-terminated, cut to fit). Returns 'buf'. */
char *ps_proto_optim_names(int kind, int updates, const char *sep, char *buf, size_t cap);

/* 1 when format 'f' (a ps_format value) is dense / taken by tables. */
int ps_proto_format_dense(int f);
int ps_proto_format_table(int f);

/* The class of the error reply 's' of 'len' bytes (the reply's text, as
 * hiredis hands it, without the leading '-'): the first PS_PROTO_ERRORS row
 * whose template matches, or PS_PROTO_ERR_NONE when 's' is NULL or no row
 * matches (an empty reply). */
ps_proto_error ps_proto_error_class(const char *s, size_t len);

/* The template of error class 'e' ("ERR no such key"), "" for NONE. */
const char *ps_proto_error_text(ps_proto_error e);

/* 1 when the code word of class 'e' is ERR (NOKEY, SYNTAX, ..., ERR). */
int ps_proto_error_is_err(ps_proto_error e);

/* The keyword of push option 'o' ("FORMAT") and its value count. */
const char *ps_proto_push_option_name(ps_proto_push_option o);
int ps_proto_push_option_nvals(ps_proto_push_option o);

/* The name of id format 'f' ("EF"), "" out of range; the id format 'len'
 * bytes at 's' name (case-insensitive), or -1. */
const char *ps_proto_idformat_name(int f);
int ps_proto_idformat_parse(const char *s, size_t len);

#endif /* PS_PROTOCOL_H */
