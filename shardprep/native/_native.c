/* shardprep's compiled hot path: TFRecord frames, tf.train.Example schema checks, split hashes.
 *
 * Every function here has an exactly equivalent pure-Python twin in shardprep/native/fallback.py
 * (tests/test_tfrecord_fast.py checks them against each other). No numpy headers: arrays go in and
 * out as buffers, so the extension builds with a C compiler alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* ---- CRC-32C (Castagnoli): slicing-by-8 tables, SSE 4.2 instruction where the CPU has it ---- */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc_soft(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc; /* little-endian hosts only: see crc32c() */
        crc = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF] ^
              crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
              crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

static uint32_t crc_bytewise(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW_CRC 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = ~crc & 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}
#endif

static int use_hw = 0, little_endian = 1;

static uint32_t crc32c(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef HAVE_HW_CRC
    if (use_hw) return crc_hw(crc, p, n);
#endif
    return little_endian ? crc_soft(crc, p, n) : crc_bytewise(crc, p, n);
}

static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* ---- keyed BLAKE2b with an 8-byte digest (RFC 7693), as hashlib.blake2b(digest_size=8, key=...) ---- */

static const uint64_t B2_IV[8] = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
                                  0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
                                  0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};
static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

#define ROTR64(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define B2_G(a, b, c, d, x, y)          \
    do {                                \
        a = a + b + x;                  \
        d = ROTR64(d ^ a, 32);          \
        c = c + d;                      \
        b = ROTR64(b ^ c, 24);          \
        a = a + b + y;                  \
        d = ROTR64(d ^ a, 16);          \
        c = c + d;                      \
        b = ROTR64(b ^ c, 63);          \
    } while (0)

static void b2_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = le64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= t; /* messages here are far below 2**64 bytes: the high counter word stays 0 */
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = B2_SIGMA[r];
        B2_G(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]]);
        B2_G(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]]);
        B2_G(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]]);
        B2_G(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]]);
        B2_G(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]]);
        B2_G(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]]);
        B2_G(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]]);
        B2_G(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* The 8-byte digest as a little-endian integer, for an 8-byte key. */
static uint64_t blake2b8(const uint8_t key[8], const uint8_t *p, size_t n) {
    uint64_t h[8];
    uint8_t block[128];
    memcpy(h, B2_IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ (8ULL << 8) ^ 8ULL;
    memset(block, 0, 128);
    memcpy(block, key, 8);
    uint64_t t = 128;
    if (n == 0) {
        b2_compress(h, block, t, 1);
        return h[0];
    }
    b2_compress(h, block, t, 0);
    while (n > 128) {
        t += 128;
        b2_compress(h, p, t, 0);
        p += 128;
        n -= 128;
    }
    memset(block, 0, 128);
    memcpy(block, p, n);
    t += n;
    b2_compress(h, block, t, 1);
    return h[0];
}

/* ---- does a tf.train.Example conform to the schema? ----
 * A record conforms when it is one Features field holding every schema feature exactly once (in any
 * order: TensorFlow writes map entries in hash order), each entry written as protobuf writes it
 * (key, then value; one list of the schema's kind, packed, minimal varints), with the schema's number
 * of values and finite floats. Such a record passes through with its own bytes; any other goes to the
 * Python decoder and encoder, which re-encode it or name its error. */

typedef struct {
    const uint8_t *name;
    Py_ssize_t len;
    int kind;  /* 0 bytes (string), 1 float32, 2 int64 */
    long count; /* -1: any number of values */
} Spec;

/* A minimal varint of at most ``maxlen`` bytes at *pos < end; -1 when there is none. */
static inline int64_t varint(const uint8_t *b, size_t *pos, size_t end, int maxlen, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < maxlen; i++) {
        if (*pos >= end) return -1;
        uint8_t c = b[(*pos)++];
        v |= (uint64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            if (i > 0 && c == 0) return -1; /* not minimal */
            if (i == 9 && c > 1) return -1; /* beyond 64 bits */
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* (start, end) of a length-delimited field with tag ``tag`` at *pos, ending within ``end``. */
static inline int field(const uint8_t *b, size_t *pos, size_t end, uint8_t tag, size_t *stop) {
    uint64_t n;
    if (*pos >= end || b[*pos] != tag) return -1;
    (*pos)++;
    if (varint(b, pos, end, 5, &n) < 0 || n > end - *pos) return -1;
    *stop = *pos + (size_t)n;
    return 0;
}

static int is_finite_f32(const uint8_t *p) { return ((le32(p) >> 23) & 0xFF) != 0xFF; }

static int conforms(const uint8_t *b, size_t n, const Spec *spec, Py_ssize_t nspec, uint32_t *seen, uint32_t gen) {
    size_t pos = 0, body_end, entry_end, key_end, feat_end, list_end, packed_end;
    Py_ssize_t found = 0, hint = 0;
    if (field(b, &pos, n, 0x0A, &body_end) < 0 || body_end != n) return 0;
    while (pos < body_end) {
        if (field(b, &pos, body_end, 0x0A, &entry_end) < 0) return 0;
        if (field(b, &pos, entry_end, 0x0A, &key_end) < 0) return 0;
        size_t klen = key_end - pos;
        Py_ssize_t i = hint, k;
        for (k = 0; k < nspec; k++, i = (i + 1 == nspec ? 0 : i + 1))  /* from the entry after the last one found */
            if ((size_t)spec[i].len == klen && (klen == 0 || (spec[i].name[klen - 1] == b[pos + klen - 1] &&
                                                              memcmp(b + pos, spec[i].name, klen) == 0)))
                break;
        if (k == nspec || seen[i] == gen) return 0; /* not in the schema, or twice */
        seen[i] = gen;
        found++;
        hint = i + 1 == nspec ? 0 : i + 1;
        const Spec *s = &spec[i];
        pos = key_end;
        if (field(b, &pos, entry_end, 0x12, &feat_end) < 0 || feat_end != entry_end) return 0;
        if (field(b, &pos, feat_end, (uint8_t)(0x0A + 8 * s->kind), &list_end) < 0 || list_end != feat_end) return 0;
        long count = 0;
        if (s->kind == 0) {
            while (pos < list_end) {
                size_t value_end;
                if (field(b, &pos, list_end, 0x0A, &value_end) < 0) return 0;
                pos = value_end;
                count++;
            }
        } else if (pos < list_end) {
            if (field(b, &pos, list_end, 0x0A, &packed_end) < 0 || packed_end != list_end || packed_end == pos) return 0;
            if (s->kind == 1) {
                if ((packed_end - pos) % 4) return 0;
                for (; pos < packed_end; pos += 4, count++)
                    if (!is_finite_f32(b + pos)) return 0;
            } else {
                uint64_t v;
                while (pos < packed_end) {
                    if (varint(b, &pos, packed_end, 10, &v) < 0) return 0;
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

/* ---- Python functions ---- */

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    uint32_t c = crc32c(0, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

/* The '"' (when quotes) and '\n' bytes among the first n bytes of a buffer, in one pass (vectorised at -O3). */
static PyObject *py_line_counts(PyObject *self, PyObject *args) {
    Py_buffer data;
    Py_ssize_t n;
    int quotes;
    if (!PyArg_ParseTuple(args, "y*np", &data, &n, &quotes)) return NULL;
    if (n < 0 || n > data.len) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "n: outside the buffer");
        return NULL;
    }
    const uint8_t *p = data.buf;
    uint64_t q = 0, nl = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n;) {  /* blocks of 255: byte-wide counters the compiler can keep in vector lanes */
        Py_ssize_t stop = n - i < 255 ? n : i + 255;
        uint8_t bq = 0, bn = 0;
        for (; i < stop; i++) {
            bq += p[i] == '"';
            bn += p[i] == '\n';
        }
        q += bq;
        nl += bn;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return Py_BuildValue("(KK)", (unsigned long long)(quotes ? q : 0), (unsigned long long)nl);
}

static PyObject *py_blake2b8(PyObject *self, PyObject *args) {
    Py_buffer data;
    long long seed;
    if (!PyArg_ParseTuple(args, "y*L", &data, &seed)) return NULL;
    uint8_t key[8];
    uint64_t k = (uint64_t)seed;
    for (int i = 0; i < 8; i++) key[i] = (uint8_t)(k >> (8 * i));
    uint64_t h = blake2b8(key, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLongLong(h);
}

/* split_indices(blob, starts, stops, seed, bounds) -> bytes: per record [starts[i], stops[i]) of
 * ``blob`` (int64 buffers), the first i with hash < bounds[i] (uint64 buffer), else len(bounds). */
static PyObject *py_split_indices(PyObject *self, PyObject *args) {
    Py_buffer blob, starts, stops, bounds;
    long long seed;
    if (!PyArg_ParseTuple(args, "y*y*y*Ly*", &blob, &starts, &stops, &seed, &bounds)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = starts.len / 8, nb = bounds.len / 8;
    if (stops.len != starts.len || nb > 255) {
        PyErr_SetString(PyExc_ValueError, "split_indices: starts and stops differ in length, or too many splits");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, n);
    if (!out) goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(out), key[8];
    const int64_t *a = starts.buf, *z = stops.buf;
    const uint64_t *t = bounds.buf;
    const uint8_t *base = blob.buf;
    for (int i = 0; i < 8; i++) key[i] = (uint8_t)((uint64_t)seed >> (8 * i));
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        if (a[i] < 0 || z[i] < a[i] || z[i] > blob.len) {
            bad = 1;
            break;
        }
        uint64_t h = blake2b8(key, base + a[i], (size_t)(z[i] - a[i]));
        Py_ssize_t s = 0;
        while (s < nb && h >= t[s]) s++;
        w[i] = (uint8_t)s;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_ValueError, "split_indices: a record lies outside the blob");
    }
done:
    PyBuffer_Release(&blob);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&stops);
    PyBuffer_Release(&bounds);
    return out;
}

/* scan(buf, pos, spec) -> (stop, why, offsets, status)
 * Walks whole TFRecord frames of ``buf`` from ``pos``. Per frame: its offset in ``buf`` (int64) and a
 * status byte: 0 an Example that conforms, 1 data CRC good but it does not conform, 2 data CRC bad. Stops at
 * ``stop`` because ``why`` = 0: fewer than a whole frame left (or none), 1: the length CRC fails there. */
static PyObject *py_scan(PyObject *self, PyObject *args) {
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
        else s = conforms(data, (size_t)len, spec, nspec, seen, ++gen) ? 0 : 1;
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
static PyObject *py_conforms(PyObject *self, PyObject *args) {
    Py_buffer data;
    PyObject *specs;
    if (!PyArg_ParseTuple(args, "y*O", &data, &specs)) return NULL;
    Spec *spec = NULL;
    Py_ssize_t nspec = 0;
    PyObject *r = NULL;
    if (parse_spec(specs, &spec, &nspec) == 0) {
        uint32_t *seen = PyMem_Calloc((size_t)nspec + 1, sizeof(uint32_t));
        if (seen) r = PyBool_FromLong(conforms(data.buf, (size_t)data.len, spec, nspec, seen, 1));
        else PyErr_NoMemory();
        PyMem_Free(seen);
    }
    PyMem_Free(spec);
    PyBuffer_Release(&data);
    return r;
}

/* gather(blob, ends, order) -> bytes: the records of a packed batch (record i is
 * blob[ends[i-1]:ends[i]], ``ends`` a uint64 buffer) in the order of ``order`` (int64 buffer of indices). */
static PyObject *py_gather(PyObject *self, PyObject *args) {
    Py_buffer blob, ends, order;
    if (!PyArg_ParseTuple(args, "y*y*y*", &blob, &ends, &order)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = ends.len / 8, m = order.len / 8;
    const uint64_t *e = ends.buf;
    const int64_t *o = order.buf;
    uint64_t total = 0, prev = 0;
    int bad = ends.len % 8 || order.len % 8;
    for (Py_ssize_t i = 0; i < n && !bad; prev = e[i], i++)
        if (e[i] < prev || e[i] > (uint64_t)blob.len) bad = 1;
    for (Py_ssize_t j = 0; j < m && !bad; j++) {
        if (o[j] < 0 || o[j] >= n) bad = 1;
        else total += e[o[j]] - (o[j] ? e[o[j] - 1] : 0);
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "gather: ends not rising within the blob, or an index outside them");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(out);
    const uint8_t *b = blob.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < m; j++) {
        uint64_t a = o[j] ? e[o[j] - 1] : 0, z = e[o[j]];
        memcpy(w, b + a, (size_t)(z - a));
        w += z - a;
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&blob);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&order);
    return out;
}

/* scatter(blob, starts, lengths, dests, out): copies blob[starts[i]:starts[i] + lengths[i]] to
 * out[dests[i]:dests[i] + lengths[i]] for every i (int64 buffers), without the GIL: one piece's records
 * to their places in a shard, so that a piece's map can close before the next is opened. */
static PyObject *py_scatter(PyObject *self, PyObject *args) {
    Py_buffer blob, starts, lengths, dests, dest;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &blob, &starts, &lengths, &dests, &dest)) return NULL;
    Py_ssize_t n = starts.len / 8;
    const int64_t *a = starts.buf, *l = lengths.buf, *d = dests.buf;
    int bad = starts.len % 8 || lengths.len != starts.len || dests.len != starts.len;
    for (Py_ssize_t i = 0; i < n && !bad; i++)
        bad = a[i] < 0 || l[i] < 0 || d[i] < 0 || a[i] > blob.len || l[i] > blob.len - a[i] || d[i] > dest.len ||
              l[i] > dest.len - d[i];
    if (!bad) {
        const uint8_t *from = blob.buf;
        uint8_t *to = dest.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) memcpy(to + d[i], from + a[i], (size_t)l[i]);
        Py_END_ALLOW_THREADS
    } else {
        PyErr_SetString(PyExc_ValueError, "scatter: starts, lengths and dests differ in length, or a piece lies outside "
                                          "blob or out");
    }
    PyBuffer_Release(&blob);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&dests);
    PyBuffer_Release(&dest);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

/* fill_data_crcs(buf, ends): framed TFRecords back to back in the writable ``buf``, record i ending
 * at ends[i] (uint64 buffer); writes each record's masked data CRC into its last 4 bytes. */
static PyObject *py_fill_data_crcs(PyObject *self, PyObject *args) {
    Py_buffer buf, ends;
    if (!PyArg_ParseTuple(args, "w*y*", &buf, &ends)) return NULL;
    Py_ssize_t n = ends.len / 8;
    const uint64_t *e = ends.buf;
    uint64_t prev = 0;
    int bad = ends.len % 8 != 0;
    for (Py_ssize_t i = 0; i < n && !bad; prev = e[i], i++)
        if (e[i] < prev + 16 || e[i] > (uint64_t)buf.len) bad = 1;
    if (!bad) {
        uint8_t *b = buf.buf;
        Py_BEGIN_ALLOW_THREADS
        prev = 0;
        for (Py_ssize_t i = 0; i < n; prev = e[i], i++) {
            uint32_t c = masked(crc32c(0, b + prev + 12, (size_t)(e[i] - prev - 16)));
            uint8_t *f = b + e[i] - 4;
            f[0] = (uint8_t)c, f[1] = (uint8_t)(c >> 8), f[2] = (uint8_t)(c >> 16), f[3] = (uint8_t)(c >> 24);
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&ends);
    if (bad) {
        PyErr_SetString(PyExc_ValueError,
                        "fill_data_crcs: a record shorter than its frame, or ends outside the buffer");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* interleave(columns) -> bytearray: ``columns`` is a sequence of (blob, starts, lengths), the last two
 * int64 buffers of one length n; record i is the concatenation over columns of
 * blob[starts[i]:starts[i] + lengths[i]], and the records are laid out back to back. */
static PyObject *py_interleave(PyObject *self, PyObject *args) {
    PyObject *columns, *seq, *out = NULL;
    if (!PyArg_ParseTuple(args, "O", &columns)) return NULL;
    seq = PySequence_Fast(columns, "interleave: columns must be a sequence of (blob, starts, lengths)");
    if (!seq) return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq), got = 0, n = -1;
    Py_buffer *bufs = PyMem_Calloc((size_t)(3 * k + 1), sizeof(Py_buffer));
    if (!bufs) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t total = 0;
    for (; got < k; got++) {
        Py_buffer *b = bufs + 3 * got;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, got), "y*y*y*", b, b + 1, b + 2)) goto done;
        Py_ssize_t m = b[1].len / 8;
        if (n < 0) n = m;
        if (b[1].len % 8 || b[2].len != b[1].len || m != n) {
            got++;
            PyErr_SetString(PyExc_ValueError, "interleave: starts and lengths of every column must be n int64 values");
            goto done;
        }
        const int64_t *a = b[1].buf, *l = b[2].buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (a[i] < 0 || l[i] < 0 || a[i] > b[0].len || l[i] > b[0].len - a[i]) {
                got++;
                PyErr_SetString(PyExc_ValueError, "interleave: a piece lies outside its blob");
                goto done;
            }
            total += (uint64_t)l[i];
        }
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) goto done;
    uint8_t *w = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        for (Py_ssize_t c = 0; c < k; c++) {
            const Py_buffer *b = bufs + 3 * c;
            size_t len = (size_t)((const int64_t *)b[2].buf)[i];
            memcpy(w, (const uint8_t *)b[0].buf + ((const int64_t *)b[1].buf)[i], len);
            w += len;
        }
    Py_END_ALLOW_THREADS
done:
    for (Py_ssize_t i = 0; i < 3 * got; i++) PyBuffer_Release(bufs + i);
    PyMem_Free(bufs);
    Py_DECREF(seq);
    return out;
}

/* pread_records(fd, starts, lengths) -> bytearray: bytes [starts[i], starts[i] + lengths[i]) of the
 * open file ``fd``, back to back, read with pread(2), adjacent ranges in one call: only those bytes
 * are copied and no page of the file is mapped. A range past the end of the file is a ValueError. */
static PyObject *py_pread_records(PyObject *self, PyObject *args) {
    int fd, err = 0;
    Py_buffer a, z;
    PyObject *out = NULL;
    if (!PyArg_ParseTuple(args, "iy*y*", &fd, &a, &z)) return NULL;
    if (a.len % 8 || z.len != a.len) {
        PyErr_SetString(PyExc_ValueError, "pread_records: starts and lengths must be n int64 values each");
        goto done;
    }
    Py_ssize_t n = a.len / 8;
    const int64_t *s = a.buf, *l = z.buf;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || l[i] < 0 || l[i] > PY_SSIZE_T_MAX - total || s[i] > INT64_MAX - l[i]) {
            PyErr_SetString(PyExc_ValueError, "pread_records: a negative or too large start or length");
            goto done;
        }
        total += l[i];
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) goto done;
    uint8_t *w = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !err;) {
        int64_t off = s[i], len = l[i], got = 0;
        for (i++; i < n && s[i] == off + len; i++) len += l[i];
        while (got < len) {
            ssize_t r = pread(fd, w + got, (size_t)(len - got), (off_t)(off + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                err = r < 0 ? errno : -1;
                break;
            }
            got += r;
        }
        w += len;
    }
    Py_END_ALLOW_THREADS
    if (err) {
        Py_CLEAR(out);
        if (err > 0) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
        } else {
            PyErr_SetString(PyExc_ValueError, "pread_records: a range lies past the end of the file");
        }
    }
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&z);
    return out;
}

