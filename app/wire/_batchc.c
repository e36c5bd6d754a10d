/* The compiled twin of batch.py's hot loops: the binary batch's encoders and decoders.

   batch.py is the reference: its module docstring has the layouts, and each function here gives
   what the function of the same name there gives (the property tests in tests/wire/test_batchc.py
   hold them together). batch.py calls the twin first and runs its own code when the twin answers
   None.

   A twin handles the well-formed input the server and the client pass (bytes, lists or tuples of
   ints, numpy arrays of integers) and answers None for anything else: a batch that is damaged or
   truncated, a value beyond its column, a type it does not know. batch.py then runs its Python
   code, so every error is Python's own, with Python's message. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define OK 0
#define LEAVE 1   /* not for the twin: batch.py's Python code decides (no exception set) */
#define FAILED 2  /* an exception is set (out of memory) */

#define COUNT 4  /* the u32 record count that starts a batch */

/* Little-endian integers of 1, 2, 4 or 8 bytes. */
static inline void put(unsigned char *p, uint64_t v, int size) {
#if PY_LITTLE_ENDIAN
    switch (size) {
    case 1:
        *p = (unsigned char)v;
        return;
    case 2: {
        uint16_t x = (uint16_t)v;
        memcpy(p, &x, 2);
        return;
    }
    case 4: {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
        return;
    }
    case 8:
        memcpy(p, &v, 8);
        return;
    }
#endif
    for (int k = 0; k < size; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static inline uint64_t get(const unsigned char *p, int size) {
#if PY_LITTLE_ENDIAN
    switch (size) {
    case 1:
        return *p;
    case 2: {
        uint16_t x;
        memcpy(&x, p, 2);
        return x;
    }
    case 4: {
        uint32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    case 8: {
        uint64_t x;
        memcpy(&x, p, 8);
        return x;
    }
    }
#endif
    uint64_t v = 0;
    for (int k = size - 1; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

static PyObject *leave(void) {
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------ writing columns */
/* A column's values as batch.column_bytes takes them: bytes (the values' bytes as they are), a list
   or tuple of ints, or a one-dimensional numpy array of integers or bools (cast as numpy's astype
   casts: the low bytes of the two's complement). */
enum { RAW, INTS, ARRAY };

typedef struct {
    int kind;
    PyObject *obj;
    Py_ssize_t count;  /* values */
    Py_buffer view;    /* ARRAY only */
    int is_signed, is_bool;
} Column;

/* The column `obj` of values `size` bytes wide: OK, or LEAVE for what column_bytes does itself. */
static int column_open(Column *c, PyObject *obj, int size) {
    c->obj = obj;
    c->view.obj = NULL;
    if (PyBytes_CheckExact(obj)) {
        if (PyBytes_GET_SIZE(obj) % size)
            return LEAVE;  /* array.array raises for it */
        c->kind = RAW;
        c->count = PyBytes_GET_SIZE(obj) / size;
        return OK;
    }
    if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) {
        c->kind = INTS;
        c->count = PySequence_Fast_GET_SIZE(obj);
        return OK;
    }
    /* column_bytes casts what has an `astype` (numpy arrays) and iterates anything else */
    if (strcmp(Py_TYPE(obj)->tp_name, "numpy.ndarray") != 0 && !PyObject_HasAttrString(obj, "astype"))
        return LEAVE;
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        c->view.obj = NULL;
        return LEAVE;
    }
    const char *f = c->view.format ? c->view.format : "B";
    if (*f == '@' || *f == '=' || (PY_LITTLE_ENDIAN && *f == '<'))
        f++;
    int item = (int)c->view.itemsize;
    if (c->view.ndim != 1 || f[0] == '\0' || f[1] != '\0' || strchr("bBhHiIlLqQ?", f[0]) == NULL ||
        (item != 1 && item != 2 && item != 4 && item != 8)) {
        PyBuffer_Release(&c->view);
        c->view.obj = NULL;
        return LEAVE;
    }
    c->kind = ARRAY;
    c->count = c->view.shape[0];
    c->is_bool = f[0] == '?';
    c->is_signed = strchr("bhilq", f[0]) != NULL;
    return OK;
}

static void column_close(Column *c) {
    if (c->view.obj != NULL)
        PyBuffer_Release(&c->view);
    c->view.obj = NULL;
}

static uint64_t array_value(const Column *c, Py_ssize_t i) {
    const char *p = (const char *)c->view.buf + i * c->view.strides[0];
    switch (c->view.itemsize) {
    case 1:
        if (c->is_bool)
            return *p != 0;
        return c->is_signed ? (uint64_t)(int64_t)(int8_t)*p : (uint64_t)(uint8_t)*p;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return c->is_signed ? (uint64_t)(int64_t)(int16_t)v : v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return c->is_signed ? (uint64_t)(int64_t)(int32_t)v : v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

/* The column's values, `size` bytes each, at out: OK, or LEAVE (a value that is not an int or does
   not fit: array.array raises for it). */
static int column_write(const Column *c, unsigned char *out, int size) {
    if (c->kind == RAW) {
        memcpy(out, PyBytes_AS_STRING(c->obj), (size_t)(c->count * size));
        return OK;
    }
    if (c->kind == ARRAY) {
        if (PY_LITTLE_ENDIAN && !c->is_bool && c->view.itemsize == size && c->view.strides[0] == size) {
            memcpy(out, c->view.buf, (size_t)(c->count * size));  /* the same width: the same bytes */
            return OK;
        }
        for (Py_ssize_t i = 0; i < c->count; i++)
            put(out + i * size, array_value(c, i), size);
        return OK;
    }
    uint64_t max = size == 8 ? UINT64_MAX : ((uint64_t)1 << (8 * size)) - 1;
    PyObject **items = PySequence_Fast_ITEMS(c->obj);
    for (Py_ssize_t i = 0; i < c->count; i++) {
        if (!PyLong_Check(items[i]))
            return LEAVE;
        unsigned long long v = PyLong_AsUnsignedLongLong(items[i]);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return LEAVE;
        }
        if (v > max)
            return LEAVE;
        put(out + i * size, v, size);
    }
    return OK;
}

/* Whether every item of a list or tuple is bytes; their total length into *total. */
static int all_bytes(PyObject *seq, Py_ssize_t *total) {
    if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq))
        return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), sum = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_CheckExact(items[i]))
            return 0;
        sum += PyBytes_GET_SIZE(items[i]);
    }
    *total = sum;
    return 1;
}

