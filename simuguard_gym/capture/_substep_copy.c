/* A substep listener's copies in one C call: the state spans of a substep into a row, and its
 * contact records and constraint forces onto a stage.
 *
 * Inside robosuite's env.step every Python-level operation of a per-substep hook costs several
 * times what the bytes it moves take to copy. This object does them all as
 * one call (the substep hooks call it directly), and calls back into Python only when a batch is
 * full or a substep's contacts would not fit the stage's buffers.
 *
 * It knows nothing of any engine: it copies from addresses it is given (engines/ finds them and
 * checks them against the bindings) into buffers it is given (numpy arrays, kept alive here).
 * bind() takes them as one named structure, copy_binding, which capture/native.py mirrors field
 * by field as a ctypes Structure (CopyBinding); binding_layout() gives this file's offsets and
 * sizes, which the Python side compares with its own before it binds anything.
 * Built as an optional extension (setup.py); without it the listeners' Python hooks make the same
 * copies. capture/native.py imports it and binds it to a listener, with MuJoCo's addresses from
 * the adapter's copy_sources() (engines/mujoco_contacts.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_SPANS 8
#define BINDING_VERSION 1

/* Where the copies read and write; mirrored by capture/native.py's CopyBinding (every field 8 bytes
 * wide, so that no padding differs between compilers). Addresses are 0 where unused. */
typedef struct {
    uint64_t version;                /* BINDING_VERSION */
    uint64_t nspans;                 /* spans copied into each row */
    uint64_t span_src[MAX_SPANS];    /* span i: span_bytes[i] from span_src[i] to span_offset[i] of a row */
    int64_t span_bytes[MAX_SPANS];
    int64_t span_offset[MAX_SPANS];
    uint64_t rows;                   /* capacity rows of row_bytes; the next one to fill: row */
    int64_t row_bytes;
    int64_t capacity;
    int64_t row;
    uint64_t has_records;            /* 0: no contact records are staged */
    uint64_t count_src;              /* int32: records of this substep */
    uint64_t records_src;            /* the records, stride bytes apart */
    int64_t stride;
    uint64_t extra_count_src;        /* int32: float64 values staged with them (constraint forces) */
    uint64_t extra_ptr_src;          /* the address of the pointer to those values */
    uint64_t records;                /* the stage: records_cap bytes, records_used of them used */
    int64_t records_cap;
    int64_t records_used;
    uint64_t extra;                  /* extra_cap bytes of float64 values, extra_used used */
    int64_t extra_cap;
    int64_t extra_used;
    uint64_t counts;                 /* int64 per row: records staged, */
    uint64_t extra_counts;           /* and values */
    int64_t max_staged;              /* bytes staged after which a batch ends (checked every 64 rows) */
    uint64_t before_rows;            /* rows like `rows` for before(); 0: before() calls on_before */
    uint64_t phases;                 /* a phase byte per row */
    uint64_t whole;                  /* the phase byte of a whole substep, */
    uint64_t split;                  /* and of a split one */
} copy_binding;

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

PyDoc_STRVAR(bind_doc,
"bind(binding, on_full, keep)\n--\n\n"
"Point the copies at a scene and at buffers, and activate them. binding: the bytes of a\n"
"copy_binding (capture/native.py's CopyBinding; binding_layout() gives its fields); keep: objects\n"
"owning that memory, held while bound.");

