/* The one reader of the protobuf wire format in the module: a tf.train.Example and its parts, for
 * the schema check (scan.c), the decoder (example.c) and the statistics' columns (columns.c).
 * Header-only (static inline) so that each walk has it inlined into its loop: a field
 * (wire_field), a varint (wire_varint), and a Feature's list values (wire_floats, wire_ints).
 *
 * It reads what shardprep.example.decoder (the Python reader) reads: varints of up to 10 bytes,
 * minimal or not, and fields of any tag. Whether a field is written as protobuf writes it (a
 * one-byte tag, minimal varints), which a record must be to pass through with its own bytes, is
 * the schema check's question, asked of the bytes this reader read (``wire_minimal``).
 * Tests: tests/shardprep/example/test_decoder.py, tests/shardprep/test_framing.py,
 * tests/shardprep/stats/test_columns.py (each user against its Python twin on random and hostile bytes).
 */
#ifndef SHARDPREP_WIRE_H
#define SHARDPREP_WIRE_H

#include "native.h"

/* wire_varint past its first byte: a varint of two bytes or more. */
static int wire_varint_long(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out, int *wide) {
    uint64_t r = 0;
    *wide = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= end) return 0;
        uint8_t c = b[(*pos)++];
        r |= (uint64_t)(c & 0x7F) << shift;
        if (shift == 63 && (c & 0x7E)) *wide = 1;
        if (c < 0x80) {
            *out = r;
            return shift / 7 + 1;
        }
    }
    return 0;
}

/* A varint at *pos below end: its length in bytes (1 to 10) with *pos moved past it, *out its low
 * 64 bits and *wide whether bits beyond the 64th were set (the Python reader keeps them: a tag or
 * length that big is refused there); 0 where it is cut off or runs over 10 bytes. */
static inline int wire_varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out, int *wide) {
    if (*pos < end && b[*pos] < 0x80) { /* one byte: the common case, inlined */
        *wide = 0;
        *out = b[(*pos)++];
        return 1;
    }
    return wire_varint_long(b, pos, end, out, wide);
}

/* Whether the varint of ``n`` bytes ending just before b[stop] is minimal, as protobuf writes it:
 * one byte, or a last byte that is not 0. */
static inline int wire_minimal(const uint8_t *b, Py_ssize_t stop, int n) { return n == 1 || b[stop - 1] != 0; }

/* One field at *pos below end: its tag and, for a length-delimited one (wire type 2), its contents
 * [*start, *stop) with *pos moved past them; for another wire type *start = *stop = *pos just after
 * the tag (its value is the caller's to read). 0 where the Python reader raises: a tag or length cut
 * off or wider than 64 bits, contents running past end. */
static inline int wire_field(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *tag, Py_ssize_t *start,
                             Py_ssize_t *stop) {
    int wide;
    uint64_t n;
    if (!wire_varint(b, pos, end, tag, &wide) || wide) return 0;
    if ((*tag & 7) != 2) {
        *start = *stop = *pos;
        return 1;
    }
    if (!wire_varint(b, pos, end, &n, &wide) || wide || n > (uint64_t)(end - *pos)) return 0;
    *start = *pos;
    *stop = *pos = *pos + (Py_ssize_t)n;
    return 1;
}

/* A FloatList's field read by wire_field (``tag``, contents [start, stop), *pos just past it below
 * end): where its float32 values lie, 4 little-endian bytes each from *from, and *count of them. A
 * packed field (tag 0x0A) holds its contents; an unpacked one (0x0D, fixed32) the 4 bytes at *pos,
 * which it moves past. 0 where the Python reader refuses: another tag, packed contents not a multiple
 * of 4 bytes, a fixed32 cut off. */
static inline int wire_floats(uint64_t tag, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t start, Py_ssize_t stop,
                              Py_ssize_t *from, Py_ssize_t *count) {
    if (tag == 0x0A) {
        if ((stop - start) % 4) return 0;
        *from = start;
        *count = (stop - start) / 4;
        return 1;
    }
    if (tag != 0x0D || *pos + 4 > end) return 0;
    *from = *pos;
    *count = 1;
    *pos += 4;
    return 1;
}

/* An Int64List's field read by wire_field (``tag``, contents [start, stop), *pos just past it below
 * end): the bytes [*from, *to) that hold its varints back to back, to be read with wire_varint (each
 * value its low 64 bits: two's complement, as the Python reader's int64). A packed field (tag 0x0A)
 * holds its contents; an unpacked one (0x08) the one varint at *pos, which it moves past. 0 where the
 * Python reader refuses: another tag, an unpacked varint cut off or over 10 bytes. */
static inline int wire_ints(const uint8_t *b, uint64_t tag, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t start,
                            Py_ssize_t stop, Py_ssize_t *from, Py_ssize_t *to) {
    if (tag == 0x0A) {
        *from = start;
        *to = stop;
        return 1;
    }
    uint64_t x;
    int wide;
    *from = *pos;
    if (tag != 0x08 || !wire_varint(b, pos, end, &x, &wide)) return 0;
    *to = *pos;
    return 1;
}

#endif
