/* shardprep's compiled hot path, the extension module shardprep.native._native: what its files share.
 *
 * One file per concern, compiled together into the one module (setup.py lists them):
 *   crc32c.c   CRC-32C and the framed records' data CRCs
 *   blake2b.c  keyed BLAKE2b, the split hash, and a batch's split indices
 *   scan.c     TFRecord frames of a buffer and whether each Example conforms to the schema
 *   gather.c   records moved: gathered, scattered, interleaved from columns, read with pread(2)
 *   jsonl.c    line files: quote and newline counts; a block of JSON Lines -> columns
 *   feistel.c  the shuffle's keyed permutation
 *   example.c  a tf.train.Example -> {name: [values]}
 *   columns.c  a batch of Examples -> per-feature columns, number features summed as read
 *   stats.c    those sums (stats.h: their per-value steps), sum_numbers, the sketch hash
 *   minhash.c  MinHash signatures of a batch of texts (word shingles, the sketch hash's words)
 *   module.c   the Python method table and the module's initialisation
 * wire.h is the one reader of the protobuf wire format, which scan.c, example.c and columns.c call.
 *
 * Every Python function has an exactly equivalent pure-Python twin in shardprep/native/fallback.py;
 * the tests that hold the two to it are named in each file. No numpy headers: arrays go in and out
 * as buffers, so the extension builds with a C compiler alone.
 */
#ifndef SHARDPREP_NATIVE_H
#define SHARDPREP_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Functions shared between the files: bound inside the module, never exported from it. */
#if defined(__GNUC__) || defined(__clang__)
#define NATIVE_INTERNAL __attribute__((visibility("hidden")))
#else
#define NATIVE_INTERNAL
#endif

extern NATIVE_INTERNAL int native_little_endian; /* set by the module's initialisation */

static inline uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* MurmurHash3's 64-bit finalizer: a bijection with full avalanche (feistel.c, the sketch hash). */
static inline uint64_t fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    return x ^ (x >> 33);
}

/* crc32c.c */
NATIVE_INTERNAL void crc32c_init(void);
NATIVE_INTERNAL uint32_t crc32c(uint32_t crc, const uint8_t *p, size_t n);

static inline uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

/* stats.c: its tables and lock; -1 (a Python error set) when they cannot be made. */
NATIVE_INTERNAL int stats_init(void);

/* A bytes object grown in place and cut to ``len`` when taken: no copy out (jsonl.c, columns.c). */
typedef struct {
    PyObject *obj;
    Py_ssize_t len, cap;
} JBuf;

/* Room for ``more`` bytes after ``len``: 0, or -1 (a Python error set) without memory. With the GIL. */
NATIVE_INTERNAL int jbuf_grow(JBuf *b, Py_ssize_t more);

static inline int jbuf_reserve(JBuf *b, Py_ssize_t more) {
    return b->obj && b->len + more <= b->cap ? 0 : jbuf_grow(b, more);
}

#define JBUF_END(b) ((uint8_t *)PyBytes_AS_STRING((b)->obj) + (b)->len)

/* The bytes, cut to ``len`` (an empty bytes object when none were reserved); the buffer is left empty. */
NATIVE_INTERNAL PyObject *jbuf_take(JBuf *b);

/* The module's Python functions (module.c's table), by file. */
#define NATIVE_FUNCTION(name) NATIVE_INTERNAL PyObject *name(PyObject *self, PyObject *args)
NATIVE_FUNCTION(py_crc32c);
NATIVE_FUNCTION(py_fill_data_crcs);
NATIVE_FUNCTION(py_blake2b8);
NATIVE_FUNCTION(py_split_indices);
NATIVE_FUNCTION(py_scan);
NATIVE_FUNCTION(py_conforms);
NATIVE_FUNCTION(py_gather);
NATIVE_FUNCTION(py_scatter);
NATIVE_FUNCTION(py_interleave);
NATIVE_FUNCTION(py_pread_records);
NATIVE_FUNCTION(py_line_counts);
NATIVE_FUNCTION(py_jsonl_columns);
NATIVE_FUNCTION(py_feistel);
NATIVE_FUNCTION(py_decode_example);
NATIVE_FUNCTION(py_example_columns);
NATIVE_FUNCTION(py_sum_numbers);
NATIVE_FUNCTION(py_hash_values);
NATIVE_FUNCTION(py_minhash);

#endif
