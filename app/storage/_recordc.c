/* The compiled twin of the record codec's hot loops: the format-2 batch encoder and the column read.

   The Python modules are the reference: record.py's docstring has the record layout, and
   record_encode.py's encode_records and record_columns.py's columns_python give the same bytes and
   columns as encode() and columns() here (the property tests in tests/storage/test_recordc.py hold
   them together). Those two modules choose between the twins.

   encode() handles the batches the store is given (bytes, int queue ids, int flags) and answers
   None for any other input, which record_encode.py then encodes in Python: so every error that is not
   about a limit (a TypeError, struct.error) is Python's own. A record over a limit is answered with
   its index, and record_encode.py raises for it as encode_records does. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SHORT_MAX 0xFE
#define LONG 0xFF
#define HEADER_SIZE 8
#define FRAME 6        /* a short prefix, the CRC and a short suffix */
#define LONG_FRAME 14  /* a long prefix (0xFF, u32), the CRC and a long suffix (u32, 0xFF) */
#define MAX_U16 0xFFFF
#define L_END 0x80
#define L_TAG 0x40
#define L_IDEM 0x20
#define L_MULTI 0x10
#define L_WIDTHS 0x0F

static const int QUEUE_WIDTH[4] = {1, 2, 4, 8};
static const int OFFSET_WIDTH[4] = {2, 3, 4, 8};

/* ------------------------------------------------------------------------------------------ CRC */
/* zlib's CRC-32 (reflected polynomial 0xEDB88320), eight bytes a step ("slicing by 8"). */
static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = crc_table[7][a & 0xFF] ^ crc_table[6][(a >> 8) & 0xFF] ^ crc_table[5][(a >> 16) & 0xFF] ^
              crc_table[4][a >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
              crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL 1
/* The same CRC-32 folded 64 bytes a step with carry-less multiplication (PCLMULQDQ), as in "Fast CRC
   Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Gopal, Ozturk et al., Intel,
   2009) and its bit-reflected constants for this polynomial; 4-5 times the table's speed on a
   page of records. ``state`` is the inverted CRC; n >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(uint32_t state, const unsigned char *p,
                                                                      size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0x00)), x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 0x20)), x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    __m128i x5;
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)state));
    p += 64;
    n -= 64;
    for (; n >= 64; p += 64, n -= 64) {  /* four lanes of 16 bytes, each folded over the next 64 */
        __m128i x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00), x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        __m128i x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k1k2, 0x11), x5), _mm_loadu_si128((const __m128i *)(p + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x2, k1k2, 0x11), x6), _mm_loadu_si128((const __m128i *)(p + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x3, k1k2, 0x11), x7), _mm_loadu_si128((const __m128i *)(p + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x4, k1k2, 0x11), x8), _mm_loadu_si128((const __m128i *)(p + 0x30)));
    }
    /* the four lanes folded into one, then each further 16 bytes */
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), x5);
    for (; n >= 16; p += 16, n -= 16) {
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), _mm_loadu_si128((const __m128i *)p)), x5);
    }
    /* 128 bits to 64, then Barrett's reduction to 32 */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5k0, 0x00), x2);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, mask32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, x2), 1);
}

static int have_clmul;
#endif

static uint32_t crc32_of(uint32_t crc, const unsigned char *p, size_t n) {
#ifdef HAVE_CLMUL
    if (have_clmul && n >= 64) {
        size_t bulk = n & ~(size_t)15;
        crc = ~crc32_clmul(~crc, p, bulk);
        p += bulk;
        n -= bulk;
    }
#endif
    return crc32_update(crc, p, n);
}

/* ------------------------------------------------------------------------------ little-endian */
static inline unsigned char *put(unsigned char *d, uint64_t v, int width) {
    for (int k = 0; k < width; k++)
        d[k] = (unsigned char)(v >> (8 * k));
    return d + width;
}

static inline uint64_t get(const unsigned char *s, int width) {
    uint64_t v = 0;
    for (int k = 0; k < width; k++)
        v |= (uint64_t)s[k] << (8 * k);
    return v;
}

