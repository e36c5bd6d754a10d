/* The compiled twins of blob.py's `parse` (a page of stored blobs read as columns in one pass) and
   `text_blobs` (the stored blobs of a batch of plain text bodies, built in one pass).

   blob.py is the reference: its module docstring has the blob's layout, and its parse gives the
   columns this gives, odd rows included (the property tests in tests/broker/test_blobc.py hold them
   together). blob.py calls the twin first and runs its numpy code when the twin answers None: for
   arrays of other types or shapes and for starts numpy would read from the buffer's end (negative). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEAD 0x80
#define BINARY 0x08
#define LONG 0xFF   /* a length byte saying the length follows as u16 */
#define MEMBERS 3   /* exchange, routing key, headers: head bits 0x01, 0x02, 0x04, in this order */
#define FAR ((int64_t)1 << 61)  /* starts and lengths beyond it are left to numpy (sums would wrap) */

/* A one-dimensional buffer of `format` (one character, native order) and `itemsize`, any stride. */
static int open_array(PyObject *obj, Py_buffer *view, char format, Py_ssize_t itemsize, int writable) {
    if (PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    int known = f[0] == format || (format == 'q' && f[0] == 'l' && itemsize == 8);
    if (view->ndim != 1 || !known || f[1] != '\0' || view->itemsize != itemsize) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

static int64_t at(const Py_buffer *v, Py_ssize_t i) {
    int64_t x;
    memcpy(&x, (const char *)v->buf + i * v->strides[0], 8);
    return x;
}

/* parse(buf, start, length, out, flags): the blobs at (start, length) of buf (uint8) as columns:
   into out (int64, 9 x n) the head, then start and length of exchange, routing key, headers and
   body; into flags (bool, 2 x n) binary and odd. True, or None to leave the page to numpy. */
static PyObject *parse(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "parse() takes 5 arguments");
        return NULL;
    }
    Py_buffer v[5];
    static const char formats[5] = {'B', 'q', 'q', 'q', '?'};
    static const Py_ssize_t sizes[5] = {1, 8, 8, 8, 1};
    int got = 0;
    PyObject *result = NULL;
    for (; got < 5; got++)
        if (!open_array(args[got], &v[got], formats[got], sizes[got], got >= 3))
            goto done;
    Py_ssize_t n = v[1].shape[0];
    if (v[2].shape[0] != n || v[3].shape[0] != 9 * n || v[4].shape[0] != 2 * n ||
        v[0].strides[0] != 1 || v[3].strides[0] != 8 || v[4].strides[0] != 1)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = at(&v[1], i), len = at(&v[2], i);
        if (s < 0 || s > FAR || len < -FAR || len > FAR)
            goto done;
    }
    const unsigned char *buf = v[0].buf;
    int64_t last = (int64_t)v[0].len - 1;  /* probes past a short blob are clamped into the buffer */
    int64_t *out = v[3].buf;
    unsigned char *flags = v[4].buf;
#define BYTE(x) (last < 0 ? 0 : (int64_t)buf[(x) < last ? (x) : last])
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = at(&v[1], i), len = at(&v[2], i), end = s + len;
        int64_t head = len > 0 ? BYTE(s) : 0, p = s + 1;
        out[i] = head;
        for (int m = 0; m < MEMBERS; m++) {
            int64_t begin = p, size = 0;
            if (head & (1 << m)) {
                size = BYTE(p);
                begin = p + 1;
                if (size == LONG) {
                    size = BYTE(p + 1) | BYTE(p + 2) << 8;
                    begin = p + 3;
                }
            }
            out[(1 + 2 * m) * n + i] = begin;
            out[(2 + 2 * m) * n + i] = size;
            p = begin + size;
        }
        out[7 * n + i] = p;
        out[8 * n + i] = end - p;
        flags[i] = (head & BINARY) != 0;
        flags[n + i] = (head & 0xF0) != HEAD || p > end;
    }
#undef BYTE
    Py_INCREF(Py_True);
    result = Py_True;
done:
    while (got > 0)
        PyBuffer_Release(&v[--got]);
    if (result == NULL && !PyErr_Occurred()) {
        Py_INCREF(Py_None);
        result = Py_None;
    }
    return result;
}

/* text_blobs(head, buffer, start, lengths): a list of `head` + each piece of `buffer` cut by the
   list `lengths` from `start`, when every byte of the pieces is ASCII that JSON writes as it is
   (0x20-0x7F but the quote and the backslash); None for anything else, blob.py then decides. */
static PyObject *text_blobs(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "text_blobs() takes 4 arguments");
        return NULL;
    }
    PyObject *head = args[0], *buffer = args[1], *lengths = args[3];
    if (!PyBytes_CheckExact(head) || !PyBytes_CheckExact(buffer) || !PyLong_CheckExact(args[2]) ||
        !PyList_CheckExact(lengths))
        Py_RETURN_NONE;
    Py_ssize_t start = PyLong_AsSsize_t(args[2]), n = PyList_GET_SIZE(lengths);
    if (start == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (start < 0 || start > PyBytes_GET_SIZE(buffer))
        Py_RETURN_NONE;
    Py_ssize_t room = PyBytes_GET_SIZE(buffer) - start, total = 0;
    PyObject **items = PySequence_Fast_ITEMS(lengths);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyLong_CheckExact(items[i]))
            Py_RETURN_NONE;
        Py_ssize_t len = PyLong_AsSsize_t(items[i]);
        if (len < 0 || len > room - total) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        total += len;
    }
    const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(buffer) + start;
    unsigned char bad = 0;
    for (Py_ssize_t i = 0; i < total; i++) {
        unsigned char c = text[i];
        bad |= (unsigned char)((c < 0x20) | (c >= 0x80) | (c == '"') | (c == '\\'));
    }
    if (bad)
        Py_RETURN_NONE;
    Py_ssize_t h = PyBytes_GET_SIZE(head);
    const char *at = (const char *)text;
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        Py_ssize_t len = PyLong_AsSsize_t(items[i]);
        PyObject *blob = PyBytes_FromStringAndSize(NULL, h + len);
        if (blob == NULL) {
            Py_CLEAR(list);
            break;
        }
        memcpy(PyBytes_AS_STRING(blob), PyBytes_AS_STRING(head), (size_t)h);
        memcpy(PyBytes_AS_STRING(blob) + h, at, (size_t)len);
        PyList_SET_ITEM(list, i, blob);
        at += len;
    }
    return list;
}

static PyMethodDef methods[] = {
    {"parse", (PyCFunction)(void (*)(void))parse, METH_FASTCALL, "parse(buf, start, length, out, flags)"},
    {"text_blobs", (PyCFunction)(void (*)(void))text_blobs, METH_FASTCALL, "text_blobs(head, buffer, start, lengths)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_blobc",
    .m_doc = "The compiled twins of blob.py's parse and text_blobs.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__blobc(void) {
    return PyModule_Create(&module);
}
