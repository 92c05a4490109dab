/* Line files: the quote and newline bytes of a block (cutting CSV and JSON Lines), and a block of JSON
 * Lines -> columns of scalar features (formats/jsonl_block.py).
 *
 * A strict, conservative reader: it takes a line only when it is provably what the per-line path
 * (orjson, or json) reads the same way: one JSON object per line, valid UTF-8, every schema field
 * once, each of the type its column takes as is (float32: a number; int64: an integer literal in
 * range; string: a string), other keys only when ignored (their values validated, depth <= 64).
 * Anything else (a bad line, a key given twice, ignored or not, a nested ignored object of two or
 * more keys, NaN, a lone surrogate, a line over the record
 * limit, ...) and the whole block is declined (None): the per-line path decides it.
 * Tests: tests/shardprep/native/test_jsonl.py (against the per-line path), tests/shardprep/native/test_layout.py
 * (line_counts). */
#include "native.h"

/* The '"' (when quotes) and '\n' bytes among the first n bytes of a buffer, in one pass (vectorised at -O3). */
PyObject *py_line_counts(PyObject *self, PyObject *args) {
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
PyObject *py_jsonl_columns(PyObject *self, PyObject *args) {
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