/* ------------------------------------------------------------------------------------- queues */
/* The queues of one batch: next offset and new index entries per queue id, in the order they are
   first placed in (the order of the entries dict encode_records builds). */
typedef struct {
    PyObject *key;      /* the queue id as the caller gave it (a reference held) */
    uint32_t id;
    uint64_t next;      /* the next offset */
    uint64_t *entries;  /* (position + 1, length | tag hash << 32) pairs */
    Py_ssize_t used, cap;  /* in u64 */
    uint64_t added;     /* bytes of the queue's new records */
} Queue;

typedef struct {
    Queue *q;
    Py_ssize_t n, cap;
    Py_ssize_t *slots;  /* open addressing on the id: index + 1 into q, 0 for empty */
    size_t mask;
    Py_ssize_t last;    /* the queue found last: most batches go to one queue */
} Queues;

enum { OK = 0, FAILED = -1, UNSUPPORTED = -2 };

static void queues_free(Queues *qs) {
    for (Py_ssize_t i = 0; i < qs->n; i++) {
        Py_DECREF(qs->q[i].key);
        PyMem_Free(qs->q[i].entries);
    }
    PyMem_Free(qs->q);
    PyMem_Free(qs->slots);
}

static inline size_t hash(uint32_t id, size_t mask) {
    id ^= id >> 16;
    id *= 0x45d9f3bu;
    id ^= id >> 16;
    return id & mask;
}

static int queues_grow(Queues *qs) {
    size_t size = (qs->mask + 1) * 2;
    Py_ssize_t *slots = PyMem_Calloc(size, sizeof(Py_ssize_t));
    Queue *q = PyMem_Realloc(qs->q, (size / 2) * sizeof(Queue));
    if (slots == NULL || q == NULL) {
        PyMem_Free(slots);
        if (q != NULL)
            qs->q = q;
        PyErr_NoMemory();
        return FAILED;
    }
    qs->q = q;
    qs->cap = (Py_ssize_t)(size / 2);
    for (Py_ssize_t i = 0; i < qs->n; i++) {
        size_t h = hash(qs->q[i].id, size - 1);
        while (slots[h])
            h = (h + 1) & (size - 1);
        slots[h] = i + 1;
    }
    PyMem_Free(qs->slots);
    qs->slots = slots;
    qs->mask = size - 1;
    return OK;
}

/* The index in qs->q of the queue ``id``; a new one starts at next_offsets[key] (which may raise,
   e.g. UnknownQueue). */
static int queue_of(Queues *qs, uint32_t id, PyObject *key, PyObject *next_offsets, Py_ssize_t *out) {
    if (qs->last >= 0 && qs->q[qs->last].id == id) {
        *out = qs->last;
        return OK;
    }
    size_t h = hash(id, qs->mask);
    while (qs->slots[h]) {
        Py_ssize_t i = qs->slots[h] - 1;
        if (qs->q[i].id == id) {
            qs->last = i;
            *out = i;
            return OK;
        }
        h = (h + 1) & qs->mask;
    }
    PyObject *value = PyObject_GetItem(next_offsets, key);
    if (value == NULL)
        return FAILED;
    if (!PyLong_CheckExact(value)) {
        Py_DECREF(value);
        return UNSUPPORTED;
    }
    unsigned long long next = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    if (next == (unsigned long long)-1) {  /* negative, too large, or the last u64: Python's to handle */
        PyErr_Clear();
        return UNSUPPORTED;
    }
    if (2 * (size_t)(qs->n + 1) > qs->mask + 1 && queues_grow(qs) != OK)
        return FAILED;
    h = hash(id, qs->mask);  /* again: the table may have grown */
    while (qs->slots[h])
        h = (h + 1) & qs->mask;
    Queue *q = &qs->q[qs->n];
    Py_INCREF(key);
    *q = (Queue){key, id, next, NULL, 0, 0, 0};
    qs->slots[h] = ++qs->n;
    qs->last = qs->n - 1;
    *out = qs->last;
    return OK;
}

