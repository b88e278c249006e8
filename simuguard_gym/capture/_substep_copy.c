/* A substep listener's copies in one C call: the state spans of a substep into a row, and its
 * contact records and constraint forces onto a stage.
 *
 * Inside robosuite's env.step every Python-level operation of a per-substep hook costs 0.3-0.5 us
 * whatever the bytes it moves; the copies themselves take ~0.1 us. This object does them all as
 * one call (the substep hooks call it directly), and calls back into Python only when a batch is
 * full or a substep's contacts would not fit the stage's buffers.
 *
 * It knows nothing of any engine: it copies from addresses it is given (engines/ finds them and
 * checks them against the bindings) into buffers it is given (numpy arrays, kept alive here).
 * Built as an optional extension (setup.py); without it the listeners' Python hooks make the same
 * copies. capture/native.py imports it and binds it to a listener, and
 * MujocoAdapter.bind_substep_copy hands it MuJoCo's addresses.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_SPANS 8

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int active;
    /* Fixed spans: span i copies nbytes[i] from src[i] to offset[i] of the current row. */
    int nspans;
    const char *src[MAX_SPANS];
    Py_ssize_t nbytes[MAX_SPANS];
    Py_ssize_t offset[MAX_SPANS];
    char *rows;
    Py_ssize_t row_bytes, capacity, row;
    /* Records: *count_src (int32) records of stride bytes from records_src, and with them
     * *extra_count_src (int32) float64 values from the address held at extra_ptr_src. */
    int has_records;
    const int32_t *count_src;
    const char *records_src;
    Py_ssize_t stride;
    const int32_t *extra_count_src;
    const char *const *extra_ptr_src;
    char *records, *extra;
    Py_ssize_t records_cap, records_used, extra_cap, extra_used;
    int64_t *counts, *extra_counts; /* per row */
    Py_ssize_t max_staged;          /* bytes; checked every 64 rows */
    PyObject *on_full;              /* on_full(copied: bool) */
    PyObject *keep;                 /* the buffers' owners */
    /* before(phase): the same spans into before_rows[row] and a phase byte, unless the phase is
     * "continue" (nothing can have been written since the last substep). */
    char *before_rows;              /* NULL: before() calls on_before(phase) */
    unsigned char *phases;
    unsigned char whole, split;
    PyObject *on_before;            /* on_before(phase), or None */
} SubstepCopy;

static PyObject *call_on_full(SubstepCopy *self, int copied) {
    PyObject *flag = copied ? Py_True : Py_False;
    PyObject *callback = self->on_full;
    Py_INCREF(callback); /* the callback may re-bind this object */
    PyObject *result = PyObject_CallOneArg(callback, flag);
    Py_DECREF(callback);
    return result;
}

static PyObject *substep_copy_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    SubstepCopy *self = (SubstepCopy *)op;
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "SubstepCopy() takes no arguments");
        return NULL;
    }
    if (!self->active)
        Py_RETURN_NONE;
    Py_ssize_t row = self->row;
    if (row < 0 || row >= self->capacity)
        return call_on_full(self, 0);
    Py_ssize_t n = 0, m = 0, record_bytes = 0, extra_bytes = 0;
    const char *extra_src = NULL;
    if (self->has_records) {
        n = *self->count_src;
        if (n < 0)
            return call_on_full(self, 0);
        if (n) { /* a substep without contacts stages no forces either */
            m = *self->extra_count_src;
            extra_src = *self->extra_ptr_src;
            if (m < 0 || (m && extra_src == NULL))
                return call_on_full(self, 0);
            record_bytes = n * self->stride;
            extra_bytes = m * (Py_ssize_t)sizeof(double);
            if (self->records_used + record_bytes > self->records_cap
                || self->extra_used + extra_bytes > self->extra_cap)
                return call_on_full(self, 0); /* Python grows the buffers and stages this one */
        }
    }
    char *to = self->rows + row * self->row_bytes;
    for (int i = 0; i < self->nspans; i++)
        memcpy(to + self->offset[i], self->src[i], (size_t)self->nbytes[i]);
    if (self->has_records) {
        if (n) {
            memcpy(self->records + self->records_used, self->records_src, (size_t)record_bytes);
            if (extra_bytes)
                memcpy(self->extra + self->extra_used, extra_src, (size_t)extra_bytes);
            self->records_used += record_bytes;
            self->extra_used += extra_bytes;
        }
        self->counts[row] = n;
        self->extra_counts[row] = m;
    }
    self->row = ++row;
    if (row == self->capacity
        || ((row & 63) == 0 && self->has_records && self->records_used + self->extra_used > self->max_staged))
        return call_on_full(self, 1);
    Py_RETURN_NONE;
}