/* ---- JSON Lines: a block of whole lines -> columns of scalar features (formats/jsonl_block.py) ----
 *
 * A strict, conservative reader: it takes a line only when it is provably what the per-line path
 * (orjson, or json) reads the same way: one JSON object per line, valid UTF-8, every schema field
 * once, each of the type its column takes as is (float32: a number; int64: an integer literal in
 * range; string: a string), other keys only when ignored (their values validated, depth <= 64).
 * Anything else (a bad line, a key given twice, ignored or not, a nested ignored object of two or
 * more keys, NaN, a lone surrogate, a line over the record
 * limit, ...) and the whole block is declined (None): the per-line path decides it. */

typedef struct {
    PyObject *obj; /* a bytes object, grown in place and cut to ``len`` when taken: no copy out */
    Py_ssize_t len, cap;
} JBuf;

static int jbuf_reserve(JBuf *b, Py_ssize_t more) {
    if (b->obj && b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap > 64 ? b->cap : 64; /* small: a wide table's 50,000 columns of a few values each */
    while (cap < b->len + more) cap *= 2;
    if (b->obj ? _PyBytes_Resize(&b->obj, cap) < 0 : !(b->obj = PyBytes_FromStringAndSize(NULL, cap))) return -1;
    b->cap = cap;
    return 0;
}

#define JBUF_END(b) ((uint8_t *)PyBytes_AS_STRING((b)->obj) + (b)->len)

static PyObject *jbuf_take(JBuf *b) {
    PyObject *o = b->obj;
    b->obj = NULL;
    if (!o) return PyBytes_FromStringAndSize("", 0);
    return _PyBytes_Resize(&o, b->len) < 0 ? NULL : o;
}

#define J_WS(c) ((c) == ' ' || (c) == '\t' || (c) == '\r')
#define J_DELIM(c) (J_WS(c) || (c) == ',' || (c) == '}' || (c) == ']')

static int hex4(const uint8_t *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* The string at *pp (just after its opening quote) up to the end e: decoded UTF-8 appended to out
 * (when out is not NULL). 1: taken; 0: declined; -1: no memory. */
static int j_string(const uint8_t **pp, const uint8_t *e, JBuf *out) {
    const uint8_t *p = *pp;
    for (;;) {
        const uint8_t *s = p;
        while (e - p >= 8) { /* 8 bytes at a time while none is a quote, a backslash, < 0x20 or >= 0x80 */
            uint64_t w, q, b;
            memcpy(&w, p, 8);
            q = w ^ 0x2222222222222222ull;
            b = w ^ 0x5C5C5C5C5C5C5C5Cull;
            if ((w | ((w - 0x2020202020202020ull) & ~w) | ((q - 0x0101010101010101ull) & ~q) |
                 ((b - 0x0101010101010101ull) & ~b)) & 0x8080808080808080ull)
                break;
            p += 8;
        }
        while (p < e && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) p++;
        if (out && p > s) {
            if (jbuf_reserve(out, p - s) < 0) return -1;
            memcpy(JBUF_END(out), s, (size_t)(p - s));
            out->len += p - s;
        }
        if (p >= e || *p < 0x20) return 0; /* unterminated, or a raw control character */
        uint8_t c = *p;
        if (c == '"') {
            *pp = p + 1;
            return 1;
        }
        uint8_t tmp[4];
        int n = 0;
        if (c == '\\') {
            if (e - p < 2) return 0;
            uint8_t x = p[1];
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            const char *hit = x ? strchr(from, x) : NULL;
            if (hit) {
                tmp[n++] = (uint8_t)to[hit - from];
                p += 2;
            } else if (x == 'u') {
                uint32_t u, lo;
                if (e - p < 6 || hex4(p + 2, &u) < 0) return 0;
                p += 6;
                if (u >= 0xDC00 && u <= 0xDFFF) return 0; /* a lone low surrogate */
                if (u >= 0xD800 && u <= 0xDBFF) {         /* a pair, or a lone high surrogate */
                    if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF) return 0;
                    p += 6;
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (u < 0x80) tmp[n++] = (uint8_t)u;
                else if (u < 0x800) { tmp[n++] = (uint8_t)(0xC0 | (u >> 6)); tmp[n++] = (uint8_t)(0x80 | (u & 0x3F)); }
                else if (u < 0x10000) {
                    tmp[n++] = (uint8_t)(0xE0 | (u >> 12));
                    tmp[n++] = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
                    tmp[n++] = (uint8_t)(0x80 | (u & 0x3F));
                } else {
                    tmp[n++] = (uint8_t)(0xF0 | (u >> 18));
                    tmp[n++] = (uint8_t)(0x80 | ((u >> 12) & 0x3F));
                    tmp[n++] = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
                    tmp[n++] = (uint8_t)(0x80 | (u & 0x3F));
                }
            } else return 0;
        } else { /* a UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF) */
            int k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
            if (!k || e - p < k) return 0;
            uint8_t lo = 0x80, hi = 0xBF;
            if (c == 0xE0) lo = 0xA0;
            else if (c == 0xED) hi = 0x9F;
            else if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F;
            if (p[1] < lo || p[1] > hi) return 0;
            for (int i = 2; i < k; i++)
                if ((p[i] & 0xC0) != 0x80) return 0;
            memcpy(tmp, p, (size_t)k);
            n = k;
            p += k;
        }
        if (out) {
            if (jbuf_reserve(out, n) < 0) return -1;
            memcpy(JBUF_END(out), tmp, (size_t)n);
            out->len += n;
        }
    }
}

static const double j_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A JSON number at *pp (RFC 8259 grammar, followed by a delimiter). kind 2: an int64 integer literal
 * into *i; kind 1: its double (correctly rounded, as orjson and float() give it) into *d; else
 * the grammar only. 1: taken; 0: declined. */
static int j_number(const uint8_t **pp, const uint8_t *e, int kind, double *d, int64_t *i) {
    const uint8_t *p = *pp, *start = p;
    int neg = 0, digits = 0, frac = 0, exp = 0;
    uint64_t m = 0;
    if (p < e && *p == '-') { neg = 1; p++; }
    if (p >= e || *p < '0' || *p > '9') return 0;
    if (*p == '0') { p++; digits = 1; }
    else
        for (; p < e && *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 19) m = m * 10 + (uint64_t)(*p - '0');
    int int_digits = digits;
    if (p < e && *p == '.') {
        p++;
        const uint8_t *f = p;
        for (; p < e && *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 19) m = m * 10 + (uint64_t)(*p - '0');
        frac = (int)(p - f);
        if (!frac) return 0;
    }
    int has_exp = 0;
    if (p < e && (*p == 'e' || *p == 'E')) {
        has_exp = 1;
        p++;
        int eneg = 0, ed = 0;
        if (p < e && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        for (; p < e && *p >= '0' && *p <= '9'; p++, ed++)
            if (exp < 100000) exp = exp * 10 + (*p - '0');
        if (!ed) return 0;
        if (eneg) exp = -exp;
    }
    if (p < e && !J_DELIM(*p)) return 0;
    if (!frac && !has_exp && int_digits > 600) return 0; /* json's int() refuses over 4300 digits (640 at least) */
    *pp = p;
    if (kind == 2) { /* an integer literal within int64 (orjson gives an int; a float is the row encoder's) */
        if (frac || has_exp || int_digits > 19) return 0;
        uint64_t v = 0;
        for (const uint8_t *q = start + neg; q < p; q++) {
            if (v > (UINT64_MAX - 9) / 10) return 0;
            v = v * 10 + (uint64_t)(*q - '0');
        }
        if (v > (uint64_t)INT64_MAX + (uint64_t)neg) return 0;
        *i = neg ? (int64_t)(0 - v) : (int64_t)v;
        return 1;
    }
    if (kind != 1) return 1;
    if (!frac && !has_exp && m == 0) { /* "-0" is the integer 0: +0.0 as a float */
        *d = 0.0;
        return 1;
    }
    int e10 = exp - frac;
    if (digits <= 15 && e10 >= -22 && e10 <= 22) { /* exact operands, one rounding: correctly rounded */
        double v = (double)m;
        v = e10 < 0 ? v / j_pow10[-e10] : v * j_pow10[e10];
        *d = neg ? -v : v;
        return 1;
    }
    char small[64], *text = small;
    Py_ssize_t n = p - start;
    if (n >= (Py_ssize_t)sizeof small && !(text = PyMem_Malloc((size_t)n + 1))) return 0;
    memcpy(text, start, (size_t)n);
    text[n] = 0;
    *d = PyOS_string_to_double(text, NULL, NULL); /* correctly rounded; +-inf on overflow (declined later) */
    if (text != small) PyMem_Free(text);
    if (*d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

/* Any JSON value at *pp (validated, not kept): an ignored field. 1: taken; 0: declined; -1: no memory. */
static int j_skip(const uint8_t **pp, const uint8_t *e, int depth) {
    const uint8_t *p = *pp;
    if (p >= e) return 0;
    int r = 1;
    if (*p == '"') { p++; r = j_string(&p, e, NULL); }
    else if (*p == '-' || (*p >= '0' && *p <= '9')) r = j_number(&p, e, 0, NULL, NULL);
    else if (e - p >= 4 && (!memcmp(p, "true", 4) || !memcmp(p, "null", 4))) p += 4;
    else if (e - p >= 5 && !memcmp(p, "false", 5)) p += 5;
    else if ((*p == '[' || *p == '{') && depth < 64) {
        uint8_t close = *p == '[' ? ']' : '}';
        int keys = 0;
        p++;
        while (p < e && J_WS(*p)) p++;
        if (p < e && *p == close) p++;
        else for (;;) {
            if (close == '}') {
                /* a nested object's second key might repeat the first (duplicate_key): the per-line
                 * path decides */
                if (keys++) return 0;
                if (p >= e || *p != '"') return 0;
                p++;
                if ((r = j_string(&p, e, NULL)) != 1) return r;
                while (p < e && J_WS(*p)) p++;
                if (p >= e || *p++ != ':') return 0;
                while (p < e && J_WS(*p)) p++;
            }
            if ((r = j_skip(&p, e, depth + 1)) != 1) return r;
            while (p < e && J_WS(*p)) p++;
            if (p < e && *p == ',') { p++; while (p < e && J_WS(*p)) p++; continue; }
            if (p < e && *p == close) { p++; break; }
            return 0;
        }
    } else return 0;
    if (r == 1 && p < e && !J_DELIM(*p)) return 0;
    *pp = p;
    return r;
}

#define J_SCAN_FIELDS 64 /* a key not where the last one's successor is: looked for by scanning up to this many
                            features, past them in a hash table of the names (a wide table's 50,000) */
#define J_MAX_EXTRA 32 /* ignored keys in a line, each checked against the others */

static inline uint64_t j_name_hash(const char *p, Py_ssize_t n) { /* FNV-1a */
    uint64_t h = 0xCBF29CE484222325ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 0x100000001B3ULL;
    return h;
}

/* The feature named key (len bytes) in the names' table (slots: feature + 1, 0 empty; mask: its size - 1), or k. */
static Py_ssize_t j_find(const int32_t *slots, size_t mask, PyObject *names, const char *key, Py_ssize_t len,
                         Py_ssize_t k) {
    for (size_t i = j_name_hash(key, len) & mask; slots[i]; i = (i + 1) & mask) {
        PyObject *name = PyTuple_GET_ITEM(names, slots[i] - 1);
        if (PyBytes_GET_SIZE(name) == len && !memcmp(PyBytes_AS_STRING(name), key, (size_t)len)) return slots[i] - 1;
    }
    return k;
}

/* jsonl_columns(block, names, kinds, ignore_extra, max_line, bom) -> (rows, [column, ...]) or None.
 * names: the features' UTF-8 names (distinct; any number); kinds: one byte each (0 string, 1 float32,
 * 2 int64). Columns:
 * float64 or int64 values as bytes, a string column as (int64 offsets as bytes, data). */
static PyObject *py_jsonl_columns(PyObject *self, PyObject *args) {
    Py_buffer block, kinds_buf;
    PyObject *names, *result = NULL;
    int ignore_extra, bom;
    Py_ssize_t max_line;
    if (!PyArg_ParseTuple(args, "y*O!y*pnp", &block, &PyTuple_Type, &names, &kinds_buf, &ignore_extra, &max_line, &bom))
        return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(names), lines = 0, rows = 0;
    const uint8_t *kinds = kinds_buf.buf, *b = block.buf, *end = b + block.len;
    JBuf *col = NULL;
    uint8_t *seen = NULL; /* per line: the features given */
    int32_t *slots = NULL;
    size_t mask = 0;
    if (kinds_buf.len != k) {
        PyErr_SetString(PyExc_ValueError, "jsonl_columns: one kind per name");
        goto done;
    }
    for (Py_ssize_t f = 0; f < k; f++)
        if (kinds[f] > 2) {
            PyErr_SetString(PyExc_ValueError, "jsonl_columns: kinds are 0 (string), 1 (float32) or 2 (int64)");
            goto done;
        }
    if (k > INT32_MAX - 1) {
        PyErr_SetString(PyExc_ValueError, "jsonl_columns: too many names");
        goto done;
    }
    for (const uint8_t *q = b; (q = memchr(q, '\n', (size_t)(end - q))); q++) lines++;
    lines++;
    col = PyMem_Calloc((size_t)(2 * k + 1), sizeof(JBuf)); /* per feature: values (and string offsets) */
    if (!col) { PyErr_NoMemory(); goto done; }
    Py_ssize_t strings = 1;
    for (Py_ssize_t f = 0; f < k; f++) strings += !kinds[f];
    for (Py_ssize_t f = 0; f < k; f++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, f))) {
            PyErr_SetString(PyExc_TypeError, "jsonl_columns: names must be bytes");
            goto done;
        }
        JBuf *v = col + 2 * f; /* values, or a string column's offsets */
        if (jbuf_reserve(v, 8 * (lines + 1)) < 0) goto done;
        if (!kinds[f]) { /* offsets start at 0; the data's room: its share of the block (it grows if need be) */
            memset(JBUF_END(v), 0, 8);
            v->len = 8;
            if (jbuf_reserve(v + 1, block.len / strings) < 0) goto done;
        }
    }
    seen = PyMem_Malloc((size_t)k + 1);
    if (!seen) { PyErr_NoMemory(); goto done; }
    if (k > J_SCAN_FIELDS) {
        size_t size = 1;
        while (size < 2 * (size_t)k) size <<= 1;
        mask = size - 1;
        slots = PyMem_Calloc(size, sizeof(int32_t));
        if (!slots) { PyErr_NoMemory(); goto done; }
        for (Py_ssize_t f = 0; f < k; f++) {
            PyObject *name = PyTuple_GET_ITEM(names, f);
            size_t i = j_name_hash(PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name)) & mask;
            while (slots[i]) i = (i + 1) & mask;
            slots[i] = (int32_t)(f + 1);
        }
    }
    JBuf key = {0}, extra = {0};
    if (jbuf_reserve(&key, 256) < 0) goto done;
    int ok = 1;
    Py_ssize_t last = -1; /* the field of the last key read */
    const uint8_t *p = b;
    for (int first = 1; ok == 1 && p < end; first = 0) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *e = nl ? nl : end, *next = nl ? nl + 1 : end, *s = p;
        if (next - p > max_line) { ok = 0; break; } /* record_too_large, whitespace or not */
        if (first && bom && e - s >= 3 && !memcmp(s, "\xef\xbb\xbf", 3)) s += 3; /* the file's BOM */
        p = next;
        const uint8_t *t = s;
        while (t < e && (J_WS(*t) || *t == '\v' || *t == '\f')) t++;
        if (t == e) continue; /* a blank line (bytes.isspace): not a record */
        while (s < e && J_WS(*s)) s++; /* JSON's white space only */
        if (*s != '{') { ok = 0; break; }
        s++;
        memset(seen, 0, (size_t)k + 1);
        Py_ssize_t found = 0, nextra = 0;
        extra.len = 0;
        while (s < e && J_WS(*s)) s++;
        if (s < e && *s == '}') s++;
        else for (;;) {
            if (s >= e || *s++ != '"') { ok = 0; break; }
            key.len = 0;
            int r = j_string(&s, e, &key);
            if (r != 1) { ok = r; break; }
            while (s < e && J_WS(*s)) s++;
            if (s >= e || *s++ != ':') { ok = 0; break; }
            while (s < e && J_WS(*s)) s++;
            Py_ssize_t f = k;
            for (Py_ssize_t j = 0; j < (slots ? 1 : k); j++) { /* from the field after the last one: keys mostly come in order */
                Py_ssize_t c = (last + 1 + j) % k;
                PyObject *name = PyTuple_GET_ITEM(names, c);
                if (PyBytes_GET_SIZE(name) == key.len &&
                    !memcmp(PyBytes_AS_STRING(name), PyBytes_AS_STRING(key.obj), (size_t)key.len)) {
                    f = last = c;
                    break;
                }
            }
            if (f == k && slots && (f = j_find(slots, mask, names, PyBytes_AS_STRING(key.obj), key.len, k)) < k)
                last = f;
            if (f == k) {
                if (!ignore_extra) { ok = 0; break; }
                /* an ignored key given twice is duplicate_key: the line's ignored keys, each as
                 * (int64 length, bytes), compared one by one; more than J_MAX_EXTRA: declined */
                const uint8_t *x = extra.obj ? (const uint8_t *)PyBytes_AS_STRING(extra.obj) : NULL;
                int twice = 0;
                for (Py_ssize_t at = 0; at < extra.len && !twice;) {
                    int64_t n;
                    memcpy(&n, x + at, 8);
                    twice = n == key.len && !memcmp(x + at + 8, PyBytes_AS_STRING(key.obj), (size_t)n);
                    at += 8 + n;
                }
                if (twice || ++nextra > J_MAX_EXTRA) { ok = 0; break; }
                if (jbuf_reserve(&extra, 8 + key.len) < 0) { ok = -1; break; }
                int64_t n = key.len;
                memcpy(JBUF_END(&extra), &n, 8);
                memcpy(JBUF_END(&extra) + 8, PyBytes_AS_STRING(key.obj), (size_t)key.len);
                extra.len += 8 + key.len;
                if ((r = j_skip(&s, e, 0)) != 1) { ok = r; break; }
            } else if (seen[f]) { ok = 0; break; }
            else {
                seen[f] = 1;
                found++;
                if (kinds[f] == 0) {
                    JBuf *off = col + 2 * f, *data = col + 2 * f + 1;
                    if (s >= e || *s != '"') { ok = 0; break; }
                    s++;
                    if ((r = j_string(&s, e, data)) != 1) { ok = r; break; }
                    int64_t o = data->len;
                    memcpy(JBUF_END(off), &o, 8);
                    off->len += 8;
                } else {
                    double d = 0;
                    int64_t i = 0;
                    if (!j_number(&s, e, kinds[f], &d, &i)) { ok = 0; break; }
                    memcpy(JBUF_END(col + 2 * f), kinds[f] == 1 ? (void *)&d : (void *)&i, 8);
                    col[2 * f].len += 8;
                }
            }
            while (s < e && J_WS(*s)) s++;
            if (s < e && *s == ',') { s++; while (s < e && J_WS(*s)) s++; continue; }
            if (s < e && *s == '}') { s++; break; }
            ok = 0;
            break;
        }
        if (ok != 1) break;
        while (s < e && J_WS(*s)) s++;
        if (s != e || found != k) { ok = 0; break; }
        rows++;
    }
    Py_CLEAR(key.obj);
    Py_CLEAR(extra.obj);
    if (ok < 0) goto done; /* no memory: the error is set */
    if (!ok) { result = Py_None; Py_INCREF(result); goto done; }
    PyObject *columns = PyList_New(k);
    if (!columns) goto done;
    for (Py_ssize_t f = 0; f < k; f++) {
        PyObject *item = jbuf_take(col + 2 * f);
        if (item && !kinds[f]) {
            PyObject *data = jbuf_take(col + 2 * f + 1);
            item = data ? Py_BuildValue("(NN)", item, data) : (Py_DECREF(item), NULL);
        }
        if (!item) { Py_DECREF(columns); goto done; }
        PyList_SET_ITEM(columns, f, item);
    }
    result = Py_BuildValue("(nN)", rows, columns);
done:
    if (col)
        for (Py_ssize_t f = 0; f < 2 * k; f++) Py_XDECREF(col[f].obj);
    PyMem_Free(col);
    PyMem_Free(seen);
    PyMem_Free(slots);
    PyBuffer_Release(&block);
    PyBuffer_Release(&kinds_buf);
    return result;
}

/* feistel(values, keys, half, n, inverse): the keyed bijection of [0, n) of shardprep.permutation
 * (a balanced Feistel network on 2 * half bits, one round per 8-byte key, cycle-walked back into
 * [0, n)), or its inverse, applied in place to a writable buffer of uint64 values below n. */
static inline uint64_t fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    return x ^ (x >> 33);
}

