/* Whole TFRecord frames of a buffer with their CRC status, and whether each Example conforms to the
 * schema.
 * A record conforms when it is one Features field holding every schema feature exactly once (in any
 * order: TensorFlow writes map entries in hash order), each entry written as protobuf writes it
 * (key, then value; one list of the schema's kind, packed, minimal varints), with the schema's number
 * of values and finite floats. Such a record passes through with its own bytes; any other goes to the
 * Python decoder and encoder, which re-encode it or name its error.
 * Tests: tests/shardprep/test_framing.py (conforms and scan against the Python twin). */
#include "wire.h"

typedef struct {
    const uint8_t *name;
    Py_ssize_t len;
    int kind;  /* 0 bytes (string), 1 float32, 2 int64 */
    long count; /* -1: any number of values */
} Spec;

/* A length-delimited field with the one-byte tag ``tag`` at *pos below end, written as protobuf
 * writes it (the tag in one byte, a minimal length of at most 5 bytes): 1 with *pos at its contents
 * and *stop at their end; 0 for anything else. */
static inline int canonical_field(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint8_t tag, Py_ssize_t *stop) {
    uint64_t n;
    int wide, bytes;
    Py_ssize_t at = *pos + 1;
    if (*pos >= end || b[*pos] != tag) return 0;
    if (!(bytes = wire_varint(b, &at, end, &n, &wide)) || bytes > 5 || !wire_minimal(b, at, bytes) ||
        n > (uint64_t)(end - at))
        return 0;
    *pos = at;
    *stop = at + (Py_ssize_t)n;
    return 1;
}

static int is_finite_f32(const uint8_t *p) { return ((le32(p) >> 23) & 0xFF) != 0xFF; }

static int conforms(const uint8_t *b, Py_ssize_t n, const Spec *spec, Py_ssize_t nspec, uint32_t *seen, uint32_t gen) {
    Py_ssize_t pos = 0, body_end, entry_end, key_end, feat_end, list_end, packed_end;
    Py_ssize_t found = 0, hint = 0;
    if (!canonical_field(b, &pos, n, 0x0A, &body_end) || body_end != n) return 0;
    while (pos < body_end) {
        if (!canonical_field(b, &pos, body_end, 0x0A, &entry_end)) return 0;
        if (!canonical_field(b, &pos, entry_end, 0x0A, &key_end)) return 0;
        Py_ssize_t klen = key_end - pos;
        Py_ssize_t i = hint, k;
        for (k = 0; k < nspec; k++, i = (i + 1 == nspec ? 0 : i + 1))  /* from the entry after the last one found */
            if (spec[i].len == klen && (klen == 0 || (spec[i].name[klen - 1] == b[pos + klen - 1] &&
                                                      memcmp(b + pos, spec[i].name, (size_t)klen) == 0)))
                break;
        if (k == nspec || seen[i] == gen) return 0; /* not in the schema, or twice */
        seen[i] = gen;
        found++;
        hint = i + 1 == nspec ? 0 : i + 1;
        const Spec *s = &spec[i];
        pos = key_end;
        if (!canonical_field(b, &pos, entry_end, 0x12, &feat_end) || feat_end != entry_end) return 0;
        if (!canonical_field(b, &pos, feat_end, (uint8_t)(0x0A + 8 * s->kind), &list_end) || list_end != feat_end) return 0;
        long count = 0;
        if (s->kind == 0) {
            while (pos < list_end) {
                Py_ssize_t value_end;
                if (!canonical_field(b, &pos, list_end, 0x0A, &value_end)) return 0;
                pos = value_end;
                count++;
            }
        } else if (pos < list_end) {
            if (!canonical_field(b, &pos, list_end, 0x0A, &packed_end) || packed_end != list_end || packed_end == pos) return 0;
            if (s->kind == 1) {
                if ((packed_end - pos) % 4) return 0;
                for (; pos < packed_end; pos += 4, count++)
                    if (!is_finite_f32(b + pos)) return 0;
            } else {
                uint64_t v;
                int wide, len;
                while (pos < packed_end) {
                    if (!(len = wire_varint(b, &pos, packed_end, &v, &wide)) || wide || !wire_minimal(b, pos, len)) return 0;
                    count++;
                }
            }
        }
        if (s->count >= 0 && count != s->count) return 0;
        pos = entry_end;
    }
    return found == nspec;
}