static int phase_is(PyObject *phase, const char *name) {
    return PyUnicode_Check(phase) && PyUnicode_CompareWithASCIIString(phase, name) == 0;
}

PyDoc_STRVAR(before_doc,
"before(phase)\n--\n\nBefore a substep: the state spans into the next before-row and its phase byte\n"
"(nothing for \"continue\"); where no before-rows are bound, on_before(phase).");

static PyObject *substep_copy_before(SubstepCopy *self, PyObject *phase) {
    if (!self->active)
        Py_RETURN_NONE;
    if (self->before_rows == NULL) {
        if (self->on_before == NULL || self->on_before == Py_None)
            Py_RETURN_NONE;
        PyObject *callback = self->on_before;
        Py_INCREF(callback);
        PyObject *result = PyObject_CallOneArg(callback, phase);
        Py_DECREF(callback);
        return result;
    }
    if (phase_is(phase, "continue") || self->row < 0 || self->row >= self->capacity)
        Py_RETURN_NONE; /* a full batch: after() hands that substep to Python, which fails it */
    char *to = self->before_rows + self->row * self->row_bytes;
    for (int i = 0; i < self->nspans; i++)
        memcpy(to + self->offset[i], self->src[i], (size_t)self->nbytes[i]);
    self->phases[self->row] = phase_is(phase, "split") ? self->split : self->whole;
    Py_RETURN_NONE;
}

static int address_of(PyObject *value, void **out, const char *what) {
    void *p = PyLong_AsVoidPtr(value);
    if (p == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "%s: a null address", what);
        return -1;
    }
    *out = p;
    return 0;
}

PyDoc_STRVAR(bind_doc,
"bind(spans, rows, row_bytes, capacity, on_full, keep, row=0, records=None, before=None)\n--\n\n"
"Point the copies at a scene and at buffers, and activate them.\n\n"
"spans: (source address, bytes, offset in a row) each; rows: address of capacity rows of\n"
"row_bytes; row: the next row to fill. records: None, or (count address, records address,\n"
"stride, extra count address, address of the extra pointer, records buffer address, its bytes,\n"
"bytes used, extra buffer address, its bytes, bytes used, counts address, extra counts\n"
"address, max staged bytes). before: None, or (before-rows address, phases address, phase byte\n"
"of a whole substep, of a split one), for before(phase). keep: objects owning that memory,\n"
"held while bound.");

