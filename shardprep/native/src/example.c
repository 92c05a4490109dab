/* decode_example(data) -> dict or None: a serialized tf.train.Example as {name: [values]} exactly
 * as shardprep.example.decoder reads it (packed or unpacked lists; a repeated key: the last wins; a
 * repeated Feature merges: the same kind appends, another kind replaces), or None wherever that
 * reader refuses the bytes (it then words the error). Read with wire.h.
 * Tests: tests/shardprep/example/test_decoder.py (against shardprep.example.decoder). */
#include "wire.h"

/* The values of one list field (tag 0x0A bytes, 0x12 float, 0x1A int64) over [pos, end), appended. */
static int ex_list(const uint8_t *b, uint64_t kind, Py_ssize_t pos, Py_ssize_t end, PyObject *values) {
    uint64_t tag;
    Py_ssize_t start, stop;
    while (pos < end) {
        if (!wire_field(b, &pos, end, &tag, &start, &stop)) return 0;
        PyObject *v = NULL;
        if (kind == 0x0A) {
            if (tag != 0x0A) return 0;
            v = PyBytes_FromStringAndSize((const char *)b + start, stop - start);
            if (!v || PyList_Append(values, v) < 0) { Py_XDECREF(v); return -1; }
            Py_DECREF(v);
        } else if (kind == 0x12) {
            Py_ssize_t from, count;
            if (!wire_floats(tag, &pos, end, start, stop, &from, &count)) return 0;
            for (Py_ssize_t i = 0; i < count; i++) {
                float f;
                uint8_t raw[4];
                memcpy(raw, b + from + 4 * i, 4);
                if (!native_little_endian) { uint8_t t = raw[0]; raw[0] = raw[3]; raw[3] = t; t = raw[1]; raw[1] = raw[2]; raw[2] = t; }
                memcpy(&f, raw, 4);
                v = PyFloat_FromDouble((double)f);
                if (!v || PyList_Append(values, v) < 0) { Py_XDECREF(v); return -1; }
                Py_DECREF(v);
            }
        } else {
            Py_ssize_t i, to;
            if (!wire_ints(b, tag, &pos, end, start, stop, &i, &to)) return 0;
            while (i < to) {
                uint64_t x;
                int wide;
                if (!wire_varint(b, &i, to, &x, &wide)) return 0;
                v = PyLong_FromLongLong((long long)x); /* the low 64 bits, two's complement: as _signed */
                if (!v || PyList_Append(values, v) < 0) { Py_XDECREF(v); return -1; }
                Py_DECREF(v);
            }
        }
    }
    return 1;
}

/* Features over [pos, end) into out: 1, 0 refused, -1 a Python error. */
static int ex_features(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, PyObject *out) {
    uint64_t tag;
    Py_ssize_t entry, stop;
    while (pos < end) {
        if (!wire_field(b, &pos, end, &tag, &entry, &stop) || tag != 0x0A) return 0;
        PyObject *key = NULL, *values = PyList_New(0);
        uint64_t kind = 0;
        int ok = values != NULL ? 1 : -1;
        while (ok == 1 && entry < stop) {
            Py_ssize_t start, inner;
            if (!wire_field(b, &entry, stop, &tag, &start, &inner)) { ok = 0; break; }
            if (tag == 0x0A) {
                Py_XDECREF(key);
                key = PyUnicode_DecodeUTF8((const char *)b + start, inner - start, "strict");
                if (!key) { PyErr_Clear(); ok = 0; }
            } else if (tag == 0x12) {
                while (ok == 1 && start < inner) {
                    uint64_t list_tag;
                    Py_ssize_t lo, hi;
                    if (!wire_field(b, &start, inner, &list_tag, &lo, &hi) ||
                        (list_tag != 0x0A && list_tag != 0x12 && list_tag != 0x1A)) { ok = 0; break; }
                    if (list_tag != kind) {
                        kind = list_tag;
                        Py_DECREF(values);
                        values = PyList_New(0);
                        if (!values) { ok = -1; break; }
                    }
                    ok = ex_list(b, kind, lo, hi, values);
                }
            } else {
                ok = 0;
            }
        }
        if (ok == 1 && !key) {
            key = PyUnicode_FromStringAndSize("", 0);
            if (!key) ok = -1;
        }
        if (ok == 1 && PyDict_SetItem(out, key, values) < 0) ok = -1;
        Py_XDECREF(key);
        Py_XDECREF(values);
        if (ok != 1) return ok;
    }
    return 1;
}

PyObject *py_decode_example(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    const uint8_t *b = data.buf;
    Py_ssize_t pos = 0, end = data.len, start, stop;
    uint64_t tag;
    PyObject *out = PyDict_New();
    int ok = out ? 1 : -1;
    while (ok == 1 && pos < end) {
        if (!wire_field(b, &pos, end, &tag, &start, &stop) || tag != 0x0A) ok = 0;
        else ok = ex_features(b, start, stop, out);
    }
    PyBuffer_Release(&data);
    if (ok == 1) return out;
    Py_XDECREF(out);
    if (ok < 0) return NULL;
    Py_RETURN_NONE;
}
