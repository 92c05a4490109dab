/* CRC-32C (Castagnoli): slicing-by-8 tables, the SSE 4.2 instruction where the CPU has it; and the
 * data CRCs of framed TFRecords, written in place.
 * Tests: tests/shardprep/test_framing.py (crc32c against google-crc32c and the Python twin),
 * tests/shardprep/native/test_layout.py (fill_data_crcs). */
#include "native.h"

static uint32_t crc_table[8][256];

static void crc_tables(void) {
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

static int use_hw = 0;

uint32_t crc32c(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef HAVE_HW_CRC
    if (use_hw) return crc_hw(crc, p, n);
#endif
    return native_little_endian ? crc_soft(crc, p, n) : crc_bytewise(crc, p, n);
}

void crc32c_init(void) {
    crc_tables();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    use_hw = __builtin_cpu_supports("sse4.2");
#endif
}

PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    uint32_t c = crc32c(0, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

/* fill_data_crcs(buf, ends): framed TFRecords back to back in the writable ``buf``, record i ending
 * at ends[i] (uint64 buffer); writes each record's masked data CRC into its last 4 bytes. */
PyObject *py_fill_data_crcs(PyObject *self, PyObject *args) {
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