static int queue_add(Queue *q, uint64_t position, uint64_t length) {
    if (q->used + 2 > q->cap) {
        Py_ssize_t cap = q->cap ? 2 * q->cap : 16;
        uint64_t *e = PyMem_Realloc(q->entries, (size_t)cap * sizeof(uint64_t));
        if (e == NULL) {
            PyErr_NoMemory();
            return FAILED;
        }
        q->entries = e;
        q->cap = cap;
    }
    q->entries[q->used++] = position + 1;
    q->entries[q->used++] = length;
    q->added += length & 0xFFFFFFFF;
    return OK;
}

/* next_offsets[q] = the queue's next offset, for each queue (an exception pending is kept). */
static int queues_write_back(Queues *qs, PyObject *next_offsets) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int status = OK;
    for (Py_ssize_t i = 0; i < qs->n && status == OK; i++) {
        PyObject *next = PyLong_FromUnsignedLongLong(qs->q[i].next);
        if (next == NULL || PyObject_SetItem(next_offsets, qs->q[i].key, next) < 0)
            status = FAILED;
        Py_XDECREF(next);
    }
    if (type != NULL) {
        if (status != OK)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return FAILED;
    }
    return status;
}

/* ------------------------------------------------------------------------------------ encoder */
/* The items of a list or tuple column, or NULL (the column is None, or of another type). */
static PyObject **column_items(PyObject *column, Py_ssize_t n, int *unsupported) {
    if (column == Py_None)
        return NULL;
    if (PyList_CheckExact(column) && PyList_GET_SIZE(column) == n)
        return PySequence_Fast_ITEMS(column);
    if (PyTuple_CheckExact(column) && PyTuple_GET_SIZE(column) == n)
        return PySequence_Fast_ITEMS(column);
    *unsupported = 1;
    return NULL;
}

static int queue_code(uint64_t q) { return q < 0x100 ? 0 : q < 0x10000 ? 1 : 2; }

static int offset_code(uint64_t o) {
    return o < 0x10000 ? 0 : o < 0x1000000 ? 4 : o < 0x100000000ull ? 8 : 12;
}

/* A record's prefix (its payload length) and the room of its CRC: returns where the payload starts. */
static unsigned char *put_prefix(unsigned char *out, size_t plen) {
    if (plen <= SHORT_MAX) {
        *out++ = (unsigned char)plen;
    } else {
        *out++ = LONG;
        out = put(out, plen, 4);
    }
    return out + 4;
}

/* The CRC of the payload (before it) and the suffix after it: returns the end of the record. */
static unsigned char *put_suffix(unsigned char *payload, size_t plen) {
    put(payload - 4, crc32_of(0, payload, plen), 4);
    unsigned char *out = payload + plen;
    if (plen <= SHORT_MAX) {
        *out++ = (unsigned char)plen;
    } else {
        out = put(out, plen, 4);
        *out++ = LONG;
    }
    return out;
}

typedef struct {
    PyObject *data, *queues, *tags, *keys, *flags;  /* the batch's columns (borrowed) */
    Py_ssize_t n;
} Batch;

/* One record's fields, read from the batch now: the columns are read again after every call back
   into Python (next_offsets' __missing__), so a batch changed meanwhile cannot point us at freed
   memory. Returns UNSUPPORTED for input encode_records should see. */
static int fields(const Batch *b, Py_ssize_t i, PyObject **data, PyObject **tag, PyObject **key, long long *flags) {
    int unsupported = 0;
    PyObject **d = column_items(b->data, b->n, &unsupported);
    PyObject **t = column_items(b->tags, b->n, &unsupported);
    PyObject **k = column_items(b->keys, b->n, &unsupported);
    PyObject **f = column_items(b->flags, b->n, &unsupported);
    if (unsupported || d == NULL)
        return UNSUPPORTED;
    *data = d[i];
    *tag = t ? t[i] : NULL;
    *key = k ? k[i] : NULL;
    if (!PyBytes_CheckExact(*data) || (*tag && !PyBytes_CheckExact(*tag)) || (*key && !PyBytes_CheckExact(*key)))
        return UNSUPPORTED;
    *flags = 0;
    if (f) {
        if (!PyLong_Check(f[i]))
            return UNSUPPORTED;
        int overflow;
        *flags = PyLong_AsLongLongAndOverflow(f[i], &overflow);
        if (overflow)
            *flags = -1;  /* out of range either way */
    }
    return OK;
}