static inline uint64_t feistel_rounds(uint64_t x, const uint64_t *k, Py_ssize_t r, unsigned half, uint64_t mask,
                                      int inverse) {
    uint64_t left = x >> half, right = x & mask, t;
    if (!inverse)
        for (Py_ssize_t j = 0; j < r; j++) { t = right; right = left ^ (fmix64(right ^ k[j]) & mask); left = t; }
    else
        for (Py_ssize_t j = r - 1; j >= 0; j--) { t = left; left = right ^ (fmix64(left ^ k[j]) & mask); right = t; }
    return (left << half) | right;
}

static PyObject *py_feistel(PyObject *self, PyObject *args) {
    Py_buffer vals, keys;
    unsigned int half;
    unsigned long long n;
    int inverse;
    if (!PyArg_ParseTuple(args, "w*y*IKp", &vals, &keys, &half, &n, &inverse)) return NULL;
    PyObject *out = NULL;
    uint64_t *v = vals.buf;
    const uint64_t *k = keys.buf;
    Py_ssize_t m = vals.len / 8, r = keys.len / 8, *todo = NULL;
    int bad = vals.len % 8 || keys.len % 8 || half < 1 || half > 32 || (n > 0 && 2 * half < 64 && n > (1ULL << (2 * half)));
    for (Py_ssize_t i = 0; i < m && !bad; i++)
        if (v[i] >= n) bad = 1;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "feistel: a value outside [0, n), or a malformed key or width");
        goto done;
    }
    todo = PyMem_Malloc((size_t)(m ? m : 1) * sizeof(Py_ssize_t));
    if (!todo) { PyErr_NoMemory(); goto done; }
    const uint64_t mask = half == 32 ? 0xFFFFFFFFULL : (1ULL << half) - 1;
    Py_BEGIN_ALLOW_THREADS
    /* One walk step for every value, then again for those outside [0, n) (cycle walking), collected
     * without a branch: consecutive values' rounds overlap in the CPU (a loop per value, ending at
     * a random count of steps, took 1.2x the time). */
    Py_ssize_t left = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        v[i] = feistel_rounds(v[i], k, r, half, mask, inverse);
        todo[left] = i;
        left += v[i] >= n;
    }
    while (left) {
        Py_ssize_t still = 0;
        for (Py_ssize_t t = 0; t < left; t++) {
            Py_ssize_t i = todo[t];
            v[i] = feistel_rounds(v[i], k, r, half, mask, inverse);
            todo[still] = i;
            still += v[i] >= n;
        }
        left = still;
    }
    Py_END_ALLOW_THREADS
    out = Py_None;
    Py_INCREF(out);