static PyObject *substep_copy_bind(SubstepCopy *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"spans", "rows", "row_bytes", "capacity", "on_full", "keep", "row", "records",
                               "before", NULL};
    PyObject *spans, *rows, *on_full, *keep, *records = Py_None, *before = Py_None;
    Py_ssize_t row_bytes, capacity, row = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOnnOO|nOO:bind", keywords, &spans, &rows, &row_bytes,
                                     &capacity, &on_full, &keep, &row, &records, &before))
        return NULL;
    /* Every argument is checked before anything is changed: a failed bind leaves the object as it was. */
    if (!PyCallable_Check(on_full)) {
        PyErr_SetString(PyExc_TypeError, "on_full must be callable");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(spans, "spans must be a sequence of (address, bytes, offset)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count > MAX_SPANS || capacity < 1 || row_bytes < 0 || row < 0 || row > capacity) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "at most %d spans, capacity >= 1 and 0 <= row <= capacity", MAX_SPANS);
        return NULL;
    }
    const char *src[MAX_SPANS];
    Py_ssize_t nbytes[MAX_SPANS], offset[MAX_SPANS];
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *address;
        if (!PyArg_ParseTuple(item, "Onn:span", &address, &nbytes[i], &offset[i])
            || address_of(address, (void **)&src[i], "span") < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        if (nbytes[i] < 0 || offset[i] < 0 || offset[i] + nbytes[i] > row_bytes) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "a span falls outside the row");
            return NULL;
        }
    }
    Py_DECREF(seq);
    void *rows_at = NULL;
    if (address_of(rows, &rows_at, "rows") < 0)
        return NULL;
    void *before_at = NULL, *phases_at = NULL;
    unsigned char whole = 0, split = 0;
    if (before != Py_None) {
        PyObject *b[2];
        if (!PyArg_ParseTuple(before, "OObb:before", &b[0], &b[1], &whole, &split)
            || address_of(b[0], &before_at, "before rows") < 0 || address_of(b[1], &phases_at, "phases") < 0)
            return NULL;
    }
    int has_records = records != Py_None;
    PyObject *at[7] = {NULL};
    Py_ssize_t stride = 0, records_cap = 0, records_used = 0, extra_cap = 0, extra_used = 0, max_staged = 0;
    void *p[7] = {NULL};
    if (has_records) {
        static const char *names[7] = {"count", "records", "extra count", "extra pointer", "records buffer",
                                       "extra buffer", "counts"};
        PyObject *extra_counts;
        void *extra_counts_at = NULL;
        if (!PyArg_ParseTuple(records, "OOnOOOnnOnnOOn:records", &at[0], &at[1], &stride, &at[2], &at[3], &at[4],
                              &records_cap, &records_used, &at[5], &extra_cap, &extra_used, &at[6], &extra_counts,
                              &max_staged))
            return NULL;
        for (int i = 0; i < 7; i++)
            if (address_of(at[i], &p[i], names[i]) < 0)
                return NULL;
        if (address_of(extra_counts, &extra_counts_at, "extra counts") < 0)
            return NULL;
        if (stride < 1 || records_used < 0 || records_used > records_cap || extra_used < 0 || extra_used > extra_cap
            || extra_used % (Py_ssize_t)sizeof(double)) {
            PyErr_SetString(PyExc_ValueError, "records: stride >= 1, 0 <= used <= bytes (forces: whole float64s)");
            return NULL;
        }
        self->count_src = (const int32_t *)p[0];
        self->records_src = (const char *)p[1];
        self->extra_count_src = (const int32_t *)p[2];
        self->extra_ptr_src = (const char *const *)p[3];
        self->records = (char *)p[4];
        self->extra = (char *)p[5];
        self->counts = (int64_t *)p[6];
        self->extra_counts = (int64_t *)extra_counts_at;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        self->src[i] = src[i];
        self->nbytes[i] = nbytes[i];
        self->offset[i] = offset[i];
    }
    self->nspans = (int)count;
    self->rows = (char *)rows_at;
    self->row_bytes = row_bytes;
    self->capacity = capacity;
    self->row = row;
    self->has_records = has_records;
    self->stride = stride;
    self->records_cap = records_cap;
    self->records_used = records_used;
    self->extra_cap = extra_cap;
    self->extra_used = extra_used;
    self->max_staged = max_staged;
    self->before_rows = (char *)before_at;
    self->phases = (unsigned char *)phases_at;
    self->whole = whole;
    self->split = split;
    Py_INCREF(on_full);
    Py_XSETREF(self->on_full, on_full);
    Py_INCREF(keep);
    Py_XSETREF(self->keep, keep);
    self->active = 1;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(forward_doc,
"forward(on_full, on_before=None)\n--\n\nActivate without memory to copy into: every call becomes\n"
"on_full(False) and every before(phase) on_before(phase), for a listener that copies in Python\n"
"until its buffers can be bound. on_before stays for bind()s without before-rows.");