static Py_ssize_t length_of(PyObject *bytes) { return bytes ? PyBytes_GET_SIZE(bytes) : 0; }

/* queues[i] as a list or tuple (a new reference), or NULL for another type. */
static PyObject *placements_of(const Batch *b, Py_ssize_t i) {
    int unsupported = 0;
    PyObject **q = column_items(b->queues, b->n, &unsupported);
    if (q == NULL || !(PyList_CheckExact(q[i]) || PyTuple_CheckExact(q[i])))
        return NULL;
    Py_INCREF(q[i]);
    return q[i];
}

/* encode(data, queues, tags, keys, flags, timestamp, position, next_offsets, max_message_bytes)
   -> (buf, positions, queue_column, offset_column, counts or None, {queue id: (entries, bytes)}),
   the index of the first record over a limit, or None for input it leaves to record_encode.py. */
static PyObject *encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "encode() takes 9 arguments");
        return NULL;
    }
    Batch b = {args[0], args[1], args[2], args[3], args[4], 0};
    PyObject *next_offsets = args[7];
    if (!PyList_CheckExact(b.data) && !PyTuple_CheckExact(b.data))
        Py_RETURN_NONE;
    b.n = PySequence_Fast_GET_SIZE(b.data);
    int overflow;
    long long timestamp = PyLong_Check(args[5]) ? PyLong_AsLongLongAndOverflow(args[5], &overflow) : -1;
    long long position = PyLong_Check(args[6]) ? PyLong_AsLongLongAndOverflow(args[6], &overflow) : -1;
    long long max_bytes = PyLong_Check(args[8]) ? PyLong_AsLongLongAndOverflow(args[8], &overflow) : -1;
    if (PyErr_Occurred())
        return NULL;
    if (timestamp < 0 || timestamp >= (1LL << 48) || position < 0 || position >= (1LL << 62) || max_bytes < 0)
        Py_RETURN_NONE;

    /* First pass: the types, the limits, the output's size (a bound: the widest placement). */
    Py_ssize_t stop = b.n, placements = 0;
    size_t bound = 0;
    int all_one = 1;
    for (Py_ssize_t i = 0; i < b.n; i++) {
        PyObject *data, *tag, *key, *queues = placements_of(&b, i);
        long long flags;
        if (queues == NULL || fields(&b, i, &data, &tag, &key, &flags) != OK) {
            Py_XDECREF(queues);
            Py_RETURN_NONE;
        }
        Py_ssize_t count = PySequence_Fast_GET_SIZE(queues), dl = PyBytes_GET_SIZE(data);
        Py_ssize_t tl = length_of(tag), il = length_of(key);
        Py_DECREF(queues);
        if (dl > max_bytes || tl > MAX_U16 || il > MAX_U16 || count > MAX_U16 || flags < 0 || flags > 0xFF) {
            stop = i;
            break;
        }
        all_one &= count == 1;
        placements += count;
        bound += LONG_FRAME + HEADER_SIZE + 4 + (size_t)(count == 1 ? 12 : 2 + 12 * count) + (size_t)(tl + il + dl);
    }
    if (bound > (size_t)PY_SSIZE_T_MAX / 2 || (long long)bound > (1LL << 62) - position)
        Py_RETURN_NONE;

    Queues qs = {NULL, 0, 0, NULL, 7, -1};
    PyObject *buf = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound);
    PyObject *positions = PyList_New(stop), *queue_column = PyList_New(placements);
    PyObject *offset_column = PyList_New(placements), *counts = all_one ? Py_None : PyList_New(stop);
    PyObject *result = NULL;
    Py_XINCREF(counts);
    qs.slots = PyMem_Calloc(qs.mask + 1, sizeof(Py_ssize_t));
    qs.q = PyMem_Malloc((qs.mask + 1) / 2 * sizeof(Queue));
    qs.cap = (Py_ssize_t)(qs.mask + 1) / 2;
    /* each placement's queue (an index into qs.q) and offset */
    Py_ssize_t *placed = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(placements ? placements : 1));
    uint64_t *placed_at = PyMem_Malloc(sizeof(uint64_t) * (size_t)(placements ? placements : 1));
    int status = OK;
    if (!buf || !positions || !queue_column || !offset_column || !counts || !qs.slots || !qs.q || !placed || !placed_at) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        status = FAILED;
        goto done;
    }

    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(buf), *out = start, *limit = start + bound;
    uint64_t ts = (uint64_t)timestamp, pos = (uint64_t)position;
    Py_ssize_t p = 0;  /* placements so far */
    for (Py_ssize_t i = 0; i < stop && status == OK; i++) {
        /* The placements first (next_offsets may call back into Python), then the record's fields. */
        PyObject *queues = placements_of(&b, i);
        if (queues == NULL) {
            status = UNSUPPORTED;
            break;
        }
        Py_ssize_t count = PySequence_Fast_GET_SIZE(queues), first = p;
        if (p + count > placements) {
            PyErr_SetString(PyExc_RuntimeError, "the batch changed while it was encoded");
            Py_DECREF(queues);
            status = FAILED;
            break;
        }
        for (Py_ssize_t j = 0; j < count && status == OK; j++) {
            if (j >= PySequence_Fast_GET_SIZE(queues)) {
                PyErr_SetString(PyExc_RuntimeError, "the batch changed while it was encoded");
                status = FAILED;
                break;
            }
            PyObject *id = PySequence_Fast_ITEMS(queues)[j];
            unsigned long long q = PyLong_CheckExact(id) ? PyLong_AsUnsignedLongLong(id) : (unsigned long long)-1;
            if (q > 0xFFFFFFFFull) {  /* a struct.error in encode_records */
                PyErr_Clear();
                status = UNSUPPORTED;
                break;
            }
            Py_ssize_t k;
            status = queue_of(&qs, (uint32_t)q, id, next_offsets, &k);
            if (status != OK)
                break;
            Queue *queue = &qs.q[k];
            PyObject *o = PyLong_FromUnsignedLongLong(queue->next);
            if (o == NULL) {
                status = FAILED;
                break;
            }
            Py_INCREF(id);
            PyList_SET_ITEM(queue_column, p, id);
            PyList_SET_ITEM(offset_column, p, o);
            placed[p] = k;
            placed_at[p++] = queue->next++;
        }
        Py_DECREF(queues);
        if (status != OK)
            break;
        PyObject *data, *tag, *key;
        long long flags;
        if (fields(&b, i, &data, &tag, &key, &flags) != OK) {
            status = UNSUPPORTED;
            break;
        }
        Py_ssize_t dl = PyBytes_GET_SIZE(data), tl = length_of(tag), il = length_of(key);
        if (flags < 0 || flags > 0xFF || tl > MAX_U16 || il > MAX_U16) {
            PyErr_SetString(PyExc_RuntimeError, "the batch changed while it was encoded");
            status = FAILED;
            break;
        }
        int layout = (i == b.n - 1 ? L_END : 0) | (tl ? L_TAG : 0) | (il ? L_IDEM : 0), code = 0;
        size_t width;
        uint64_t one_q = 0, one_o = 0;
        if (count == 1) {
            one_q = qs.q[placed[first]].id;
            one_o = placed_at[first];
            code = queue_code(one_q) | offset_code(one_o);
            layout |= code;
            width = (size_t)(QUEUE_WIDTH[code & 3] + OFFSET_WIDTH[code >> 2]);
        } else {
            layout |= L_MULTI;
            width = 2 + 12 * (size_t)count;
        }
        size_t plen = HEADER_SIZE + (tl ? 2 : 0) + (il ? 2 : 0) + width + (size_t)(tl + il + dl);
        size_t size = plen + (plen <= SHORT_MAX ? FRAME : LONG_FRAME);
        if (plen > 0xFFFFFFFFu || size > (size_t)(limit - out)) {
            PyErr_SetString(PyExc_RuntimeError, "the batch changed while it was encoded");
            status = FAILED;
            break;
        }
        /* prefix, CRC (put_suffix), payload, suffix */
        unsigned char *payload = out = put_prefix(out, plen);
        out = put(out, ts, 6);
        *out++ = (unsigned char)flags;
        *out++ = (unsigned char)layout;
        if (tl)
            out = put(out, (uint64_t)tl, 2);
        if (il)
            out = put(out, (uint64_t)il, 2);
        if (count == 1) {
            out = put(out, one_q, QUEUE_WIDTH[code & 3]);
            out = put(out, one_o, OFFSET_WIDTH[code >> 2]);
        } else {
            out = put(out, (uint64_t)count, 2);
            for (Py_ssize_t j = first; j < first + count; j++) {
                out = put(out, qs.q[placed[j]].id, 4);
                out = put(out, placed_at[j], 8);
            }
        }
        if (tl) {
            memcpy(out, PyBytes_AS_STRING(tag), (size_t)tl);
            out += tl;
        }
        if (il) {
            memcpy(out, PyBytes_AS_STRING(key), (size_t)il);
            out += il;
        }
        memcpy(out, PyBytes_AS_STRING(data), (size_t)dl);
        out = put_suffix(payload, plen);
        /* the index entries: the record's length, with its tag's hash above bit 32 */
        uint64_t length = size;
        if (tl) {
            uint32_t th = crc32_of(0, (const unsigned char *)PyBytes_AS_STRING(tag), (size_t)tl);
            length |= (uint64_t)(th ? th : 1) << 32;
        }
        for (Py_ssize_t j = first; j < first + count && status == OK; j++)
            status = queue_add(&qs.q[placed[j]], pos, length);
        PyObject *at = PyLong_FromUnsignedLongLong(pos);
        if (at == NULL) {
            status = FAILED;
            break;
        }
        PyList_SET_ITEM(positions, i, at);
        if (counts != Py_None) {
            PyObject *c = PyLong_FromSsize_t(count);
            if (c == NULL) {
                status = FAILED;
                break;
            }
            PyList_SET_ITEM(counts, i, c);
        }
        pos += size;
    }
    if (status == UNSUPPORTED)
        goto done;  /* next_offsets as it was: encode_records starts over */
    if (status == OK && p != placements) {
        PyErr_SetString(PyExc_RuntimeError, "the batch changed while it was encoded");
        status = FAILED;
    }
    if (queues_write_back(&qs, next_offsets) != OK || status != OK) {
        status = FAILED;
        goto done;
    }
    if (stop < b.n) {  /* record `stop` is over a limit: record_encode.py raises for it */
        result = PyLong_FromSsize_t(stop);
        goto done;
    }
    if (_PyBytes_Resize(&buf, (Py_ssize_t)(out - start)) < 0) {
        status = FAILED;
        goto done;
    }
    PyObject *entries = PyDict_New();
    for (Py_ssize_t k = 0; entries != NULL && k < qs.n; k++) {
        Queue *q = &qs.q[k];
        PyObject *packed = PyBytes_FromStringAndSize(NULL, q->used * 8);
        if (packed != NULL) {
            unsigned char *e = (unsigned char *)PyBytes_AS_STRING(packed);
            for (Py_ssize_t j = 0; j < q->used; j++)
                e = put(e, q->entries[j], 8);
        }
        PyObject *added = PyLong_FromUnsignedLongLong(q->added & 0xFFFFFFFF);
        PyObject *pair = packed && added ? PyTuple_Pack(2, packed, added) : NULL;
        if (pair == NULL || PyDict_SetItem(entries, q->key, pair) < 0)
            Py_CLEAR(entries);
        Py_XDECREF(packed);
        Py_XDECREF(added);
        Py_XDECREF(pair);
    }
    if (entries != NULL) {
        result = PyTuple_Pack(6, buf, positions, queue_column, offset_column, counts, entries);
        Py_DECREF(entries);
    }