static PyObject *substep_copy_bind(SubstepCopy *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"binding", "on_full", "keep", NULL};
    Py_buffer view;
    PyObject *on_full, *keep;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*OO:bind", keywords, &view, &on_full, &keep))
        return NULL;
    copy_binding b;
    int size_ok = view.len == (Py_ssize_t)sizeof(copy_binding);
    if (size_ok)
        memcpy(&b, view.buf, sizeof(copy_binding));
    PyBuffer_Release(&view);
    /* Every field is checked before anything is changed: a failed bind leaves the object as it was. */
    if (!size_ok || b.version != BINDING_VERSION) {
        PyErr_Format(PyExc_ValueError, "a copy_binding is %zd bytes, version %d: capture/native.py and "
                     "_substep_copy.c disagree (rebuild the extension)", sizeof(copy_binding), BINDING_VERSION);
        return NULL;
    }
    if (!PyCallable_Check(on_full)) {
        PyErr_SetString(PyExc_TypeError, "on_full must be callable");
        return NULL;
    }
    if (b.nspans > MAX_SPANS || b.capacity < 1 || b.row_bytes < 0 || b.row < 0 || b.row > b.capacity || !b.rows) {
        PyErr_Format(PyExc_ValueError, "at most %d spans, rows, capacity >= 1 and 0 <= row <= capacity", MAX_SPANS);
        return NULL;
    }
    for (uint64_t i = 0; i < b.nspans; i++) {
        if (!b.span_src[i] || b.span_bytes[i] < 0 || b.span_offset[i] < 0
            || b.span_offset[i] + b.span_bytes[i] > b.row_bytes) {
            PyErr_SetString(PyExc_ValueError, "a span has no source or falls outside the row");
            return NULL;
        }
    }
    if (b.before_rows && !b.phases) {
        PyErr_SetString(PyExc_ValueError, "before rows need phases");
        return NULL;
    }
    if (b.has_records) {
        if (!b.count_src || !b.records_src || !b.extra_count_src || !b.extra_ptr_src || !b.records || !b.extra
            || !b.counts || !b.extra_counts) {
            PyErr_SetString(PyExc_ValueError, "records: a null address");
            return NULL;
        }
        if (b.stride < 1 || b.records_used < 0 || b.records_used > b.records_cap || b.extra_used < 0
            || b.extra_used > b.extra_cap || b.extra_used % (int64_t)sizeof(double)) {
            PyErr_SetString(PyExc_ValueError, "records: stride >= 1, 0 <= used <= bytes (forces: whole float64s)");
            return NULL;
        }
    }
    for (uint64_t i = 0; i < b.nspans; i++) {
        self->src[i] = (const char *)(uintptr_t)b.span_src[i];
        self->nbytes[i] = (Py_ssize_t)b.span_bytes[i];
        self->offset[i] = (Py_ssize_t)b.span_offset[i];
    }
    self->nspans = (int)b.nspans;
    self->rows = (char *)(uintptr_t)b.rows;
    self->row_bytes = (Py_ssize_t)b.row_bytes;
    self->capacity = (Py_ssize_t)b.capacity;
    self->row = (Py_ssize_t)b.row;
    self->has_records = b.has_records != 0;
    self->count_src = (const int32_t *)(uintptr_t)b.count_src;
    self->records_src = (const char *)(uintptr_t)b.records_src;
    self->stride = (Py_ssize_t)b.stride;
    self->extra_count_src = (const int32_t *)(uintptr_t)b.extra_count_src;
    self->extra_ptr_src = (const char *const *)(uintptr_t)b.extra_ptr_src;
    self->records = (char *)(uintptr_t)b.records;
    self->records_cap = (Py_ssize_t)b.records_cap;
    self->records_used = (Py_ssize_t)b.records_used;
    self->extra = (char *)(uintptr_t)b.extra;
    self->extra_cap = (Py_ssize_t)b.extra_cap;
    self->extra_used = (Py_ssize_t)b.extra_used;
    self->counts = (int64_t *)(uintptr_t)b.counts;
    self->extra_counts = (int64_t *)(uintptr_t)b.extra_counts;
    self->max_staged = (Py_ssize_t)b.max_staged;
    self->before_rows = (char *)(uintptr_t)b.before_rows;
    self->phases = (unsigned char *)(uintptr_t)b.phases;
    self->whole = (unsigned char)b.whole;
    self->split = (unsigned char)b.split;
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

#define FIELD(name) {#name, offsetof(copy_binding, name), sizeof(((copy_binding *)0)->name)}
static const struct { const char *name; size_t offset, size; } binding_fields[] = {
    FIELD(version), FIELD(nspans), FIELD(span_src), FIELD(span_bytes), FIELD(span_offset), FIELD(rows),
    FIELD(row_bytes), FIELD(capacity), FIELD(row), FIELD(has_records), FIELD(count_src), FIELD(records_src),
    FIELD(stride), FIELD(extra_count_src), FIELD(extra_ptr_src), FIELD(records), FIELD(records_cap),
    FIELD(records_used), FIELD(extra), FIELD(extra_cap), FIELD(extra_used), FIELD(counts), FIELD(extra_counts),
    FIELD(max_staged), FIELD(before_rows), FIELD(phases), FIELD(whole), FIELD(split),
};