static PyObject *substep_copy_forward(SubstepCopy *self, PyObject *args) {
    PyObject *on_full, *on_before = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:forward", &on_full, &on_before))
        return NULL;
    if (!PyCallable_Check(on_full) || (on_before != Py_None && !PyCallable_Check(on_before))) {
        PyErr_SetString(PyExc_TypeError, "on_full and on_before must be callable");
        return NULL;
    }
    Py_INCREF(on_before);
    Py_XSETREF(self->on_before, on_before);
    self->before_rows = NULL;
    self->nspans = 0;
    self->has_records = 0;
    self->capacity = 0;
    self->row = 0;
    self->records_used = self->extra_used = 0;
    Py_INCREF(on_full);
    Py_XSETREF(self->on_full, on_full);
    Py_CLEAR(self->keep);
    self->active = 1;
    Py_RETURN_NONE;
}

static PyObject *substep_copy_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "SubstepCopy() takes no arguments; call bind()");
        return NULL;
    }
    SubstepCopy *self = (SubstepCopy *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->vectorcall = substep_copy_vectorcall;
    return (PyObject *)self;
}

static int substep_copy_traverse(SubstepCopy *self, visitproc visit, void *arg) {
    Py_VISIT(self->on_full);
    Py_VISIT(self->keep);
    Py_VISIT(self->on_before);
    return 0;
}

static int substep_copy_clear(SubstepCopy *self) {
    self->active = 0;
    self->before_rows = NULL;
    Py_CLEAR(self->on_full);
    Py_CLEAR(self->keep);
    Py_CLEAR(self->on_before);
    return 0;
}

static void substep_copy_dealloc(SubstepCopy *self) {
    PyObject_GC_UnTrack(self);
    substep_copy_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *get_active(SubstepCopy *self, void *closure) { return PyBool_FromLong(self->active); }

static int set_active(SubstepCopy *self, PyObject *value, void *closure) {
    int truth = value == NULL ? 0 : PyObject_IsTrue(value);
    if (truth < 0)
        return -1;
    if (truth && self->on_full == NULL) {
        PyErr_SetString(PyExc_ValueError, "bind() first");
        return -1;
    }
    self->active = truth;
    return 0;
}

static PyObject *get_row(SubstepCopy *self, void *closure) { return PyLong_FromSsize_t(self->row); }
static PyObject *get_records_used(SubstepCopy *self, void *closure) { return PyLong_FromSsize_t(self->records_used); }
static PyObject *get_extra_used(SubstepCopy *self, void *closure) { return PyLong_FromSsize_t(self->extra_used); }

static PyGetSetDef substep_copy_getset[] = {
    {"active", (getter)get_active, (setter)set_active, "Whether a call copies (else it does nothing).", NULL},
    {"row", (getter)get_row, NULL, "The next row to fill.", NULL},
    {"records_used", (getter)get_records_used, NULL, "Bytes of records staged.", NULL},
    {"extra_used", (getter)get_extra_used, NULL, "Bytes of extra values (forces) staged.", NULL},
    {NULL},
};

static PyMethodDef substep_copy_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))substep_copy_bind, METH_VARARGS | METH_KEYWORDS, bind_doc},
    {"forward", (PyCFunction)substep_copy_forward, METH_VARARGS, forward_doc},
    {"before", (PyCFunction)substep_copy_before, METH_O, before_doc},
    {NULL},
};

static PyTypeObject SubstepCopyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_simuguard_substep_copy.SubstepCopy",
    .tp_doc = "A substep's state spans into a row and its contacts onto a stage, in one call (see bind()).",
    .tp_basicsize = sizeof(SubstepCopy),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = substep_copy_new,
    .tp_dealloc = (destructor)substep_copy_dealloc,
    .tp_traverse = (traverseproc)substep_copy_traverse,
    .tp_clear = (inquiry)substep_copy_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SubstepCopy, vectorcall),
    .tp_methods = substep_copy_methods,
    .tp_getset = substep_copy_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_simuguard_substep_copy",
    .m_doc = "A substep listener's copies in one C call (optional; see simuguard_gym/capture/native.py).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__simuguard_substep_copy(void) {
    if (PyType_Ready(&SubstepCopyType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SubstepCopyType);
    if (PyModule_AddObject(m, "SubstepCopy", (PyObject *)&SubstepCopyType) < 0) {
        Py_DECREF(&SubstepCopyType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