static unsigned char *join(unsigned char *out, PyObject *seq) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = PyBytes_GET_SIZE(items[i]);
        memcpy(out, PyBytes_AS_STRING(items[i]), (size_t)len);
        out += len;
    }
    return out;
}

static int check_args(const char *name, Py_ssize_t nargs, Py_ssize_t expected) {
    if (nargs == expected)
        return OK;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments", name, expected);
    return FAILED;
}

/* --------------------------------------------------------------------------- publish: encoding */
/* encode_publish(bodies, keys, flags) */
static PyObject *encode_publish(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args("encode_publish", nargs, 3) != OK)
        return NULL;
    PyObject *bodies = args[0], *keys = args[1];
    Py_ssize_t body_total, key_total;
    if (!all_bytes(bodies, &body_total) || !all_bytes(keys, &key_total))
        return leave();
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bodies);
    if (n == 0 || n > 0xFFFFFFFF || PySequence_Fast_GET_SIZE(keys) != n)
        return leave();
    PyObject **b = PySequence_Fast_ITEMS(bodies), **k = PySequence_Fast_ITEMS(keys);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyBytes_GET_SIZE(b[i]) > 0xFFFFFFFF || PyBytes_GET_SIZE(k[i]) > 0xFFFF)
            return leave();
    Column flags;
    if (column_open(&flags, args[2], 1) != OK)
        return leave();
    PyObject *out = NULL;
    if (flags.count != n)
        goto done;
    out = PyBytes_FromStringAndSize(NULL, COUNT + 7 * n + key_total + body_total);
    if (out == NULL)
        goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    put(p, (uint64_t)n, COUNT);
    for (Py_ssize_t i = 0; i < n; i++) {
        put(p + COUNT + 4 * i, (uint64_t)PyBytes_GET_SIZE(b[i]), 4);
        put(p + COUNT + 4 * n + 2 * i, (uint64_t)PyBytes_GET_SIZE(k[i]), 2);
    }
    if (column_write(&flags, p + COUNT + 6 * n, 1) != OK) {
        Py_CLEAR(out);
        goto done;
    }
    join(join(p + COUNT + 7 * n, keys), bodies);