PyDoc_STRVAR(binding_layout_doc,
"binding_layout()\n--\n\n(version, size, ((field, offset, size), ...)) of this build's copy_binding.");

static PyObject *binding_layout(PyObject *module, PyObject *unused) {
    size_t n = sizeof(binding_fields) / sizeof(binding_fields[0]);
    PyObject *fields = PyTuple_New((Py_ssize_t)n);
    if (fields == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *item = Py_BuildValue("(snn)", binding_fields[i].name, (Py_ssize_t)binding_fields[i].offset,
                                       (Py_ssize_t)binding_fields[i].size);
        if (item == NULL) {
            Py_DECREF(fields);
            return NULL;
        }
        PyTuple_SET_ITEM(fields, (Py_ssize_t)i, item);
    }
    return Py_BuildValue("(inN)", BINDING_VERSION, (Py_ssize_t)sizeof(copy_binding), fields);
}

/* An error a listener raised: handed to escaped(where, error), where is "after_substep" or, with a
 * phase, "before_substep(<phase>)"; an error that is not an Exception (KeyboardInterrupt,
 * SystemExit) stays raised, as `except Exception` would leave it. */
static int hand_over(PyObject *escaped, PyObject *phase, PyObject *after_where) {
    PyObject *type, *value, *traceback;
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL)
        PyException_SetTraceback(value, traceback);
    /* Only now, with no error pending, may the Python API run. */
    PyObject *where = phase != NULL ? PyUnicode_FromFormat("before_substep(%U)", phase) : after_where;
    if (phase == NULL)
        Py_INCREF(where);
    PyObject *result = where == NULL ? NULL : PyObject_CallFunctionObjArgs(escaped, where, value, NULL);
    Py_XDECREF(where);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (result == NULL)
        return -1;
    Py_DECREF(result);
    return 0;
}

PyDoc_STRVAR(run_substeps_doc,
"run_substeps(before, advance, args, n, after, phase, escaped)\n--\n\n"
"n substeps, advance(*args) each, with before(phase) (None: no call) before the first and\n"
"before('continue') before the later ones, and after() after each: SubstepHooks.around's loop\n"
"without a Python frame per substep. What the listeners raise goes to escaped(where, error);\n"
"what advance raises is raised.");

static PyObject *run_substeps(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    static PyObject *continued = NULL, *after_where = NULL;
    if (nargs != 7 || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "run_substeps(before, advance, args: tuple, n, after, phase, escaped)");
        return NULL;
    }
    if (continued == NULL && (continued = PyUnicode_InternFromString("continue")) == NULL)
        return NULL;
    if (after_where == NULL && (after_where = PyUnicode_InternFromString("after_substep")) == NULL)
        return NULL;
    PyObject *before = args[0], *advance = args[1], *after = args[4], *phase = args[5], *escaped = args[6];
    Py_ssize_t n = PyLong_AsSsize_t(args[3]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    PyObject *const *call = &PyTuple_GET_ITEM(args[2], 0);
    size_t ncall = (size_t)PyTuple_GET_SIZE(args[2]);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *now = i == 0 ? phase : continued, *result;
        if (before != Py_None) {
            if ((result = PyObject_CallOneArg(before, now)) != NULL)
                Py_DECREF(result);
            else if (hand_over(escaped, now, after_where))
                return NULL;
        }
        if ((result = PyObject_Vectorcall(advance, call, ncall, NULL)) == NULL)
            return NULL;
        Py_DECREF(result);
        if ((result = PyObject_CallNoArgs(after)) != NULL)
            Py_DECREF(result);
        else if (hand_over(escaped, NULL, after_where))
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"binding_layout", binding_layout, METH_NOARGS, binding_layout_doc},
    {"run_substeps", (PyCFunction)(void (*)(void))run_substeps, METH_FASTCALL, run_substeps_doc},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_simuguard_substep_copy",
    .m_doc = "A substep listener's copies in one C call (optional; see simuguard_gym/capture/native.py).",
    .m_size = -1,
    .m_methods = module_methods,
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