static int parse_spec(PyObject *specs, Spec **out, Py_ssize_t *n) {
    PyObject *seq = PySequence_Fast(specs, "spec must be a sequence of (name, kind, count)");
    if (!seq) return -1;
    *n = PySequence_Fast_GET_SIZE(seq);
    *out = PyMem_Calloc((size_t)(*n ? *n : 1), sizeof(Spec));
    if (!*out) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        char *name;
        Py_ssize_t len;
        int kind;
        long count;
        if (!PyArg_ParseTuple(item, "y#il", &name, &len, &kind, &count)) {
            PyMem_Free(*out);
            Py_DECREF(seq);
            return -1;
        }
        (*out)[i] = (Spec){(const uint8_t *)name, len, kind, count};  /* names live as long as ``specs`` */
    }
    Py_DECREF(seq);
    return 0;
}

/* scan(buf, pos, spec) -> (stop, why, offsets, status)
 * Walks whole TFRecord frames of ``buf`` from ``pos``. Per frame: its offset in ``buf`` (int64) and a
 * status byte: 0 an Example that conforms, 1 data CRC good but it does not conform, 2 data CRC bad. Stops at
 * ``stop`` because ``why`` = 0: fewer than a whole frame left (or none), 1: the length CRC fails there. */
PyObject *py_scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos;
    PyObject *specs;
    if (!PyArg_ParseTuple(args, "y*nO", &buf, &pos, &specs)) return NULL;
    Spec *spec = NULL;
    Py_ssize_t nspec = 0;
    PyObject *offsets = NULL, *status = NULL, *result = NULL;
    uint32_t *seen = NULL, gen = 0;
    if (parse_spec(specs, &spec, &nspec) < 0) goto done;
    seen = PyMem_Calloc((size_t)nspec + 1, sizeof(uint32_t));
    if (!seen) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t cap = buf.len / 16 + 1;
    offsets = PyBytes_FromStringAndSize(NULL, cap * 8);
    status = PyBytes_FromStringAndSize(NULL, cap);
    if (!offsets || !status) goto done;
    int64_t *off = (int64_t *)PyBytes_AS_STRING(offsets);
    uint8_t *st = (uint8_t *)PyBytes_AS_STRING(status);
    const uint8_t *b = buf.buf;
    size_t end = (size_t)buf.len, p = pos < 0 ? 0 : (size_t)pos;
    Py_ssize_t count = 0;
    int why = 0;
    Py_BEGIN_ALLOW_THREADS
    while (p + 12 <= end) {
        if (masked(crc32c(0, b + p, 8)) != le32(b + p + 8)) {
            why = 1;
            break;
        }
        uint64_t len = le64(b + p);
        if (len > end - p - 12 || end - p - 12 - len < 4) break;
        const uint8_t *data = b + p + 12;
        uint8_t s;
        if (masked(crc32c(0, data, (size_t)len)) != le32(data + len)) s = 2;
        else s = conforms(data, (Py_ssize_t)len, spec, nspec, seen, ++gen) ? 0 : 1;
        off[count] = (int64_t)p;
        st[count++] = s;
        p += (size_t)len + 16;
    }
    Py_END_ALLOW_THREADS
    if (_PyBytes_Resize(&offsets, count * 8) < 0 || _PyBytes_Resize(&status, count) < 0) goto done;
    result = Py_BuildValue("niOO", (Py_ssize_t)p, why, offsets, status);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(status);
    PyMem_Free(seen);
    PyMem_Free(spec);
    PyBuffer_Release(&buf);
    return result;
}

/* conforms(data, spec) -> bool, for tests and single records. */
PyObject *py_conforms(PyObject *self, PyObject *args) {
    Py_buffer data;
    PyObject *specs;
    if (!PyArg_ParseTuple(args, "y*O", &data, &specs)) return NULL;
    Spec *spec = NULL;
    Py_ssize_t nspec = 0;
    PyObject *r = NULL;
    if (parse_spec(specs, &spec, &nspec) == 0) {
        uint32_t *seen = PyMem_Calloc((size_t)nspec + 1, sizeof(uint32_t));
        if (seen) r = PyBool_FromLong(conforms(data.buf, data.len, spec, nspec, seen, 1));
        else PyErr_NoMemory();
        PyMem_Free(seen);
    }
    PyMem_Free(spec);
    PyBuffer_Release(&data);
    return r;
}