done:
    PyMem_Free(todo);
    PyBuffer_Release(&vals);
    PyBuffer_Release(&keys);
    return out;
}

/* decode_example(data) -> dict or None: a serialized tf.train.Example as {name: [values]} exactly
 * as shardprep.example.decoder reads it (packed or unpacked lists; a repeated key: the last wins; a
 * repeated Feature merges: the same kind appends, another kind replaces), or None wherever that
 * reader refuses the bytes (it then words the error). */
typedef struct { const uint8_t *b; Py_ssize_t pos, end; } ExCur;

/* A varint at c->pos, below end: 1 read (*out: its low 64 bits), 0 cut off or over 10 bytes;
 * *wide: bits beyond the 64th were set (the Python reader keeps them: a tag or length that big is
 * refused there). */
static int ex_varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out, int *wide) {
    uint64_t r = 0;
    int shift = 0;
    *wide = 0;
    for (;;) {
        if (*pos >= end) return 0;
        uint8_t c = b[(*pos)++];
        if (shift < 64) {
            r |= (uint64_t)(c & 0x7F) << shift;
            if (shift == 63 && (c & 0x7E)) *wide = 1;
        } else if (c & 0x7F) {
            *wide = 1;
        }
        if (c < 0x80) { *out = r; return 1; }
        shift += 7;
        if (shift >= 70) return 0;
    }
}

