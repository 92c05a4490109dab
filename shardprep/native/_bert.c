/* BERT's pre-training instances of one (document, copy), encoded: the compiled twin of
 * shardprep.text.pretraining's create_instances followed by shardprep.text.encode's InstanceEncoder.
 *
 * Python's random.Random is reproduced exactly (MT19937 seeded by init_by_array from the seed's
 * 32-bit words; random() = genrand_res53; getrandbits(k <= 32) = the next word >> (32 - k);
 * _randbelow by rejection on n.bit_length() bits; randint; shuffle), so the same draws give the same
 * instances in the same order and the same Example bytes (tests/shardprep/text/test_encode.py
 * compares them on many documents and configurations). Tokens are int64 ids.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- Python's Mersenne Twister (Modules/_randommodule.c) ---- */

#define MT_N 624
#define MT_M 397

typedef struct {
    uint32_t state[MT_N];
    int index;
} MT;

static void mt_init_genrand(MT *mt, uint32_t s) {
    mt->state[0] = s;
    for (int i = 1; i < MT_N; i++)
        mt->state[i] = 1812433253u * (mt->state[i - 1] ^ (mt->state[i - 1] >> 30)) + (uint32_t)i;
    mt->index = MT_N;
}

static void mt_init_by_array(MT *mt, const uint32_t *key, size_t key_length) {
    uint32_t *s = mt->state;
    mt_init_genrand(mt, 19650218u);
    size_t i = 1, j = 0, k = MT_N > key_length ? MT_N : key_length;
    for (; k; k--) {
        s[i] = (s[i] ^ ((s[i - 1] ^ (s[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) {
            s[0] = s[MT_N - 1];
            i = 1;
        }
        if (j >= key_length) j = 0;
    }
    for (k = MT_N - 1; k; k--) {
        s[i] = (s[i] ^ ((s[i - 1] ^ (s[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= MT_N) {
            s[0] = s[MT_N - 1];
            i = 1;
        }
    }
    s[0] = 0x80000000u;
}

static uint32_t mt_next(MT *mt) {
    static const uint32_t mag01[2] = {0x0u, 0x9908b0dfu};
    uint32_t y, *s = mt->state;
    if (mt->index >= MT_N) {
        int kk;
        for (kk = 0; kk < MT_N - MT_M; kk++) {
            y = (s[kk] & 0x80000000u) | (s[kk + 1] & 0x7fffffffu);
            s[kk] = s[kk + MT_M] ^ (y >> 1) ^ mag01[y & 0x1u];
        }
        for (; kk < MT_N - 1; kk++) {
            y = (s[kk] & 0x80000000u) | (s[kk + 1] & 0x7fffffffu);
            s[kk] = s[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 0x1u];
        }
        y = (s[MT_N - 1] & 0x80000000u) | (s[0] & 0x7fffffffu);
        s[MT_N - 1] = s[MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1u];
        mt->index = 0;
    }
    y = s[mt->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

static double mt_random(MT *mt) {
    uint32_t a = mt_next(mt) >> 5, b = mt_next(mt) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

static uint32_t mt_below(MT *mt, uint32_t n) { /* Random._randbelow_with_getrandbits, n >= 1 */
    int k = 0;
    for (uint32_t v = n; v; v >>= 1) k++;
    uint32_t r = mt_next(mt) >> (32 - k);
    while (r >= n) r = mt_next(mt) >> (32 - k);
    return r;
}

static int64_t mt_randint(MT *mt, int64_t a, int64_t b) { return a + (int64_t)mt_below(mt, (uint32_t)(b - a + 1)); }

/* ---- growable int64 arrays and byte buffers ---- */

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Ids;

static int ids_reserve(Ids *a, Py_ssize_t n) {
    if (n <= a->cap) return 0;
    Py_ssize_t cap = a->cap ? a->cap : 256;
    while (cap < n) cap *= 2;
    int64_t *v = PyMem_Realloc(a->v, (size_t)cap * sizeof(int64_t));
    if (!v) {
        PyErr_NoMemory();
        return -1;
    }
    a->v = v;
    a->cap = cap;
    return 0;
}

static int ids_extend(Ids *a, const int64_t *v, Py_ssize_t n) {
    if (ids_reserve(a, a->n + n) < 0) return -1;
    memcpy(a->v + a->n, v, (size_t)n * sizeof(int64_t));
    a->n += n;
    return 0;
}

typedef struct {
    uint8_t *b;
    Py_ssize_t n, cap;
} Buf;

static int buf_reserve(Buf *o, Py_ssize_t more) {
    if (o->n + more <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap < o->n + more) cap *= 2;
    uint8_t *b = PyMem_Realloc(o->b, (size_t)cap);
    if (!b) {
        PyErr_NoMemory();
        return -1;
    }
    o->b = b;
    o->cap = cap;
    return 0;
}

static int vlen(uint64_t v) {
    int n = 1;
    while (v > 0x7F) {
        v >>= 7;
        n++;
    }
    return n;
}

static void put_varint(Buf *o, uint64_t v) { /* room reserved by the caller */
    while (v > 0x7F) {
        o->b[o->n++] = (uint8_t)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    o->b[o->n++] = (uint8_t)v;
}

static void put(Buf *o, const void *p, Py_ssize_t n) {
    memcpy(o->b + o->n, p, (size_t)n);
    o->n += n;
}

/* text.encode._prefix: a list feature's map entry before its packed values */
static int put_prefix(Buf *o, const char *name, uint8_t tag, uint64_t packed) {
    uint64_t key = strlen(name);
    uint64_t body_hdr = 1 + (uint64_t)vlen(packed);
    uint64_t feature_hdr = 1 + (uint64_t)vlen(body_hdr + packed) + body_hdr;
    uint64_t feature = feature_hdr + packed;
    uint64_t inner = 1 + (uint64_t)vlen(key) + key + 1 + (uint64_t)vlen(feature) + feature;
    if (buf_reserve(o, 64 + (Py_ssize_t)key) < 0) return -1;
    o->b[o->n++] = 0x0A;
    put_varint(o, inner);
    o->b[o->n++] = 0x0A;
    put_varint(o, key);
    put(o, name, (Py_ssize_t)key);
    o->b[o->n++] = 0x12;
    put_varint(o, feature);
    o->b[o->n++] = tag;
    put_varint(o, body_hdr + packed);
    o->b[o->n++] = 0x0A;
    put_varint(o, packed);
    return 0;
}

static int put_ids(Buf *o, const char *name, const int64_t *v, Py_ssize_t k, Py_ssize_t size) {
    uint64_t packed = (uint64_t)(size - k);
    for (Py_ssize_t i = 0; i < k; i++) packed += (uint64_t)vlen((uint64_t)v[i]);
    if (put_prefix(o, name, 0x1A, packed) < 0 || buf_reserve(o, (Py_ssize_t)packed) < 0) return -1;
    for (Py_ssize_t i = 0; i < k; i++) put_varint(o, (uint64_t)v[i]);
    memset(o->b + o->n, 0, (size_t)(size - k));
    o->n += size - k;
    return 0;
}

static int put_bytes_list(Buf *o, const char *name, const int64_t *v, Py_ssize_t k, Py_ssize_t size) {
    /* 0/1 values (input_mask, segment_ids): one byte each */
    if (put_prefix(o, name, 0x1A, (uint64_t)size) < 0 || buf_reserve(o, size) < 0) return -1;
    for (Py_ssize_t i = 0; i < k; i++) o->b[o->n++] = (uint8_t)v[i];
    memset(o->b + o->n, 0, (size_t)(size - k));
    o->n += size - k;
    return 0;
}

/* ---- the algorithm ---- */

typedef struct {
    Py_ssize_t max_seq_length, max_predictions;
    double masked_lm_prob, short_seq_prob;
    int whole_word;
    int64_t vocab_size, cls, sep, mask;
    const uint8_t *continuation; /* per id, or NULL */
    Py_ssize_t continuation_len;
} Config;

typedef struct { /* a document: its sentences' ids */
    Py_ssize_t n;
    Ids *sentences;
} Doc;

static void doc_free(Doc *d) {
    if (!d->sentences) return;
    for (Py_ssize_t i = 0; i < d->n; i++) PyMem_Free(d->sentences[i].v);
    PyMem_Free(d->sentences);
    d->sentences = NULL;
}

/* a text.pretraining.PackedDocument's (int32 ids, int64 sentence ends) into d */
static int doc_from_packed(PyObject *packed, Doc *d) {
    Py_buffer ids = {0}, ends = {0};
    if (!PyArg_ParseTuple(packed, "y*y*", &ids, &ends)) return -1;
    const int32_t *v = ids.buf;
    const int64_t *e = ends.buf;
    int err = 0;
    d->n = ends.len / 8;
    d->sentences = PyMem_Calloc(d->n ? (size_t)d->n : 1, sizeof(Ids));
    if (!d->sentences) {
        PyErr_NoMemory();
        err = 1;
    }
    for (Py_ssize_t i = 0; !err && i < d->n; i++) {
        int64_t a = i ? e[i - 1] : 0, b = e[i];
        if (a > b || b * 4 > ids.len) {
            PyErr_SetString(PyExc_ValueError, "a packed document's ends go back or pass its ids");
            err = 1;
        } else if (ids_reserve(&d->sentences[i], b > a ? (Py_ssize_t)(b - a) : 1) < 0) {
            err = 1;
        } else {
            for (int64_t q = a; q < b; q++) {
                if (v[q] < 0) {
                    PyErr_SetString(PyExc_ValueError, "token ids are non-negative");
                    err = 1;
                    break;
                }
                d->sentences[i].v[q - a] = v[q];
            }
            d->sentences[i].n = (Py_ssize_t)(b - a);
        }
    }
    PyBuffer_Release(&ids);
    PyBuffer_Release(&ends);
    if (err) {
        doc_free(d);
        return -1;
    }
    return 0;
}

static int doc_from(PyObject *obj, Doc *d) {
    PyObject *packed = PyObject_GetAttrString(obj, "packed");
    if (packed) {
        int r = doc_from_packed(packed, d);
        Py_DECREF(packed);
        return r;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    PyObject *seq = PySequence_Fast(obj, "a document is a sequence of sentences");
    if (!seq) return -1;
    d->n = PySequence_Fast_GET_SIZE(seq);
    d->sentences = PyMem_Calloc(d->n ? (size_t)d->n : 1, sizeof(Ids));
    if (!d->sentences) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < d->n; i++) {
        PyObject *s = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i), "a sentence is a sequence of ids");
        if (!s) goto fail;
        Py_ssize_t k = PySequence_Fast_GET_SIZE(s);
        if (ids_reserve(&d->sentences[i], k ? k : 1) < 0) {
            Py_DECREF(s);
            goto fail;
        }
        for (Py_ssize_t j = 0; j < k; j++) {
            long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(s, j));
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(s);
                goto fail;
            }
            if (v < 0) {
                Py_DECREF(s);
                PyErr_SetString(PyExc_ValueError, "token ids are non-negative");
                goto fail;
            }
            d->sentences[i].v[j] = v;
        }
        d->sentences[i].n = k;
        Py_DECREF(s);
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    doc_free(d);
    return -1;
}

typedef struct {
    Py_ssize_t pos;
    int64_t label;
} Masked;

static int masked_cmp(const void *a, const void *b) {
    Py_ssize_t x = ((const Masked *)a)->pos, y = ((const Masked *)b)->pos;
    return (x > y) - (x < y);
}

typedef struct { /* scratch reused across instances */
    Ids tokens, segments, output, a, b, positions, labels, cand_pos, cand_off;
    Py_ssize_t *order;
    Py_ssize_t order_cap;
    uint8_t *covered;
    Py_ssize_t covered_cap;
    Masked *masked;
    Py_ssize_t masked_cap;
    Buf body, out;
} Scratch;

static void scratch_free(Scratch *s) {
    Ids *all[] = {&s->tokens, &s->segments, &s->output, &s->a, &s->b, &s->positions, &s->labels, &s->cand_pos,
                  &s->cand_off};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) PyMem_Free(all[i]->v);
    PyMem_Free(s->order);
    PyMem_Free(s->covered);
    PyMem_Free(s->masked);
    PyMem_Free(s->body.b);
    PyMem_Free(s->out.b);
}

static int grow(void **p, Py_ssize_t *cap, Py_ssize_t n, size_t size) {
    if (n <= *cap) return 0;
    Py_ssize_t c = *cap ? *cap : 256;
    while (c < n) c *= 2;
    void *q = PyMem_Realloc(*p, (size_t)c * size);
    if (!q) {
        PyErr_NoMemory();
        return -1;
    }
    *p = q;
    *cap = c;
    return 0;
}

/* BERT's create_masked_lm_predictions over s->tokens into s->output, s->positions, s->labels */
static int mask_tokens(Scratch *s, const Config *c, MT *mt) {
    Py_ssize_t n = s->tokens.n;
    const int64_t *t = s->tokens.v;
    /* candidate groups: group g holds the positions cand_pos[cand_off[g] .. cand_off[g + 1]) (a continuation
     * joins the group before it, even across [SEP], as BERT's cand_indexes[-1].append does) */
    s->cand_pos.n = s->cand_off.n = 0;
    if (ids_reserve(&s->cand_pos, n) < 0 || ids_reserve(&s->cand_off, n + 1) < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (t[i] == c->cls || t[i] == c->sep) continue;
        int cont = c->whole_word && s->cand_off.n && t[i] < c->continuation_len && c->continuation[t[i]];
        if (!cont) s->cand_off.v[s->cand_off.n++] = s->cand_pos.n;
        s->cand_pos.v[s->cand_pos.n++] = i;
    }
    Py_ssize_t m = s->cand_off.n;
    s->cand_off.v[m] = s->cand_pos.n;
    if (grow((void **)&s->order, &s->order_cap, m ? m : 1, sizeof(Py_ssize_t)) < 0) return -1;
    for (Py_ssize_t i = 0; i < m; i++) s->order[i] = i;
    for (Py_ssize_t i = m - 1; i >= 1; i--) { /* Random.shuffle */
        Py_ssize_t j = (Py_ssize_t)mt_below(mt, (uint32_t)(i + 1));
        Py_ssize_t x = s->order[i];
        s->order[i] = s->order[j];
        s->order[j] = x;
    }
    s->output.n = 0;
    if (ids_extend(&s->output, t, n) < 0) return -1;
    double want = rint((double)n * c->masked_lm_prob); /* Python's round: half to even */
    Py_ssize_t num = (Py_ssize_t)(want < 1 ? 1 : want);
    if (num > c->max_predictions) num = c->max_predictions;
    if (grow((void **)&s->covered, &s->covered_cap, n, 1) < 0 ||
        grow((void **)&s->masked, &s->masked_cap, num + 1, sizeof(Masked)) < 0)
        return -1;
    memset(s->covered, 0, (size_t)n);
    Py_ssize_t got = 0;
    for (Py_ssize_t g = 0; g < m; g++) {
        if (got >= num) break;
        const int64_t *group = s->cand_pos.v + s->cand_off.v[s->order[g]];
        Py_ssize_t len = (Py_ssize_t)(s->cand_off.v[s->order[g] + 1] - s->cand_off.v[s->order[g]]);
        if (got + len > num) continue;
        int any = 0;
        for (Py_ssize_t q = 0; q < len; q++) any |= s->covered[group[q]];
        if (any) continue;
        for (Py_ssize_t q = 0; q < len; q++) {
            Py_ssize_t i = (Py_ssize_t)group[q];
            s->covered[i] = 1;
            int64_t v;
            if (mt_random(mt) < 0.8) v = c->mask;
            else if (mt_random(mt) < 0.5) v = t[i];
            else v = mt_randint(mt, 0, c->vocab_size - 1);
            s->output.v[i] = v;
            s->masked[got].pos = i;
            s->masked[got].label = t[i];
            got++;
        }
    }
    qsort(s->masked, (size_t)got, sizeof(Masked), masked_cmp);
    s->positions.n = s->labels.n = 0;
    if (ids_reserve(&s->positions, got ? got : 1) < 0 || ids_reserve(&s->labels, got ? got : 1) < 0) return -1;
    for (Py_ssize_t i = 0; i < got; i++) {
        s->positions.v[i] = s->masked[i].pos;
        s->labels.v[i] = s->masked[i].label;
    }
    s->positions.n = s->labels.n = got;
    return 0;
}

/* the instance's Example, as text.encode.InstanceEncoder writes it, appended to a new bytes object */
static PyObject *encode(Scratch *s, const Config *c, int is_random) {
    Py_ssize_t k = s->output.n, m = s->positions.n, n = c->max_seq_length, p = c->max_predictions;
    if (k > n || m > p) {
        PyErr_Format(PyExc_ValueError, "the instance holds %zd tokens and %zd predictions: more than %zd and %zd", k, m,
                     n, p);
        return NULL;
    }
    Buf *b = &s->body;
    b->n = 0;
    if (put_ids(b, "input_ids", s->output.v, k, n) < 0) return NULL;
    if (put_prefix(b, "input_mask", 0x1A, (uint64_t)n) < 0 || buf_reserve(b, n) < 0) return NULL;
    memset(b->b + b->n, 1, (size_t)k);
    memset(b->b + b->n + k, 0, (size_t)(n - k));
    b->n += n;
    if (put_ids(b, "masked_lm_ids", s->labels.v, m, p) < 0) return NULL;
    if (put_ids(b, "masked_lm_positions", s->positions.v, m, p) < 0) return NULL;
    if (put_prefix(b, "masked_lm_weights", 0x12, (uint64_t)(4 * p)) < 0 || buf_reserve(b, 4 * p) < 0) return NULL;
    for (Py_ssize_t i = 0; i < p; i++) {
        float w = i < m ? 1.0f : 0.0f;
        uint8_t le[4];
        memcpy(le, &w, 4); /* little-endian hosts (as _native.c's CRC) */
        put(b, le, 4);
    }
    if (put_prefix(b, "next_sentence_labels", 0x1A, 1) < 0 || buf_reserve(b, 1) < 0) return NULL;
    b->b[b->n++] = (uint8_t)is_random;
    if (put_bytes_list(b, "segment_ids", s->segments.v, k, n) < 0) return NULL;
    Buf *o = &s->out;
    o->n = 0;
    if (buf_reserve(o, b->n + 11) < 0) return NULL;
    o->b[o->n++] = 0x0A;
    put_varint(o, (uint64_t)b->n);
    put(o, b->b, b->n);
    return PyBytes_FromStringAndSize((const char *)o->b, o->n);
}

static int truncate_pair(Scratch *s, Py_ssize_t max_num_tokens, MT *mt, Py_ssize_t *a0, Py_ssize_t *a1,
                         Py_ssize_t *b0, Py_ssize_t *b1) {
    *a0 = 0, *a1 = s->a.n, *b0 = 0, *b1 = s->b.n;
    while ((*a1 - *a0) + (*b1 - *b0) > max_num_tokens) {
        if (*a1 - *a0 > *b1 - *b0) {
            if (mt_random(mt) < 0.5) (*a0)++;
            else (*a1)--;
        } else if (mt_random(mt) < 0.5) (*b0)++;
        else (*b1)--;
    }
    return 0;
}

/* appends sentence ids of a Python sequence to a */
static int ids_extend_from(Ids *a, PyObject *sentence) {
    PyObject *seq = PySequence_Fast(sentence, "a sentence is a sequence of ids");
    if (!seq) return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    if (ids_reserve(a, a->n + k) < 0) {
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, j));
        if (v < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "token ids are non-negative");
            Py_DECREF(seq);
            return -1;
        }
        a->v[a->n++] = v;
    }
    Py_DECREF(seq);
    return 0;
}

/* the random next segment: sentences of random_document(copy, made) from a random start, only those read */
/* the random next segment: sentences of random_document(copy, made) from a random start, only those read
 * (the document is any sequence: text.pretraining.LazyDocument tokenizes a sentence when it is read) */
static int random_segment(Scratch *s, PyObject *random_document, Py_ssize_t copy, Py_ssize_t made,
                          Py_ssize_t target_b, MT *mt) {
    PyObject *o = PyObject_CallFunction(random_document, "nn", copy, made);
    if (!o) return -1;
    PyObject *packed = PyObject_GetAttrString(o, "packed");
    if (packed) { /* text.pretraining.PackedDocument: (int32 ids, int64 sentence ends) */
        Py_buffer ids = {0}, ends = {0};
        int ok = PyArg_ParseTuple(packed, "y*y*", &ids, &ends);
        Py_DECREF(packed);
        Py_DECREF(o);
        if (!ok) return -1;
        Py_ssize_t n = ends.len / 8, done = 0;
        const int32_t *v = ids.buf;
        const int64_t *e = ends.buf;
        int err = 0;
        if (n == 0 || e[n - 1] * 4 > ids.len) {
            PyErr_SetString(PyExc_ValueError, n ? "a packed document's ends pass its ids" :
                                                  "random_document gave an empty document");
            err = 1;
        } else {
            Py_ssize_t start = (Py_ssize_t)mt_randint(mt, 0, n - 1);
            for (Py_ssize_t j = start; j < n && !done; j++) {
                int64_t a = j ? e[j - 1] : 0, b = e[j];
                if (a > b || ids_reserve(&s->b, s->b.n + (Py_ssize_t)(b - a)) < 0) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a packed document's ends go back");
                    err = 1;
                    break;
                }
                for (int64_t q = a; q < b; q++) s->b.v[s->b.n++] = v[q];
                done = s->b.n >= target_b;
            }
        }
        PyBuffer_Release(&ids);
        PyBuffer_Release(&ends);
        return err ? -1 : 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
        Py_DECREF(o);
        return -1;
    }
    PyErr_Clear();
    Py_ssize_t n = PySequence_Size(o);
    if (n <= 0) {
        if (n == 0) PyErr_SetString(PyExc_ValueError, "random_document gave an empty document");
        Py_DECREF(o);
        return -1;
    }
    Py_ssize_t start = (Py_ssize_t)mt_randint(mt, 0, n - 1);
    for (Py_ssize_t j = start; j < n; j++) {
        PyObject *sentence = PySequence_GetItem(o, j);
        int bad = !sentence || ids_extend_from(&s->b, sentence) < 0;
        Py_XDECREF(sentence);
        if (bad) {
            Py_DECREF(o);
            return -1;
        }
        if (s->b.n >= target_b) break;
    }
    Py_DECREF(o);
    return 0;
}

/* create_instances_from_document for one copy, seeded by key; the Examples appended to out */
static int one_copy(const Doc *doc, const Config *cfg, const uint8_t *key, Py_ssize_t key_len, PyObject *random_document,
                    Py_ssize_t copy, Scratch *sp, PyObject *out) {
    const Config c = *cfg;
    MT mt;
    if (key_len % 4 || key_len == 0 || key_len > 256) {
        PyErr_SetString(PyExc_ValueError, "the seed key is 4 to 256 bytes, whole 32-bit words");
        return -1;
    }
    { /* random.Random(int.from_bytes(key, "little")): its words, high zero words left out */
        uint32_t words[64];
        size_t nw = (size_t)key_len / 4;
        memcpy(words, key, (size_t)key_len);
        while (nw > 1 && words[nw - 1] == 0) nw--;
        mt_init_by_array(&mt, words, nw);
    }
    Py_ssize_t max_num_tokens = c.max_seq_length - 3, target = max_num_tokens;
    if (mt_random(&mt) < c.short_seq_prob) target = (Py_ssize_t)mt_randint(&mt, 2, max_num_tokens);
    Py_ssize_t chunk_start = 0, chunk_len = 0, current = 0, made = 0;
    for (Py_ssize_t i = 0; i < doc->n; i++) {
        if (chunk_len == 0) chunk_start = i;
        chunk_len++;
        current += doc->sentences[i].n;
        if (!(i == doc->n - 1 || current >= target)) continue;
        Py_ssize_t a_end = 1;
        if (chunk_len >= 2) a_end = (Py_ssize_t)mt_randint(&mt, 1, chunk_len - 1);
        sp->a.n = sp->b.n = 0;
        for (Py_ssize_t j = 0; j < a_end; j++)
            if (ids_extend(&sp->a, doc->sentences[chunk_start + j].v, doc->sentences[chunk_start + j].n) < 0) return -1;
        int is_random;
        if (chunk_len == 1 || mt_random(&mt) < 0.5) {
            is_random = 1;
            if (random_segment(sp, random_document, copy, made, target - sp->a.n, &mt) < 0) return -1;
            i -= chunk_len - a_end; /* the unused segments go back for the next instance */
        } else {
            is_random = 0;
            for (Py_ssize_t j = a_end; j < chunk_len; j++)
                if (ids_extend(&sp->b, doc->sentences[chunk_start + j].v, doc->sentences[chunk_start + j].n) < 0)
                    return -1;
        }
        Py_ssize_t a0, a1, b0, b1;
        truncate_pair(sp, max_num_tokens, &mt, &a0, &a1, &b0, &b1);
        if (a1 <= a0 || b1 <= b0) {
            PyErr_SetString(PyExc_ValueError, "an empty sentence or random document (tokenize with tokenize_document, "
                                              "which leaves empty sentences out)");
            return -1;
        }
        Py_ssize_t la = a1 - a0, lb = b1 - b0, total = la + lb + 3;
        if (ids_reserve(&sp->tokens, total) < 0 || ids_reserve(&sp->segments, total) < 0) return -1;
        int64_t *t = sp->tokens.v, *g = sp->segments.v;
        t[0] = c.cls;
        memcpy(t + 1, sp->a.v + a0, (size_t)la * sizeof(int64_t));
        t[la + 1] = c.sep;
        memcpy(t + la + 2, sp->b.v + b0, (size_t)lb * sizeof(int64_t));
        t[total - 1] = c.sep;
        for (Py_ssize_t j = 0; j < total; j++) g[j] = j < la + 2 ? 0 : 1;
        sp->tokens.n = sp->segments.n = total;
        if (mask_tokens(sp, &c, &mt) < 0) return -1;
        PyObject *example = encode(sp, &c, is_random);
        if (!example) return -1;
        int err = PyList_Append(out, example);
        Py_DECREF(example);
        if (err < 0) return -1;
        made++;
        chunk_len = 0;
        current = 0;
    }
    return 0;
}

static PyObject *instances(PyObject *self, PyObject *args) {
    PyObject *keys, *document, *random_document, *params;
    Py_buffer cont = {0};
    if (!PyArg_ParseTuple(args, "OOOOy*", &keys, &document, &random_document, &params, &cont)) return NULL;
    Config c = {0};
    PyObject *out = NULL, *key_seq = NULL;
    Doc doc = {0};
    Scratch s = {0};
    if (!PyArg_ParseTuple(params, "nnddiLLLL", &c.max_seq_length, &c.max_predictions, &c.masked_lm_prob,
                          &c.short_seq_prob, &c.whole_word, &c.vocab_size, &c.cls, &c.sep, &c.mask))
        goto done;
    c.continuation = cont.buf;
    c.continuation_len = cont.len;
    key_seq = PySequence_Fast(keys, "keys: a sequence of bytes, one per copy");
    if (!key_seq || doc_from(document, &doc) < 0) goto done;
    out = PyList_New(0);
    if (!out || doc.n == 0) goto done;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(key_seq); k++) {
        char *key;
        Py_ssize_t key_len;
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(key_seq, k), &key, &key_len) < 0 ||
            one_copy(&doc, &c, (const uint8_t *)key, key_len, random_document, k, &s, out) < 0) {
            Py_CLEAR(out);
            break;
        }
    }
done:
    Py_XDECREF(key_seq);
    doc_free(&doc);
    scratch_free(&s);
    PyBuffer_Release(&cont);
    return out;
}

static PyMethodDef methods[] = {
    {"instances", instances, METH_VARARGS,
     "instances(keys, document, random_document, params, continuation) -> [Example bytes] of each copy in turn."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bert", "BERT's pre-training instances, compiled", -1,
                                    methods};

PyMODINIT_FUNC PyInit__bert(void) { return PyModule_Create(&module); }