done:
    column_close(&flags);
    return out != NULL || PyErr_Occurred() ? out : leave();
}

/* encode_publish_text(lengths, key, bodies) */
static PyObject *encode_publish_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args("encode_publish_text", nargs, 3) != OK)
        return NULL;
    PyObject *key = args[1], *bodies = args[2];
    if (!PyBytes_CheckExact(key) || !PyBytes_CheckExact(bodies) || PyBytes_GET_SIZE(key) > 0xFFFF)
        return leave();
    Column lengths;
    if (column_open(&lengths, args[0], 4) != OK)
        return leave();
    PyObject *out = NULL;
    Py_ssize_t n = lengths.count, kl = PyBytes_GET_SIZE(key);
    if (lengths.kind != INTS || n <= 0 || n > 0xFFFFFFFF)
        goto done;
    out = PyBytes_FromStringAndSize(NULL, COUNT + 7 * n + kl * n + PyBytes_GET_SIZE(bodies));
    if (out == NULL)
        goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    put(p, (uint64_t)n, COUNT);
    if (column_write(&lengths, p + COUNT, 4) != OK) {
        Py_CLEAR(out);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        put(p + COUNT + 4 * n + 2 * i, (uint64_t)kl, 2);
    memset(p + COUNT + 6 * n, 0, (size_t)n);
    unsigned char *q = p + COUNT + 7 * n;
    for (Py_ssize_t i = 0; i < n; i++, q += kl)
        memcpy(q, PyBytes_AS_STRING(key), (size_t)kl);
    memcpy(q, PyBytes_AS_STRING(bodies), (size_t)PyBytes_GET_SIZE(bodies));
done:
    column_close(&lengths);
    return out != NULL || PyErr_Occurred() ? out : leave();
}

/* ------------------------------------------------------------------------------ reading columns */
static PyObject *int_list(const unsigned char *p, Py_ssize_t n, int size) {
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(get(p + i * size, size));
        if (v == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, v);
    }
    return list;
}

static uint64_t column_sum(const unsigned char *p, Py_ssize_t n, int size) {
    uint64_t sum = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        sum += get(p + i * size, size);
    return sum;
}

/* The pieces of `buf` (bytes) from `start` whose lengths are the column at p; the caller has checked
   that they fit. */
static PyObject *pieces(PyObject *buf, Py_ssize_t start, const unsigned char *p, Py_ssize_t n, int size) {
    const char *at = PyBytes_AS_STRING(buf) + start;
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        Py_ssize_t len = (Py_ssize_t)get(p + i * size, size);
        PyObject *piece = PyBytes_FromStringAndSize(at, len);
        if (piece == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, piece);
        at += len;
    }
    return list;
}