/* One field at *pos below end: its tag and, for a length-delimited one, [*start, *stop) (else both
 * *pos after the tag). 0 where the Python reader raises. */
static inline int ex_field(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *tag, Py_ssize_t *start,
                           Py_ssize_t *stop) {
    int wide = 0;
    uint64_t n;
    if (*pos < end && b[*pos] < 0x80) *tag = b[(*pos)++]; /* a one-byte varint: the common case */
    else if (!ex_varint(b, pos, end, tag, &wide) || wide) return 0;
    if ((*tag & 7) != 2) { *start = *stop = *pos; return 1; }
    if (*pos < end && b[*pos] < 0x80) n = b[(*pos)++];
    else if (!ex_varint(b, pos, end, &n, &wide) || wide) return 0;
    if (n > (uint64_t)(end - *pos)) return 0;
    *start = *pos;
    *stop = *pos + (Py_ssize_t)n;
    *pos = *stop;
    return 1;
}

/* The values of one list field (tag 0x0A bytes, 0x12 float, 0x1A int64) over [pos, end), appended. */
static int ex_list(const uint8_t *b, uint64_t kind, Py_ssize_t pos, Py_ssize_t end, PyObject *values) {
    uint64_t tag;
    Py_ssize_t start, stop;
    while (pos < end) {
        if (!ex_field(b, &pos, end, &tag, &start, &stop)) return 0;
        PyObject *v = NULL;
        if (kind == 0x0A) {
            if (tag != 0x0A) return 0;
            v = PyBytes_FromStringAndSize((const char *)b + start, stop - start);
            if (!v || PyList_Append(values, v) < 0) { Py_XDECREF(v); return -1; }
            Py_DECREF(v);
        } else if (kind == 0x12) {
            Py_ssize_t from = start, count = 1;
            if (tag == 0x0A) {
                if ((stop - start) % 4) return 0;
                count = (stop - start) / 4;
            } else if (tag == 0x0D) {
                if (pos + 4 > end) return 0;
                from = pos;
                pos += 4;
            } else {
                return 0;
            }
            for (Py_ssize_t i = 0; i < count; i++) {
                float f;
                uint8_t raw[4];
                memcpy(raw, b + from + 4 * i, 4);
                if (!little_endian) { uint8_t t = raw[0]; raw[0] = raw[3]; raw[3] = t; t = raw[1]; raw[1] = raw[2]; raw[2] = t; }
                memcpy(&f, raw, 4);
                v = PyFloat_FromDouble((double)f);
                if (!v || PyList_Append(values, v) < 0) { Py_XDECREF(v); return -1; }
                Py_DECREF(v);
            }
        } else {
            Py_ssize_t i = start, stop_at = stop, left = -1; /* packed: values while i < stop_at */
            if (tag == 0x08) { i = pos; stop_at = end; left = 1; } /* unpacked: one value */
            else if (tag != 0x0A) return 0;
            while (left < 0 ? i < stop_at : left-- > 0) {
                uint64_t x;
                int wide;
                if (!ex_varint(b, &i, stop_at, &x, &wide)) return 0;
                v = PyLong_FromLongLong((long long)x); /* the low 64 bits, two's complement: as _signed */
                if (!v || PyList_Append(values, v) < 0) { Py_XDECREF(v); return -1; }
                Py_DECREF(v);
            }
            if (tag == 0x08) pos = i;
        }
    }
    return 1;
}

