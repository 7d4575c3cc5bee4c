/* depth.c - how deep a protobuf message nests, found before protobuf-c
 * unpacks it.
 *
 * protobuf-c's unpack calls itself once per nested message and has no limit:
 * about 5,000 nested TypeProto.sequence_type levels (a 40 KB file) overflow
 * an 8 MiB stack.  This walk reads the wire format with a loop and an
 * explicit stack of the open messages (each with its descriptor and the
 * offset where it ends), and descends only into length-delimited fields that
 * the schema (protobuf-c's generated descriptors) says are messages, so a
 * string, bytes or packed numbers are never taken for one.  A message nested
 * deeper than OX_MAX_DEPTH is refused.
 *
 * Bytes the walk cannot read (a bad tag or wire type, a length past its
 * message's end) stop it with "no finding": protobuf-c refuses them itself,
 * and it reaches them no deeper than the walk did, since it reads every
 * field of a message before it unpacks any message inside it.
 */
#include "onnx/context.h"

/* The field numbered num of d, or NULL (an unknown field: skipped). */
static const ProtobufCFieldDescriptor *field_of(const ProtobufCMessageDescriptor *d, uint32_t num)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if (d->fields[i].id == num) return &d->fields[i];
    return NULL;
}

/* A varint at b[*at..end): 0 with *v and *at moved past it, or -1. */
static int varint(const uint8_t *b, size_t end, size_t *at, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64 && *at < end; shift += 7) {
        uint8_t c = b[(*at)++];
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

int ox_proto_depth(const ProtobufCMessageDescriptor *d, const uint8_t *b, size_t n)
{
    struct {
        const ProtobufCMessageDescriptor *d;
        size_t end;
    } open[OX_MAX_DEPTH];
    int top = 0, deepest = 1;
    size_t at = 0;
    open[0].d = d;
    open[0].end = n;
    while (top >= 0) {
        size_t end = open[top].end;
        if (at >= end) { /* this message is read: back to its parent */
            top--;
            continue;
        }
        uint64_t key, len;
        if (varint(b, end, &at, &key) < 0) return deepest;
        switch (key & 7) {
        case 0: /* varint */
            if (varint(b, end, &at, &len) < 0) return deepest;
            break;
        case 1: /* 64-bit */
            if (end - at < 8) return deepest;
            at += 8;
            break;
        case 5: /* 32-bit */
            if (end - at < 4) return deepest;
            at += 4;
            break;
        case 2: { /* length-delimited: a message when the schema says so */
            if (varint(b, end, &at, &len) < 0 || len > end - at) return deepest;
            const ProtobufCFieldDescriptor *f = key >> 3 <= UINT32_MAX ? field_of(open[top].d, (uint32_t)(key >> 3)) : NULL;
            if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE) {
                at += len;
                break;
            }
            if (top + 1 >= OX_MAX_DEPTH) return OX_MAX_DEPTH + 1;
            top++;
            open[top].d = f->descriptor;
            open[top].end = at + len;
            if (top + 1 > deepest) deepest = top + 1;
            break;
        }
        default: /* groups (ONNX has none) and invalid wire types: protobuf-c's to refuse */
            return deepest;
        }
    }
    return deepest;
}