/* ----------------------------------------------------------------------------- publish: decoding */
/* decode_publish(body, max_records): (body_lengths, key_lengths, flags, keys_start, bodies_start) */
static PyObject *decode_publish(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args("decode_publish", nargs, 2) != OK)
        return NULL;
    if (!PyLong_CheckExact(args[1]))
        return leave();
    long long max_records = PyLong_AsLongLong(args[1]);
    if (max_records == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return leave();
    }
    Py_buffer v;
    if (PyObject_GetBuffer(args[0], &v, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return leave();
    }
    const unsigned char *b = v.buf;
    int64_t size = v.len;
    PyObject *result = NULL;
    if (size < COUNT)
        goto done;
    int64_t n = (int64_t)get(b, COUNT), keys_start = COUNT + 7 * n;
    if (n == 0 || n > max_records || size < keys_start)
        goto done;
    const unsigned char *body_lengths = b + COUNT, *key_lengths = body_lengths + 4 * n, *flags = key_lengths + 2 * n;
    int64_t bodies_start = keys_start + (int64_t)column_sum(key_lengths, n, 2);
    if (bodies_start + (int64_t)column_sum(body_lengths, n, 4) != size)
        goto done;
    for (int64_t i = 0; i < n; i++)
        if (flags[i] > 1)  /* batch.BINARY is the only flag */
            goto done;
    PyObject *bl = int_list(body_lengths, n, 4), *kl = bl ? int_list(key_lengths, n, 2) : NULL;
    PyObject *fl = kl ? int_list(flags, n, 1) : NULL;
    if (fl != NULL)
        result = Py_BuildValue("(OOOLL)", bl, kl, fl, (long long)keys_start, (long long)bodies_start);
    Py_XDECREF(bl);
    Py_XDECREF(kl);
    Py_XDECREF(fl);
    if (result == NULL)
        goto fail;
done:
    if (result == NULL)
        result = leave();
fail:
    PyBuffer_Release(&v);
    return result;
}

/* slices(buffer, start, lengths): `buffer` (bytes) cut into pieces of `lengths` (a list of ints)
   from `start`, when they fit into it. */
static PyObject *slices(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args("slices", nargs, 3) != OK)
        return NULL;
    PyObject *buf = args[0], *lengths = args[2];
    if (!PyBytes_CheckExact(buf) || !PyLong_CheckExact(args[1]) || !PyList_CheckExact(lengths))
        return leave();
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), n = PyList_GET_SIZE(lengths);
    if (start == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return leave();
    }
    if (start < 0 || start > PyBytes_GET_SIZE(buf))
        return leave();
    Py_ssize_t room = PyBytes_GET_SIZE(buf) - start;
    PyObject **items = PySequence_Fast_ITEMS(lengths);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyLong_CheckExact(items[i]))
            return leave();
        Py_ssize_t len = PyLong_AsSsize_t(items[i]);
        if (len < 0 || len > room) {
            PyErr_Clear();
            return leave();
        }
        room -= len;
    }
    const char *at = PyBytes_AS_STRING(buf) + start;
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        Py_ssize_t len = PyLong_AsSsize_t(items[i]);
        PyObject *piece = PyBytes_FromStringAndSize(at, len);
        if (piece == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, piece);
        at += len;
    }
    return list;
}

/* ---------------------------------------------------------------------------------------- results */
/* encode_results(ids, counts, offsets, name_lengths, names) */
static PyObject *encode_results(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args("encode_results", nargs, 5) != OK)
        return NULL;
    PyObject *lengths = args[3], *names = args[4];
    if (!PyBytes_CheckExact(lengths) || !PyBytes_CheckExact(names))
        return leave();
    Column c[3];
    for (int i = 0; i < 3; i++)
        c[i].view.obj = NULL;
    PyObject *out = NULL;
    static const int sizes[3] = {8, 2, 8};
    for (int i = 0; i < 3; i++)
        if (!(i == 1 && args[1] == Py_None) && column_open(&c[i], args[i], sizes[i]) != OK)
            goto done;  /* counts None: one placement each */
    Py_ssize_t n = c[0].count, p = c[2].count;
    if (n > 0xFFFFFFFF || p > 0xFFFFFFFF || (args[1] != Py_None && c[1].count != n))
        goto done;  /* the Python code writes (or raises for) what it is given */
    out = PyBytes_FromStringAndSize(NULL, COUNT + 10 * n + COUNT + 8 * p + PyBytes_GET_SIZE(lengths) +
                                              PyBytes_GET_SIZE(names));
    if (out == NULL)
        goto done;
    unsigned char *q = (unsigned char *)PyBytes_AS_STRING(out);
    put(q, (uint64_t)n, COUNT);
    int status = column_write(&c[0], q + COUNT, 8);
    q += COUNT + 8 * n;
    if (args[1] == Py_None)
        for (Py_ssize_t i = 0; i < n; i++)
            put(q + 2 * i, 1, 2);
    else if (status == OK)
        status = column_write(&c[1], q, 2);
    q += 2 * n;
    put(q, (uint64_t)p, COUNT);
    if (status == OK)
        status = column_write(&c[2], q + COUNT, 8);
    if (status != OK) {
        Py_CLEAR(out);
        goto done;
    }
    q += COUNT + 8 * p;
    memcpy(q, PyBytes_AS_STRING(lengths), (size_t)PyBytes_GET_SIZE(lengths));
    memcpy(q + PyBytes_GET_SIZE(lengths), PyBytes_AS_STRING(names), (size_t)PyBytes_GET_SIZE(names));
