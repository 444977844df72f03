/* proto.c -- libps's side of common/protocol.h: how libps tells replies
 * apart (by the error classes of protocol.h, through psi_reply_error() and
 * nowhere else: no substring matching of error texts) and how ps.h's public
 * wire formats map to the codecs' (by name, row by row of the table). */

#include "protocol.h"
#include "ps_internal.h"

/* ps.h spells the wire formats itself (it is installed alone): one
 * PS_WIRE_<ID> per row of PS_PROTO_FORMATS, with the same code. */
#define PS_WIRE_AGREES_(ID, dense, table)                                                          \
    _Static_assert((int)PS_WIRE_##ID == (int)PS_FMT_##ID, "ps.h's PS_WIRE_" #ID " is not PS_FMT_" #ID);
PS_PROTO_FORMATS(PS_WIRE_AGREES_, PS_WIRE_AGREES_)
#undef PS_WIRE_AGREES_

int psi_reply_error(const redisReply *r) {
    if (r == NULL || r->type != REDIS_REPLY_ERROR) return PS_PROTO_ERR_NONE;
    return ps_proto_error_class(r->str, r->len);
}

int psi_format(psWireFormat w, ps_format *out) {
    switch (w) {
#define PS_WIRE_CASE_(ID, dense, table)                                                            \
    case PS_WIRE_##ID: *out = PS_FMT_##ID; return 0;
        PS_PROTO_FORMATS(PS_WIRE_CASE_, PS_WIRE_CASE_)
#undef PS_WIRE_CASE_
    }
    return -1;
}