done:
    if (status == UNSUPPORTED && !PyErr_Occurred()) {
        Py_INCREF(Py_None);
        result = Py_None;
    }
    Py_XDECREF(buf);
    Py_XDECREF(positions);
    Py_XDECREF(queue_column);
    Py_XDECREF(offset_column);
    Py_XDECREF(counts);
    PyMem_Free(placed);
    PyMem_Free(placed_at);
    queues_free(&qs);
    return result;
}

/* ---------------------------------------------------------------------------------- column read */
static int get_buffer(PyObject *obj, Py_buffer *view, int writable) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return FAILED;
    return OK;
}

/* One row of columns(): its six fields into row[0..5] and whether it is valid (record_columns.py's
   columns_python says when). Every read stays inside buf[0:size]. */
static int row(const unsigned char *buf, int64_t size, int64_t s, int64_t n, int verify, int64_t row[6]) {
    if (s < 0 || n < FRAME + HEADER_SIZE || s > size || n > size - s)
        return 0;
    int64_t p, plen, end;
    int is_long = buf[s] == LONG;
    if (is_long) {
        p = s + 9;
        plen = (int64_t)get(buf + s + 1, 4);
        end = s + n - 5;
        if (plen <= SHORT_MAX || buf[end + 4] != LONG)
            return 0;
    } else {
        p = s + 5;
        plen = buf[s];
        end = s + n - 1;
        if (plen == 0 || buf[end] != plen)
            return 0;
    }
    if (plen != end - p || plen < HEADER_SIZE)
        return 0;
    int layout = buf[p + 7];
    int64_t q = p + HEADER_SIZE, tl = 0, il = 0, width;
    if (layout & L_TAG) {
        if (q + 2 > end)
            return 0;
        tl = (int64_t)get(buf + q, 2);
        q += 2;
    }
    if (layout & L_IDEM) {
        if (q + 2 > end)
            return 0;
        il = (int64_t)get(buf + q, 2);
        q += 2;
    }
    if (layout & L_MULTI) {
        if (layout & L_WIDTHS || q + 2 > end)
            return 0;
        width = 2 + 12 * (int64_t)get(buf + q, 2);
    } else {
        if ((layout & 3) == 3)
            return 0;
        width = QUEUE_WIDTH[layout & 3] + OFFSET_WIDTH[(layout >> 2) & 3];
    }
    int64_t tag_start = q + width, data_start = tag_start + tl + il;
    if (data_start > end)
        return 0;
    if (verify && crc32_of(0, buf + p, (size_t)plen) != (uint32_t)get(buf + p - 4, 4))
        return 0;
    row[0] = (int64_t)get(buf + p, 6);
    row[1] = buf[p + 6];
    row[2] = tag_start;
    row[3] = tl;
    row[4] = data_start;
    row[5] = end - data_start;
    return 1;
}

