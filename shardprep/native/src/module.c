/* The module shardprep.native._native: its Python functions (each defined in the file of its concern,
 * native.h), its initialisation, and the growing bytes buffer (JBuf) that jsonl.c and columns.c fill. */
#include "native.h"

int jbuf_grow(JBuf *b, Py_ssize_t more) {
    Py_ssize_t cap = b->cap > 64 ? b->cap : 64; /* small: a wide table's 50,000 columns of a few values each */
    while (cap < b->len + more) cap *= 2;
    if (b->obj ? _PyBytes_Resize(&b->obj, cap) < 0 : !(b->obj = PyBytes_FromStringAndSize(NULL, cap))) return -1;
    b->cap = cap;
    return 0;
}

PyObject *jbuf_take(JBuf *b) {
    PyObject *o = b->obj;
    b->obj = NULL;
    if (!o) return PyBytes_FromStringAndSize("", 0);
    return _PyBytes_Resize(&o, b->len) < 0 ? NULL : o;
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
    {"minhash", py_minhash, METH_VARARGS, "MinHash signatures of a batch of texts, as uint32 bytes."},
    {"feistel", py_feistel, METH_VARARGS, "The keyed permutation of [0, n), or its inverse, in place."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "shardprep's compiled hot path", -1, methods};

int native_little_endian = 1;

PyMODINIT_FUNC PyInit__native(void) {
    uint16_t one = 1;
    native_little_endian = *(uint8_t *)&one == 1;
    crc32c_init();
    if (stats_init() < 0) return NULL;
    return PyModule_Create(&module);
}