done:
    for (int i = 0; i < 3; i++)
        column_close(&c[i]);
    return out != NULL || PyErr_Occurred() ? out : leave();
}

/* decode_results(content): (ids, counts, offsets, names) */
static PyObject *decode_results(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args("decode_results", nargs, 1) != OK)
        return NULL;
    PyObject *content = args[0];
    if (!PyBytes_CheckExact(content))
        return leave();
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(content);
    int64_t size = PyBytes_GET_SIZE(content);
    if (size < COUNT)
        return leave();
    int64_t n = (int64_t)get(b, COUNT), at = COUNT + 10 * n;
    if (size < at + COUNT)
        return leave();
    int64_t p = (int64_t)get(b + at, COUNT), names_at = at + COUNT + 9 * p;
    if (size < names_at)
        return leave();
    const unsigned char *name_lengths = b + at + COUNT + 8 * p;
    if ((int64_t)column_sum(name_lengths, p, 1) > size - names_at)
        return leave();
    PyObject *ids = int_list(b + COUNT, n, 8), *counts = ids ? int_list(b + COUNT + 8 * n, n, 2) : NULL;
    PyObject *offsets = counts ? int_list(b + at + COUNT, p, 8) : NULL;
    PyObject *names = offsets ? pieces(content, names_at, name_lengths, p, 1) : NULL;
    PyObject *result = names ? PyTuple_Pack(4, ids, counts, offsets, names) : NULL;
    Py_XDECREF(ids);
    Py_XDECREF(counts);
    Py_XDECREF(offsets);
    Py_XDECREF(names);
    return result;
}

/* -------------------------------------------------------------------------------------- delivered */
/* batch.DELIVERED_COLUMNS: offset, id, timestamp, delivery count, flags, then the lengths of the
   regions exchange, routing key, tag, headers and body */
static const int DELIVERED[10] = {8, 8, 8, 4, 1, 1, 2, 2, 4, 4};
#define DELIVERED_ROW 42