/* Features over [pos, end) into out: 1, 0 refused, -1 a Python error. */
static int ex_features(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, PyObject *out) {
    uint64_t tag;
    Py_ssize_t entry, stop;
    while (pos < end) {
        if (!ex_field(b, &pos, end, &tag, &entry, &stop) || tag != 0x0A) return 0;
        PyObject *key = NULL, *values = PyList_New(0);
        uint64_t kind = 0;
        int ok = values != NULL ? 1 : -1;
        while (ok == 1 && entry < stop) {
            Py_ssize_t start, inner;
            if (!ex_field(b, &entry, stop, &tag, &start, &inner)) { ok = 0; break; }
            if (tag == 0x0A) {
                Py_XDECREF(key);
                key = PyUnicode_DecodeUTF8((const char *)b + start, inner - start, "strict");
                if (!key) { PyErr_Clear(); ok = 0; }
            } else if (tag == 0x12) {
                while (ok == 1 && start < inner) {
                    uint64_t list_tag;
                    Py_ssize_t lo, hi;
                    if (!ex_field(b, &start, inner, &list_tag, &lo, &hi) ||
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

static PyObject *py_decode_example(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    const uint8_t *b = data.buf;
    Py_ssize_t pos = 0, end = data.len, start, stop;
    uint64_t tag;
    PyObject *out = PyDict_New();
    int ok = out ? 1 : -1;
    while (ok == 1 && pos < end) {
        if (!ex_field(b, &pos, end, &tag, &start, &stop) || tag != 0x0A) ok = 0;
        else ok = ex_features(b, start, stop, out);
    }
    PyBuffer_Release(&data);
    if (ok == 1) return out;
    Py_XDECREF(out);
    if (ok < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- statistics' columns: a batch of Examples -> per-feature values (shardprep.stats_columns) ----
 * example_columns(blob, ends, names, kinds) -> (lengths, columns) or None. ``blob`` holds framed
 * TFRecords back to back (``ends``: uint64 end offsets), ``names`` a tuple of the schema's UTF-8
 * names in ascending byte order, ``kinds`` one byte each (0 bytes, 1 float32, 2 int64). ``lengths``:
 * int64 [record][feature], each record's number of values, -1 where it leaves the feature out;
 * ``columns[f]``: the values back to back (float32 or int64, native order), for strings a pair
 * (data, int64 end offsets from 0). The values are those ``example.decoder`` reads. None (the
 * caller decodes in Python) for anything the pipeline's own records never hold: a key or a list
 * given twice, values of another kind than the schema's, bytes the decoder refuses. Kind 3: bytes
 * given as their ``hash_values`` (uint64, seed 0) instead of their data, with the same offsets (a
 * string feature whose statistics keep only the distinct-count sketch: no copy of its bytes).
 * example_columns(blob, ends, names, kinds, bounds, inv_log, low): the same, but each number feature's
 * ``columns[f]`` is its sums (``ex_acc_result``, below) instead of its values. */

typedef struct { const uint8_t *p; Py_ssize_t n; } ExName;

static uint64_t value_hash(const uint8_t *p, size_t n, uint64_t seed); /* hash_values' (below) */

static int ex_cmp(const uint8_t *a, Py_ssize_t an, const uint8_t *b, Py_ssize_t bn) {
    int c = (an && bn) ? memcmp(a, b, (size_t)(an < bn ? an : bn)) : 0;
    return c ? c : (an > bn) - (an < bn);
}

/* a == b over n bytes: a loop for a short name (a call to memcmp cost more than the compare) */
static inline int ex_same(const uint8_t *a, const uint8_t *b, Py_ssize_t n) {
    if (n > 16) return !memcmp(a, b, (size_t)n);
    uint8_t d = 0;
    for (Py_ssize_t i = 0; i < n; i++) d |= a[i] ^ b[i];
    return !d;
}

static Py_ssize_t ex_lookup(const ExName *names, Py_ssize_t k, const uint8_t *key, Py_ssize_t len) {
    Py_ssize_t lo = 0, hi = k;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        int c = ex_cmp(names[mid].p, names[mid].n, key, len);
        if (!c) return mid;
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return -1;
}

/* With ``bounds`` (example_columns' fifth argument), a number feature's values are not copied out
 * but summed up as they are read, exactly as shardprep.stats_columns.add sums a column: the finite
 * values' count, minimum and maximum, exact sums and sums of squares (int64: 128-bit sums; float32:
 * a value is +-M 2**(e - 1) times 2**-149, M its 24-bit significand, e its exponent field (1 for
 * subnormals), so the sums are per-e sums of M and M**2, shifted into place at the end), and the
 * log-bucket sketch's counts: the bucket of |x| is the index of the first bound >= |x| in
 * ``bounds`` (sketches._BOUNDS: a guess from log(), then set exactly against the table, the same
 * index as sketches.bucket_keys' searchsorted), counted per sign in a dense table touched only
 * where values fall. */
#define EX_LIMBS 11 /* 704 bits: a float32 square (48 bits) shifted by up to 506, summed over < 2**64 values */

typedef struct {
    const double *bounds;
    Py_ssize_t top;
    double inv_log, low;  /* low: the key of bounds[0] */
    const int32_t *slice; /* ex_slices' table for these bounds (NULL: none) */
} ExBounds;

/* A magnitude's slice: its double's exponent and first 8 significand bits, for the exponents from
 * float32's least subnormal (2**-149) to int64's largest (2**63). A slice is narrower (1/256) than the
 * gap between two bounds (sketches' gamma: 2%), so its values fall in the bucket of its lowest one or
 * the next: a table of the first bound >= each slice's lowest value, and one comparison. */
#define EX_SLICE_E0 (1023 - 149)
#define EX_SLICES ((63 + 149 + 1) * 256)
static int32_t *ex_slice_table;
static double ex_slice_of[4]; /* the bounds it was built for: top, inv_log, low, bounds[0] */

/* The slice table of ``t``'s bounds, built on first use (with the GIL) and never changed after, as
 * walks without the GIL read it; or NULL (other bounds than the first, no memory, or bounds too close
 * together for it): the guess in ex_bucket_index serves. */
static const int32_t *ex_slices(const ExBounds *t) {
    double of[4] = {(double)t->top, t->inv_log, t->low, t->bounds[0]};
    if (ex_slice_table) return memcmp(of, ex_slice_of, sizeof of) ? NULL : ex_slice_table;
    if (t->inv_log > 255.0) return NULL; /* gaps under 1/256: two bounds could share a slice */
    int32_t *table = PyMem_RawMalloc(EX_SLICES * sizeof(int32_t));
    if (!table) return NULL;
    Py_ssize_t i = 0;
    for (int64_t k = 0; k < EX_SLICES; k++) {
        uint64_t u = (uint64_t)(EX_SLICE_E0 * 256 + k) << 44;
        double lowest;
        memcpy(&lowest, &u, 8);
        while (i < t->top && t->bounds[i] < lowest) i++;
        table[k] = (int32_t)i;
    }
    memcpy(ex_slice_of, of, sizeof of);
    ex_slice_table = table;
    return table;
}

typedef struct {             /* a number feature's count, extremes and sums (sum_numbers: a local, in registers) */
    int64_t values;           /* finite values */
    int64_t imin, imax;
    float fmin, fmax;
    unsigned __int128 ipos, ineg, isq; /* int64: sums of v >= 0, of |v| for v < 0, of v**2 (low 128 bits) */
    uint64_t isq_carry;                /* and its carries past 2**128 */
} ExSums;

typedef struct {
    const ExBounds *table;    /* the bucket bounds */
    int kind;                 /* 1 float32, 2 int64 */
    int64_t zeros;            /* zeros among the finite values */
    ExSums sums;
    int64_t *fsum;            /* float32: [256] signed sums of M per exponent field */
    uint64_t *fsq;            /* [2 * 256] sums of M**2: low and high words (two 64-bit adds: a
                                 128-bit one stalled every next value of the exponent) */
    int64_t *dense[2];        /* bucket counts by bound index: [0] positive, [1] negative (NULL until used) */
    Py_ssize_t lo[2], hi[2];  /* the indices used: [lo, hi] */
} ExAcc;

static double ex_ln_table[256]; /* ln(1 + j / 256): the guess's table (module init) */

/* ln(m) of a positive normal double, from below within 1/256 (its exponent and the first 8 bits
 * of its significand): a guess of the bucket within one of it, as good as log()'s for the table
 * walk below, at a fraction of its cost. */
static inline double ex_ln_guess(double m) {
    uint64_t u;
    memcpy(&u, &m, 8);
    int e = (int)((u >> 52) & 0x7FF);
    if (!e) return log(m); /* subnormal doubles: never a float32's or an int64's magnitude */
    return (double)(e - 1023) * 0.6931471805599453 + ex_ln_table[(u >> 44) & 0xFF];
}

/* Bucket-count tables (one per feature and sign, ``top + 1`` counts: 320 KiB for sketches' table)
 * are kept zeroed for the next batch, a few of them, rather than allocated and faulted in for every
 * batch: a batch touches a few pages of one, the allocation cost a millisecond. A lock of their own
 * guards them (walks take them without the GIL). */
#define EX_SPARE 32
static int64_t *ex_spare[EX_SPARE];
static Py_ssize_t ex_spare_top[EX_SPARE], ex_spares;
static PyThread_type_lock ex_spare_lock; /* module init */

static int64_t *ex_dense_take(Py_ssize_t top) {
    int64_t *dense = NULL;
    PyThread_acquire_lock(ex_spare_lock, WAIT_LOCK);
    for (Py_ssize_t i = ex_spares; i-- > 0;)
        if (ex_spare_top[i] == top) {
            dense = ex_spare[i];
            ex_spares--;
            ex_spare[i] = ex_spare[ex_spares];
            ex_spare_top[i] = ex_spare_top[ex_spares];
            break;
        }
    PyThread_release_lock(ex_spare_lock);
    return dense ? dense : PyMem_RawCalloc((size_t)top + 1, sizeof(int64_t));
}

static void ex_dense_give(int64_t *dense, Py_ssize_t top, Py_ssize_t lo, Py_ssize_t hi) {
    if (!dense) return;
    memset(dense + lo, 0, (size_t)(hi - lo + 1) * sizeof(int64_t));
    PyThread_acquire_lock(ex_spare_lock, WAIT_LOCK);
    int kept = ex_spares < EX_SPARE;
    if (kept) {
        ex_spare[ex_spares] = dense;
        ex_spare_top[ex_spares++] = top;
    }
    PyThread_release_lock(ex_spare_lock);
    if (!kept) PyMem_RawFree(dense);
}

/* The index in the bounds of the first bound >= m (m > 0, finite). */
static inline Py_ssize_t ex_bucket_index(const ExBounds *t, double m) {
    const double *b = t->bounds;
    Py_ssize_t top = t->top;
    uint64_t u;
    memcpy(&u, &m, 8);
    uint64_t slice = (u >> 44) - (uint64_t)EX_SLICE_E0 * 256;
    if (t->slice && slice < EX_SLICES) {
        Py_ssize_t i = t->slice[slice];
        return i + (b[i] < m);
    }
    /* the key's ceil, within one: truncated (cheaper than ceil() without SSE4.1; set exactly below) */
    double g = ex_ln_guess(m) * t->inv_log - t->low + 1.0;
    Py_ssize_t i = g < 1.0 ? 1 : g > (double)top ? top : (Py_ssize_t)g;
    i += b[i] < m; /* the guess is within one bucket: set without branches (b[top] is inf: i stays <= top) */
    i -= b[i - 1] >= m;
    if (__builtin_expect((i < top && b[i] < m) || (i > 0 && b[i - 1] >= m), 0)) { /* never seen: walk to it */
        while (i < top && b[i] < m) i++;
        while (i > 0 && b[i - 1] >= m) i--;
    }
    return i;
}

static inline int ex_count(ExAcc *a, int side, Py_ssize_t i) {
    int64_t *dense = a->dense[side];
    if (__builtin_expect(!dense, 0)) {
        dense = a->dense[side] = ex_dense_take(a->table->top);
        if (!dense) return -1;
        a->lo[side] = a->hi[side] = i;
    }
    dense[i]++;
    Py_ssize_t lo = a->lo[side], hi = a->hi[side];
    a->lo[side] = i < lo ? i : lo;
    a->hi[side] = i > hi ? i : hi;
    return 0;
}

/* The count, minimum, maximum and sums of one value: the value as a double, for its bucket (``ex_pend``). */
static inline double ex_sum_int(ExSums *a, int64_t v) {
    if (!a->values || v < a->imin) a->imin = v;
    if (!a->values || v > a->imax) a->imax = v;
    a->values++;
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0) a->ineg += mag; else a->ipos += mag;
    unsigned __int128 sq = (unsigned __int128)mag * mag, before = a->isq;
    a->isq += sq;
    a->isq_carry += a->isq < before;
    return (double)v;
}

/* ... of one float32 (its bits; ``fsum``, ``fsq``: ExAcc's): the value as a double, NaN for NaN and the
 * infinities (left out of every number). */
static inline double ex_sum_float(ExSums *a, int64_t *fsum, uint64_t *fsq, uint32_t bits) {
    uint32_t field = (bits >> 23) & 0xFF;
    if (field == 0xFF) return NAN;
    float f;
    memcpy(&f, &bits, 4);
    if (!a->values || f < a->fmin) a->fmin = f;
    if (!a->values || f > a->fmax) a->fmax = f;
    a->values++;
    int64_t m = (int64_t)((bits & 0x7FFFFF) | (field ? 0x800000u : 0));
    int e = field ? (int)field : 1;
    fsum[e] += (bits >> 31) ? -m : m;
    uint64_t sq = (uint64_t)(m * m), low = fsq[2 * e] + sq;
    fsq[2 * e + 1] += low < sq;
    fsq[2 * e] = low;
    return (double)f;
}

/* Values summed but not yet counted in their buckets: counted a block at a time, every bucket's
 * index first, then the counts. A count's address comes from the long computation of its index;
 * counting each value as it came made every later load wait for that store (~2x the time a value). */
#define EX_BLOCK 256
typedef struct {
    int n;
    ExAcc *acc[EX_BLOCK];
    double x[EX_BLOCK];
} ExPending;

static int ex_count_pending(ExPending *p) {
    Py_ssize_t index[EX_BLOCK];
    for (int j = 0; j < p->n; j++) /* -1: a zero */
        index[j] = p->x[j] == 0.0 ? -1 : ex_bucket_index(p->acc[j]->table, fabs(p->x[j]));
    for (int j = 0; j < p->n; j++) {
        if (index[j] < 0) p->acc[j]->zeros++;
        else if (ex_count(p->acc[j], signbit(p->x[j]) != 0, index[j]) < 0) return -1;
    }
    p->n = 0;
    return 0;
}

/* ``x`` (ex_sum_int / ex_sum_float's value; NaN: none) into ``acc``'s buckets, now or with its block. */
static inline int ex_pend(ExPending *p, ExAcc *acc, double x) {
    if (isnan(x)) return 0;
    p->acc[p->n] = acc;
    p->x[p->n] = x;
    return ++p->n == EX_BLOCK ? ex_count_pending(p) : 0;
}

/* acc += v << shift (little-endian uint64 limbs; the sum never passes EX_LIMBS limbs). */
static void ex_add_shifted(uint64_t *acc, unsigned __int128 v, int shift) {
    int word = shift / 64, bit = shift % 64;
    uint64_t lo = (uint64_t)v, hi = (uint64_t)(v >> 64), part[3];
    part[0] = lo << bit;
    part[1] = bit ? (hi << bit) | (lo >> (64 - bit)) : hi;
    part[2] = bit ? hi >> (64 - bit) : 0;
    unsigned __int128 carry = 0;
    for (int i = word; i < EX_LIMBS; i++) {
        unsigned __int128 t = (unsigned __int128)acc[i] + carry + (i - word < 3 ? part[i - word] : 0);
        acc[i] = (uint64_t)t;
        carry = t >> 64;
        if (i - word >= 2 && !carry) break;
    }
}

/* One feature's sums: (values, min, max, total_pos, total_neg, squares, zeros, (lo, pos counts),
 * (lo, neg counts)); the three sums as little-endian unsigned bytes (the total is pos - neg; floats
 * scaled by 2**149, their squares by 2**298), the counts int64 by bound index from ``lo``. */
static PyObject *ex_acc_result(ExAcc *a) {
    uint64_t pos[EX_LIMBS] = {0}, neg[EX_LIMBS] = {0}, sq[EX_LIMBS] = {0};
    PyObject *lo = NULL, *hi = NULL;
    if (a->kind == 2) {
        ex_add_shifted(pos, a->sums.ipos, 0);
        ex_add_shifted(neg, a->sums.ineg, 0);
        ex_add_shifted(sq, a->sums.isq, 0);
        ex_add_shifted(sq, a->sums.isq_carry, 128);
        if (a->sums.values) { lo = PyLong_FromLongLong(a->sums.imin); hi = PyLong_FromLongLong(a->sums.imax); }
    } else {
        for (int e = 1; e < 255; e++) {
            if (a->fsum[e] > 0) ex_add_shifted(pos, (unsigned __int128)a->fsum[e], e - 1);
            else if (a->fsum[e] < 0) ex_add_shifted(neg, (unsigned __int128)(-(a->fsum[e] + 1)) + 1, e - 1);
            unsigned __int128 squares = (unsigned __int128)a->fsq[2 * e + 1] << 64 | a->fsq[2 * e];
            if (squares) ex_add_shifted(sq, squares, 2 * (e - 1));
        }
        if (a->sums.values) { lo = PyFloat_FromDouble((double)a->sums.fmin + 0.0); hi = PyFloat_FromDouble((double)a->sums.fmax + 0.0); }
    }
    if (!a->sums.values) { lo = Py_None; hi = Py_None; Py_INCREF(lo); Py_INCREF(hi); }
    PyObject *buckets[2] = {NULL, NULL};
    for (int side = 0; side < 2; side++) {
        Py_ssize_t from = a->dense[side] ? a->lo[side] : 0, size = a->dense[side] ? a->hi[side] - from + 1 : 0;
        buckets[side] = Py_BuildValue("(ny#)", from, a->dense[side] ? (const char *)(a->dense[side] + from) : "",
                                      (Py_ssize_t)(8 * size));
    }
    PyObject *out = NULL;
    if (lo && hi && buckets[0] && buckets[1])
        out = Py_BuildValue("(LOOy#y#y#LOO)", (long long)a->sums.values, lo, hi, (const char *)pos, (Py_ssize_t)sizeof pos,
                            (const char *)neg, (Py_ssize_t)sizeof neg, (const char *)sq, (Py_ssize_t)sizeof sq,
                            (long long)a->zeros, buckets[0], buckets[1]);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    Py_XDECREF(buckets[0]);
    Py_XDECREF(buckets[1]);
    return out;
}

static void ex_acc_free(ExAcc *a) {
    PyMem_Free(a->fsum);
    PyMem_Free(a->fsq);
    for (int side = 0; side < 2; side++)
        if (a->dense[side]) ex_dense_give(a->dense[side], a->table->top, a->lo[side], a->hi[side]);
}

/* jbuf_reserve in the Example walk, which runs without the GIL: taken to grow a buffer only (values
 * of one per record are reserved up front; a string column grows a few times a batch, until capped). */
static int ex_reserve(JBuf *b, Py_ssize_t more) {
    if (b->obj && b->len + more <= b->cap) return 0;
    PyGILState_STATE gil = PyGILState_Ensure();
    int got = jbuf_reserve(b, more);
    PyGILState_Release(gil);
    return got;
}

/* One list over [pos, end) of kind ``kind`` (tag 0x0A/0x12/0x1A of Feature) into the buffers: 1, 0
 * refused, -1 no memory; *count: its number of values. */
static int ex_values(const uint8_t *b, uint64_t kind, Py_ssize_t pos, Py_ssize_t end, JBuf *vals, JBuf *offs,
                     int64_t *count, int hashed, ExAcc *acc, ExPending *pending) {
    uint64_t tag;
    Py_ssize_t start, stop;
    while (pos < end) {
        if (!ex_field(b, &pos, end, &tag, &start, &stop)) return 0;
        if (kind == 0x0A) {
            if (tag != 0x0A) return 0;
            int64_t at;
            if (hashed) { /* its hash, and its end where its data would have been */
                if (ex_reserve(vals, 8) < 0 || ex_reserve(offs, 8) < 0) return -1;
                uint64_t h = value_hash(b + start, (size_t)(stop - start), 0);
                memcpy(JBUF_END(vals), &h, 8);
                vals->len += 8;
                memcpy(&at, JBUF_END(offs) - 8, 8);
                at += stop - start;
            } else {
                if (ex_reserve(vals, stop - start) < 0 || ex_reserve(offs, 8) < 0) return -1;
                memcpy(JBUF_END(vals), b + start, (size_t)(stop - start));
                vals->len += stop - start;
                at = (int64_t)vals->len;
            }
            memcpy(JBUF_END(offs), &at, 8);
            offs->len += 8;
            (*count)++;
        } else if (kind == 0x12) {
            Py_ssize_t from = start, m = 1;
            if (tag == 0x0A) {
                if ((stop - start) % 4) return 0;
                m = (stop - start) / 4;
            } else if (tag == 0x0D) {
                if (pos + 4 > end) return 0;
                from = pos;
                pos += 4;
            } else {
                return 0;
            }
            if (acc) { /* summed as read (little-endian bytes, whatever the machine) */
                for (Py_ssize_t i = 0; i < m; i++)
                    if (ex_pend(pending, acc, ex_sum_float(&acc->sums, acc->fsum, acc->fsq, le32(b + from + 4 * i))) < 0) return -1;
                *count += m;
                continue;
            }
            if (ex_reserve(vals, 4 * m) < 0) return -1;
            uint8_t *w = JBUF_END(vals);
            memcpy(w, b + from, (size_t)(4 * m));
            if (!little_endian)
                for (Py_ssize_t i = 0; i < m; i++) {
                    uint8_t t = w[4 * i]; w[4 * i] = w[4 * i + 3]; w[4 * i + 3] = t;
                    t = w[4 * i + 1]; w[4 * i + 1] = w[4 * i + 2]; w[4 * i + 2] = t;
                }
            vals->len += 4 * m;
            *count += m;
        } else {
            Py_ssize_t i = start, stop_at = stop, left = -1;
            if (tag == 0x08) { i = pos; stop_at = end; left = 1; }
            else if (tag != 0x0A) return 0;
            while (left < 0 ? i < stop_at : left-- > 0) {
                uint64_t x;
                int wide;
                if (!ex_varint(b, &i, stop_at, &x, &wide)) return 0;
                if (acc) {
                    if (ex_pend(pending, acc, ex_sum_int(&acc->sums, (int64_t)x)) < 0) return -1;
                    (*count)++;
                    continue;
                }
                if (ex_reserve(vals, 8) < 0) return -1;
                int64_t v = (int64_t)x;
                memcpy(JBUF_END(vals), &v, 8);
                vals->len += 8;
                (*count)++;
            }
            if (tag == 0x08) pos = i;
        }
    }
    return 1;
}

/* One Example [pos, end) as record ``r`` of ``n``: 1, 0 refused, -1 no memory. */
static int ex_record(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, const ExName *names, const uint8_t *kinds,
                     Py_ssize_t k, JBuf *col, int64_t *lengths, Py_ssize_t *next, ExAcc *acc, ExPending *pending) {
    Py_ssize_t prev = k; /* the feature read last (k: none yet) */
    static const uint64_t list_tag[4] = {0x0A, 0x12, 0x1A, 0x0A};
    uint64_t tag;
    Py_ssize_t start, stop;
    while (pos < end) {
        if (!ex_field(b, &pos, end, &tag, &start, &stop) || tag != 0x0A) return 0;
        Py_ssize_t at = start;
        while (at < stop) { /* map entries */
            Py_ssize_t entry, entry_end, key = -1, key_end = 0, value = -1, value_end = 0, lo, hi;
            if (!ex_field(b, &at, stop, &tag, &entry, &entry_end) || tag != 0x0A) return 0;
            while (entry < entry_end) {
                if (!ex_field(b, &entry, entry_end, &tag, &lo, &hi)) return 0;
                if (tag == 0x0A && key < 0) { key = lo; key_end = hi; }
                else if (tag == 0x12 && value < 0) { value = lo; value_end = hi; }
                else return 0; /* a key or value given twice, or another field */
            }
            const uint8_t *kp = key < 0 ? (const uint8_t *)"" : b + key;
            /* a writer's records put their features in one order: the one that followed ``prev`` last */
            Py_ssize_t kn = key < 0 ? 0 : key_end - key, f = next[prev];
            if (f < 0 || names[f].n != kn || !ex_same(names[f].p, kp, kn)) {
                f = ex_lookup(names, k, kp, kn);
                if (f < 0) continue; /* a feature outside the schema (--extra-fields ignore never keeps one) */
                next[prev] = f;
            }
            prev = f;
            if (lengths[f] >= 0) return 0; /* the key given twice: the decoder keeps the last */
            int64_t count = 0;
            if (value >= 0) {
                int lists = 0;
                while (value < value_end) {
                    if (!ex_field(b, &value, value_end, &tag, &lo, &hi) || lists++) return 0;
                    if (tag != 0x0A && tag != 0x12 && tag != 0x1A) return 0;
                    if (tag != list_tag[kinds[f]]) { /* another kind: only as an empty list */
                        if (hi > lo) return 0;
                        continue;
                    }
                    int ok = ex_values(b, tag, lo, hi, col + 2 * f, col + 2 * f + 1, &count, kinds[f] == 3,
                                       acc && (kinds[f] == 1 || kinds[f] == 2) ? acc + f : NULL,
                                       pending);
                    if (ok != 1) return ok;
                }
            }
            lengths[f] = count;
        }
    }
    return 1;
}

static PyObject *py_example_columns(PyObject *self, PyObject *args) {
    Py_buffer blob, ends_buf, kinds_buf, bounds_buf = {0};
    PyObject *names_obj, *bounds_obj = Py_None, *result = NULL;
    double inv_log = 0.0;
    Py_ssize_t low = 0;
    if (!PyArg_ParseTuple(args, "y*y*O!y*|Odn", &blob, &ends_buf, &PyTuple_Type, &names_obj, &kinds_buf, &bounds_obj,
                          &inv_log, &low)) return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(names_obj), n = ends_buf.len / 8;
    const uint64_t *ends = ends_buf.buf;
    const uint8_t *kinds = kinds_buf.buf, *b = blob.buf;
    ExName *names = NULL;
    Py_ssize_t *next = NULL; /* by feature read last (k: none yet), the feature that followed it */
    ExPending pending = {0};
    JBuf *col = NULL;
    ExAcc *acc = NULL;
    ExBounds table = {NULL, 0, inv_log, (double)low, NULL};
    PyObject *lengths_obj = NULL;
    int ok = 1;
    if (bounds_obj != Py_None) {
        if (PyObject_GetBuffer(bounds_obj, &bounds_buf, PyBUF_SIMPLE) < 0) goto done;
        if (bounds_buf.len < 16 || bounds_buf.len % 8 || !(inv_log > 0.0)) {
            PyErr_SetString(PyExc_ValueError, "example_columns: float64 bounds (two or more), inv_log > 0");
            goto done;
        }
        table.bounds = bounds_buf.buf;
        table.top = bounds_buf.len / 8 - 1;
        table.slice = ex_slices(&table);
    }
    if (kinds_buf.len != k || ends_buf.len % 8) {
        PyErr_SetString(PyExc_ValueError, "example_columns: one kind per name, uint64 ends");
        goto done;
    }
    names = PyMem_Calloc((size_t)k + 1, sizeof(ExName));
    next = PyMem_Malloc(((size_t)k + 1) * sizeof(Py_ssize_t));
    col = PyMem_Calloc((size_t)(2 * k + 1), sizeof(JBuf));
    acc = table.bounds ? PyMem_Calloc((size_t)k + 1, sizeof(ExAcc)) : NULL;
    lengths_obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(8 * k * n));
    if (!names || !next || !col || !lengths_obj || (table.bounds && !acc)) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t f = 0; f <= k; f++) next[f] = -1;
    for (Py_ssize_t f = 0; f < k; f++) {
        PyObject *name = PyTuple_GET_ITEM(names_obj, f);
        if (!PyBytes_Check(name) || kinds[f] > 3) {
            PyErr_SetString(PyExc_ValueError, "example_columns: names are bytes, kinds 0, 1, 2 or 3");
            goto done;
        }
        names[f].p = (const uint8_t *)PyBytes_AS_STRING(name);
        names[f].n = PyBytes_GET_SIZE(name);
        if (f && ex_cmp(names[f - 1].p, names[f - 1].n, names[f].p, names[f].n) >= 0) {
            PyErr_SetString(PyExc_ValueError, "example_columns: names not in strictly ascending order");
            goto done;
        }
        if (acc && (kinds[f] == 1 || kinds[f] == 2)) { /* summed as read: no column */
            acc[f].table = &table;
            acc[f].kind = kinds[f];
            if (kinds[f] == 1) {
                acc[f].fsum = PyMem_Calloc(256, sizeof(int64_t));
                acc[f].fsq = PyMem_Calloc(2 * 256, sizeof(uint64_t));
                if (!acc[f].fsum || !acc[f].fsq) { ok = -1; break; }
            }
            continue;
        }
        if (jbuf_reserve(col + 2 * f, kinds[f] == 1 ? 4 * n : 8 * n) < 0) { ok = -1; break; } /* a value each */
        if (!kinds[f] || kinds[f] == 3) { /* string offsets start with 0 */
            if (jbuf_reserve(col + 2 * f + 1, 8 * (n + 1)) < 0) { ok = -1; break; }
            memset(JBUF_END(col + 2 * f + 1), 0, 8);
            col[2 * f + 1].len = 8;
        }
    }
    int64_t *lengths = (int64_t *)PyBytes_AS_STRING(lengths_obj);
    if (ok == 1) {
        Py_BEGIN_ALLOW_THREADS /* the walk: the GIL only to grow a column (ex_reserve) */
        for (Py_ssize_t i = 0; i < k * n; i++) lengths[i] = -1;
        uint64_t prev = 0;
        for (Py_ssize_t r = 0; r < n && ok == 1; prev = ends[r], r++) {
            if (ends[r] < prev + 16 || ends[r] > (uint64_t)blob.len) { ok = 0; break; }
            ok = ex_record(b, (Py_ssize_t)prev + 12, (Py_ssize_t)ends[r] - 4, names, kinds, k, col, lengths + r * k,
                           next, acc, &pending);
        }
        if (ok == 1 && ex_count_pending(&pending) < 0) ok = -1;
        Py_END_ALLOW_THREADS
    }
    if (ok < 0) { if (!PyErr_Occurred()) PyErr_NoMemory(); goto done; }
    if (!ok) { result = Py_None; Py_INCREF(result); goto done; }
    PyObject *columns = PyList_New(k);
    if (!columns) goto done;
    for (Py_ssize_t f = 0; f < k; f++) {
        PyObject *item;
        if (acc && (kinds[f] == 1 || kinds[f] == 2)) {
            item = ex_acc_result(acc + f);
        } else {
            item = jbuf_take(col + 2 * f);
            if (item && (!kinds[f] || kinds[f] == 3)) {
                PyObject *offs = jbuf_take(col + 2 * f + 1);
                item = offs ? Py_BuildValue("(NN)", item, offs) : (Py_DECREF(item), NULL);
            }
        }
        if (!item) { Py_DECREF(columns); goto done; }
        PyList_SET_ITEM(columns, f, item);
    }
    result = Py_BuildValue("(ON)", lengths_obj, columns);
done:
    if (col)
        for (Py_ssize_t f = 0; f < 2 * k; f++) Py_XDECREF(col[f].obj);
    if (acc)
        for (Py_ssize_t f = 0; f < k; f++) ex_acc_free(acc + f);
    PyMem_Free(acc);
    PyMem_Free(col);
    PyMem_Free(names);
    PyMem_Free(next);
    Py_XDECREF(lengths_obj);
    if (bounds_buf.obj) PyBuffer_Release(&bounds_buf);
    PyBuffer_Release(&blob);
    PyBuffer_Release(&ends_buf);
    PyBuffer_Release(&kinds_buf);
    return result;
}

/* sum_numbers(values, kind, bounds, inv_log, low) -> the sums of ``ex_acc_result`` of a column of
 * number values (kind 1: float32, 2: int64, native order), as example_columns sums a feature's
 * values while it reads them (the column-wise readers' batches: shardprep.stats_columns.add). */
static PyObject *py_sum_numbers(PyObject *self, PyObject *args) {
    Py_buffer vals, bounds;
    int kind;
    double inv_log;
    Py_ssize_t low;
    if (!PyArg_ParseTuple(args, "y*iy*dn", &vals, &kind, &bounds, &inv_log, &low)) return NULL;
    PyObject *result = NULL;
    ExBounds table = {bounds.buf, bounds.len / 8 - 1, inv_log, (double)low, NULL};
    ExAcc a;
    memset(&a, 0, sizeof a);
    a.table = &table;
    a.kind = kind;
    if ((kind != 1 && kind != 2) || vals.len % (kind == 1 ? 4 : 8) || bounds.len < 16 || bounds.len % 8 ||
        !(inv_log > 0.0)) {
        PyErr_SetString(PyExc_ValueError, "sum_numbers: kind 1 (float32) or 2 (int64), float64 bounds, inv_log > 0");
        goto done;
    }
    table.slice = ex_slices(&table);
    if (kind == 1) {
        a.fsum = PyMem_Calloc(256, sizeof(int64_t));
        a.fsq = PyMem_Calloc(2 * 256, sizeof(uint64_t));
        if (!a.fsum || !a.fsq) { PyErr_NoMemory(); goto done; }
    }
    ExPending pending = {0};
    ExSums sums = {0}; /* summed in registers, then stored */
    const uint8_t *p = vals.buf;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0, n = vals.len / (kind == 1 ? 4 : 8); i < n && ok; i++) {
        double x;
        if (kind == 1) {
            uint32_t bits;
            memcpy(&bits, p + 4 * i, 4);
            x = ex_sum_float(&sums, a.fsum, a.fsq, bits);
        } else {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            x = ex_sum_int(&sums, v);
        }
        ok = ex_pend(&pending, &a, x) == 0;
    }
    a.sums = sums;
    ok = ok && ex_count_pending(&pending) == 0;
    Py_END_ALLOW_THREADS
    if (!ok) { PyErr_NoMemory(); goto done; }
    result = ex_acc_result(&a);
done:
    ex_acc_free(&a);
    PyBuffer_Release(&vals);
    PyBuffer_Release(&bounds);
    return result;
}

/* The distinct-count sketch's hash of one value: the length and seed mixed in first; a value of 32
 * bytes or more then runs its 32-byte blocks through four independent lanes (xxHash64's round: a
 * text's bytes at several GB/s, not one dependent finalizer per word), folded in one by one; then each
 * 8-byte little-endian word left (the last one zero-padded, always taken) through fmix64 (MurmurHash3's
 * finalizer, a bijection with full avalanche): ~5 ns for a short id, a quarter of BLAKE2b's. */
#define XXH_P1 0x9E3779B185EBCA87ULL
#define XXH_P2 0xC2B2AE3D27D4EB4FULL
static inline uint64_t xxh_round(uint64_t acc, uint64_t w) {
    acc += w * XXH_P2;
    return ((acc << 31) | (acc >> 33)) * XXH_P1;
}

static uint64_t value_hash(const uint8_t *p, size_t n, uint64_t seed) {
    uint64_t h = fmix64(seed ^ 0x9E3779B97F4A7C15ULL ^ (uint64_t)n);
    if (n >= 32) {
        uint64_t v0 = h + XXH_P1 + XXH_P2, v1 = h + XXH_P2, v2 = h, v3 = h - XXH_P1;
        for (; n >= 32; p += 32, n -= 32) {
            v0 = xxh_round(v0, le64(p));
            v1 = xxh_round(v1, le64(p + 8));
            v2 = xxh_round(v2, le64(p + 16));
            v3 = xxh_round(v3, le64(p + 24));
        }
        h = fmix64(fmix64(fmix64(fmix64(h ^ v0) ^ v1) ^ v2) ^ v3);
    }
    for (; n >= 8; p += 8, n -= 8) h = fmix64(h ^ le64(p));
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
    return fmix64(h ^ w);
}

/* hash_values(data, offsets, seed) -> bytes: ``value_hash`` of each value data[offsets[i]:offsets[i + 1]]
 * (int64 offsets), as uint64. */
static PyObject *py_hash_values(PyObject *self, PyObject *args) {
    Py_buffer data, offs;
    long long seed;
    if (!PyArg_ParseTuple(args, "y*y*L", &data, &offs, &seed)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = offs.len / 8 - 1;
    const int64_t *o = offs.buf;
    int bad = offs.len % 8 || n < 0;
    for (Py_ssize_t i = 0; i < n && !bad; i++)
        if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > data.len) bad = 1;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "hash_values: offsets not rising within the data");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, 8 * n);
    if (!out) goto done;
    uint64_t *w = (uint64_t *)PyBytes_AS_STRING(out);
    const uint8_t *base = data.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) w[i] = value_hash(base + o[i], (size_t)(o[i + 1] - o[i]), (uint64_t)seed);
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    return out;
}

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "CRC-32C of bytes (unmasked)."},
    {"line_counts", py_line_counts, METH_VARARGS, "Quote and newline bytes among a buffer's first n."},
    {"blake2b8", py_blake2b8, METH_VARARGS, "blake2b(data, digest_size=8, key=seed as 8 LE bytes) as a LE int."},
    {"split_indices", py_split_indices, METH_VARARGS, "Split index of each record of a blob."},
    {"scan", py_scan, METH_VARARGS, "Whole TFRecord frames of a buffer, with status."},
    {"conforms", py_conforms, METH_VARARGS, "Whether Example bytes conform to the spec."},
    {"gather", py_gather, METH_VARARGS, "Records of a packed batch, in a given order."},
    {"scatter", py_scatter, METH_VARARGS, "Pieces of one buffer, each to its place in another."},
    {"interleave", py_interleave, METH_VARARGS, "Records built from one piece of every column each."},
    {"pread_records", py_pread_records, METH_VARARGS, "Byte ranges of an open file, back to back (pread)."},
    {"fill_data_crcs", py_fill_data_crcs, METH_VARARGS, "Writes each framed record's masked data CRC in place."},
    {"jsonl_columns", py_jsonl_columns, METH_VARARGS, "Columns of a block of JSON Lines, or None."},
    {"decode_example", py_decode_example, METH_VARARGS, "A tf.train.Example as {name: [values]}, or None."},
    {"example_columns", py_example_columns, METH_VARARGS, "Per-feature values and lengths of a framed batch, or None."},
    {"sum_numbers", py_sum_numbers, METH_VARARGS, "The count, min, max, exact sums and bucket counts of a number column."},
    {"hash_values", py_hash_values, METH_VARARGS, "The sketch hash of each value of (data, offsets), as uint64 bytes."},
    {"feistel", py_feistel, METH_VARARGS, "The keyed permutation of [0, n), or its inverse, in place."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "shardprep's compiled hot path", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    uint16_t one = 1;
    little_endian = *(uint8_t *)&one == 1;
    crc_init();
    for (int j = 0; j < 256; j++) ex_ln_table[j] = log(1.0 + j / 256.0);
    if (!ex_spare_lock && !(ex_spare_lock = PyThread_allocate_lock())) return PyErr_NoMemory();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    use_hw = __builtin_cpu_supports("sse4.2");
#endif
    return PyModule_Create(&module);
}