/* columns(buf, starts, lengths, verify, out, ok): the format-2 records at starts (int64) of buf
   whose index entries say lengths (int64), verify (bool) saying which to check the CRC of. Writes
   the rows' timestamps, flags, tag starts, tag lengths, data starts and data lengths into out
   (int64, 6 x n), zeros for an invalid row, and ok (bool, n). */
static PyObject *columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "columns() takes 6 arguments");
        return NULL;
    }
    Py_buffer v[6];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 6; got++)
        if (get_buffer(args[got], &v[got], got >= 4) != OK)
            goto done;
    Py_ssize_t n = v[1].len / 8;
    if (v[1].len % 8 || v[2].len != v[1].len || v[3].len != n || v[4].len != 6 * v[1].len || v[5].len != n) {
        PyErr_SetString(PyExc_ValueError, "columns(): starts and lengths need 8 bytes a row, verify and ok one, out 48");
        goto done;
    }
    const unsigned char *buf = v[0].buf, *verify = v[3].buf;
    unsigned char *ok = v[5].buf;
    int64_t *out = v[4].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s, len, fields[6] = {0, 0, 0, 0, 0, 0};
        memcpy(&s, (const char *)v[1].buf + 8 * i, 8);
        memcpy(&len, (const char *)v[2].buf + 8 * i, 8);
        int valid = row(buf, (int64_t)v[0].len, s, len, verify[i] != 0, fields);
        if (!valid)
            memset(fields, 0, sizeof(fields));
        for (int k = 0; k < 6; k++)
            memcpy(out + (Py_ssize_t)k * n + i, &fields[k], 8);
        ok[i] = (unsigned char)valid;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    while (got > 0)
        PyBuffer_Release(&v[--got]);
    return result;
}