/* encode_delivered(n, columns, regions) */
static PyObject *encode_delivered(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args("encode_delivered", nargs, 3) != OK)
        return NULL;
    PyObject *columns = args[1], *regions = args[2];
    Py_ssize_t region_total;
    if (!PyLong_CheckExact(args[0]) || !(PyList_CheckExact(columns) || PyTuple_CheckExact(columns)) ||
        PySequence_Fast_GET_SIZE(columns) != 10 || !all_bytes(regions, &region_total) ||
        PySequence_Fast_GET_SIZE(regions) != 5)
        return leave();
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    if (n < 0 || n > 0xFFFFFFFF) {
        PyErr_Clear();
        return leave();
    }
    PyObject **items = PySequence_Fast_ITEMS(columns);
    Column c[10];
    for (int i = 0; i < 10; i++)
        c[i].view.obj = NULL;
    PyObject *out = NULL;
    Py_ssize_t total = COUNT + region_total;
    for (int i = 0; i < 10; i++) {
        if (PyBytes_CheckExact(items[i])) {  /* already encoded: taken as it is, whatever its length */
            total += PyBytes_GET_SIZE(items[i]);
            continue;
        }
        if (column_open(&c[i], items[i], DELIVERED[i]) != OK)
            goto done;
        total += c[i].count * DELIVERED[i];
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    unsigned char *q = (unsigned char *)PyBytes_AS_STRING(out);
    put(q, (uint64_t)n, COUNT);
    q += COUNT;
    for (int i = 0; i < 10; i++) {
        if (PyBytes_CheckExact(items[i])) {
            memcpy(q, PyBytes_AS_STRING(items[i]), (size_t)PyBytes_GET_SIZE(items[i]));
            q += PyBytes_GET_SIZE(items[i]);
        } else if (column_write(&c[i], q, DELIVERED[i]) == OK) {
            q += c[i].count * DELIVERED[i];
        } else {
            Py_CLEAR(out);
            goto done;
        }
    }
    join(q, regions);
done:
    for (int i = 0; i < 10; i++)
        column_close(&c[i]);
    return out != NULL || PyErr_Occurred() ? out : leave();
}

/* decode_delivered(batch): the fields of batch.Delivered, in its order */
static PyObject *decode_delivered(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args("decode_delivered", nargs, 1) != OK)
        return NULL;
    PyObject *batch = args[0];
    if (!PyBytes_CheckExact(batch))
        return leave();
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(batch);
    int64_t size = PyBytes_GET_SIZE(batch);
    if (size < COUNT)
        return leave();
    int64_t n = (int64_t)get(b, COUNT), pos = COUNT + DELIVERED_ROW * n;
    if (size < pos)
        return leave();
    const unsigned char *col[10];
    col[0] = b + COUNT;
    for (int i = 1; i < 10; i++)
        col[i] = col[i - 1] + DELIVERED[i - 1] * n;
    /* the regions: where each starts, and whether it is empty throughout (then it is None) */
    int64_t starts[5], sums[5];
    for (int r = 0; r < 5; r++) {
        starts[r] = pos;
        sums[r] = (int64_t)column_sum(col[5 + r], n, DELIVERED[5 + r]);
        if (sums[r] > size - pos)
            return leave();
        pos += sums[r];
    }
    PyObject *fields[11] = {NULL};
    PyObject *result = NULL;
    fields[0] = int_list(col[0], n, 8);
    fields[1] = PyBytes_FromStringAndSize((const char *)col[1], 8 * n);
    fields[2] = int_list(col[2], n, 8);
    fields[3] = int_list(col[3], n, 4);
    fields[4] = PyBytes_FromStringAndSize((const char *)col[4], n);
    for (int r = 0; r < 4; r++) {
        int empty = 1;
        for (int64_t i = 0; empty && i < n * DELIVERED[5 + r]; i++)
            empty = col[5 + r][i] == 0;
        if (empty) {
            Py_INCREF(Py_None);
            fields[5 + r] = Py_None;
        } else {
            fields[5 + r] = pieces(batch, starts[r], col[5 + r], n, DELIVERED[5 + r]);
        }
    }
    fields[9] = int_list(col[9], n, 4);
    fields[10] = PyBytes_FromStringAndSize((const char *)b + starts[4], sums[4]);
    int complete = 1;
    for (int i = 0; i < 11; i++)
        complete &= fields[i] != NULL;
    if (complete) {
        result = PyTuple_New(11);
        for (int i = 0; result != NULL && i < 11; i++) {
            PyTuple_SET_ITEM(result, i, fields[i]);
            fields[i] = NULL;
        }
    }
    for (int i = 0; i < 11; i++)
        Py_XDECREF(fields[i]);
    return result;
}

/* results_json(name, ids, offsets): the JSON results of messages placed in one queue whose name
   as JSON is `name`, as batch.results_json writes them; None for what is not two lists of the same
   length of ints within u64. */
static PyObject *results_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args("results_json", nargs, 3) != OK)
        return NULL;
    PyObject *name = args[0], *ids = args[1], *offsets = args[2];
    if (!PyBytes_CheckExact(name) || !PyList_CheckExact(ids) || !PyList_CheckExact(offsets) ||
        PyList_GET_SIZE(ids) != PyList_GET_SIZE(offsets))
        return leave();
    static const char a[] = "{\"id\":\"", b[] = "\",\"routed\":[{\"queue\":", c[] = ",\"offset\":",
                      d[] = "}],\"duplicate\":false}";
    const Py_ssize_t fixed = sizeof a - 1 + 16 + sizeof b - 1 + sizeof c - 1 + 20 + sizeof d - 1 + 1;
    Py_ssize_t n = PyList_GET_SIZE(ids), k = PyBytes_GET_SIZE(name);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyLong_CheckExact(PyList_GET_ITEM(ids, i)) || !PyLong_CheckExact(PyList_GET_ITEM(offsets, i)))
            return leave();
    if (n > (PY_SSIZE_T_MAX - 2) / (fixed + k))
        return leave();
    char *buf = PyMem_Malloc((size_t)(2 + n * (fixed + k)));
    if (buf == NULL)
        return PyErr_NoMemory();
    static const char hex[] = "0123456789abcdef";
    char *q = buf;
    *q++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long id = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(ids, i));
        unsigned long long offset = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(offsets, i));
        if (PyErr_Occurred()) {  /* negative, or past u64 */
            PyErr_Clear();
            PyMem_Free(buf);
            return leave();
        }
        if (i)
            *q++ = ',';
        memcpy(q, a, sizeof a - 1);
        q += sizeof a - 1;
        for (int j = 15; j >= 0; j--, id >>= 4)
            q[j] = hex[id & 15];
        q += 16;
        memcpy(q, b, sizeof b - 1);
        q += sizeof b - 1;
        memcpy(q, PyBytes_AS_STRING(name), (size_t)k);
        q += k;
        memcpy(q, c, sizeof c - 1);
        q += sizeof c - 1;
        char digits[20];
        int m = 0;
        do
            digits[m++] = (char)('0' + offset % 10);
        while (offset /= 10);
        while (m)
            *q++ = digits[--m];
        memcpy(q, d, sizeof d - 1);
        q += sizeof d - 1;
    }
    *q++ = ']';
    PyObject *out = PyBytes_FromStringAndSize(buf, q - buf);
    PyMem_Free(buf);
    return out;
}

static PyMethodDef methods[] = {
    {"encode_publish", (PyCFunction)(void (*)(void))encode_publish, METH_FASTCALL,
     "encode_publish(bodies, keys, flags)"},
    {"encode_publish_text", (PyCFunction)(void (*)(void))encode_publish_text, METH_FASTCALL,
     "encode_publish_text(lengths, key, bodies)"},
    {"decode_publish", (PyCFunction)(void (*)(void))decode_publish, METH_FASTCALL,
     "decode_publish(body, max_records)"},
    {"slices", (PyCFunction)(void (*)(void))slices, METH_FASTCALL, "slices(buffer, start, lengths)"},
    {"encode_results", (PyCFunction)(void (*)(void))encode_results, METH_FASTCALL,
     "encode_results(ids, counts, offsets, name_lengths, names)"},
    {"decode_results", (PyCFunction)(void (*)(void))decode_results, METH_FASTCALL, "decode_results(content)"},
    {"results_json", (PyCFunction)(void (*)(void))results_json, METH_FASTCALL, "results_json(name, ids, offsets)"},
    {"encode_delivered", (PyCFunction)(void (*)(void))encode_delivered, METH_FASTCALL,
     "encode_delivered(n, columns, regions)"},
    {"decode_delivered", (PyCFunction)(void (*)(void))decode_delivered, METH_FASTCALL, "decode_delivered(batch)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_batchc",
    .m_doc = "The compiled twin of batch.py's hot loops.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__batchc(void) {
    return PyModule_Create(&module);
}