static PyObject *crc32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32() takes 1 or 2 arguments");
        return NULL;
    }
    unsigned long value = 0;
    if (nargs == 2) {
        value = PyLong_AsUnsignedLongMask(args[1]);
        if (value == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = crc32_of((uint32_t)value, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* encode() of one record with no tag or key, with one placement, `queue_id` at `offset`, and `flags`:
   (its bytes, its packed index entry, the bytes it adds to the queue), as encode_one in record_encode.py
   makes them from encode()'s answer, without the batch's columns; None for what it leaves to encode()
   (a record over max_message_bytes, numbers out of range, data that is not bytes). */
static PyObject *encode_one(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "encode_one() takes 7 arguments");
        return NULL;
    }
    PyObject *data = args[0];
    if (!PyBytes_CheckExact(data))
        Py_RETURN_NONE;
    unsigned long long v[6];
    for (int k = 0; k < 6; k++) {
        v[k] = PyLong_CheckExact(args[k + 1]) ? PyLong_AsUnsignedLongLong(args[k + 1]) : (unsigned long long)-1;
        if (v[k] == (unsigned long long)-1) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    uint64_t q = v[0], ts = v[1], pos = v[2], offset = v[3], max_bytes = v[4], flags = v[5];
    Py_ssize_t dl = PyBytes_GET_SIZE(data);
    if (q > 0xFFFFFFFFull || ts >= (1ULL << 48) || pos >= (1ULL << 62) || (uint64_t)dl > max_bytes ||
        offset == 0xFFFFFFFFFFFFFFFFull || flags > 0xFF)
        Py_RETURN_NONE;
    int code = queue_code(q) | offset_code(offset);
    size_t plen = HEADER_SIZE + (size_t)(QUEUE_WIDTH[code & 3] + OFFSET_WIDTH[code >> 2]) + (size_t)dl;
    if (plen > 0xFFFFFFFFu)
        Py_RETURN_NONE;
    size_t size = plen + (plen <= SHORT_MAX ? FRAME : LONG_FRAME);
    PyObject *buf = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    PyObject *entry = PyBytes_FromStringAndSize(NULL, 16);
    if (buf == NULL || entry == NULL) {
        Py_XDECREF(buf);
        Py_XDECREF(entry);
        return NULL;
    }
    unsigned char *payload = put_prefix((unsigned char *)PyBytes_AS_STRING(buf), plen), *out = payload;
    out = put(out, ts, 6);
    *out++ = (unsigned char)flags;
    *out++ = (unsigned char)(L_END | code);
    out = put(out, q, QUEUE_WIDTH[code & 3]);
    out = put(out, offset, OFFSET_WIDTH[code >> 2]);
    memcpy(out, PyBytes_AS_STRING(data), (size_t)dl);
    put_suffix(payload, plen);
    unsigned char *e = (unsigned char *)PyBytes_AS_STRING(entry);
    put(e, pos + 1, 8);
    put(e + 8, size, 8);  /* the record's length, no tag hash */
    return Py_BuildValue("(NNn)", buf, entry, (Py_ssize_t)size);
}

static PyMethodDef methods[] = {
    {"encode_one", (PyCFunction)(void (*)(void))encode_one, METH_FASTCALL,
     "encode_one(data, queue_id, timestamp, position, offset, max_message_bytes, flags)"},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "encode(data, queues, tags, keys, flags, timestamp, position, next_offsets, max_message_bytes)"},
    {"columns", (PyCFunction)(void (*)(void))columns, METH_FASTCALL,
     "columns(buf, starts, lengths, verify, out, ok)"},
    {"crc32", (PyCFunction)(void (*)(void))crc32, METH_FASTCALL, "crc32(data, value=0): zlib's CRC-32"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_recordc",
    .m_doc = "The compiled twin of the record codec's hot loops.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__recordc(void) {
    crc_init();
#ifdef HAVE_CLMUL
    __builtin_cpu_init();
    have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    return PyModule_Create(&module);
}
