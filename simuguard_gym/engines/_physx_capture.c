/* PhysX contacts and state of one SAPIEN 3.0.3 substep, each read in one C call.
 *
 * SAPIEN's Python API builds a Python object for every contact point and every value read from
 * it; a can resting in a basket of centimetre pieces has hundreds of points per substep, so
 * reading them through that API costs more than the physics. This module reads the same values
 * from the C++ objects behind the PhysxContact list that scene.get_contacts() returns:
 *
 * - the objects are SAPIEN's own structs, as its wheel publishes them in
 *   sapien/include/sapien/physx/simulation_callback.hpp (mirrored below);
 * - a PhysxContact, a component or a shape is a pybind11 instance (pybind11/detail/common.h,
 *   struct instance): after the Python object header, either the C++ pointer itself (simple
 *   layout) or a pointer to the array whose first entry it is (SAPIEN's build), told apart by
 *   the simple_layout bit of the flags after the union and the weak-reference list.
 *
 * Both are facts of the pinned SAPIEN build, not promises of its API, so engines/sapien_contacts.py
 * compares this reader's rows with the Python API's on the first substep with contacts of every
 * scene it binds, and reads through the Python API wherever they differ. Nothing here knows a
 * simulator beyond those two layouts: the Python side gives the addresses of the scene's bodies
 * and pieces (their pybind11 value pointers, found the same way) and the buffers to fill.
 *
 * The state comes from PhysxCpuSystem.pack(), SAPIEN's own snapshot; gather() puts its float32
 * values where the adapter's state vector holds them, as float64, without numpy temporaries.
 *
 * Built as an optional extension (setup.py): without it the adapter reads the same values in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define READER_VERSION 1
#define ROW 13 /* float64 per kept piece pair, as engines/sapien_contacts.py's ROW_COLUMNS */

typedef struct { float x, y, z; } vec3;                                  /* sapien::Vec3 */
typedef struct { vec3 position, normal, impulse; float separation; } contact_point; /* sapien::physx::ContactPoint */
typedef struct {                                                         /* sapien::physx::Contact */
    void *components[2];
    void *shapes[2];
    contact_point *begin, *end, *capacity;                               /* std::vector<ContactPoint> */
} contact;

typedef struct {                                                         /* pybind11::detail::instance */
    PyObject_HEAD
    void *values[3];       /* simple_value_holder[1 + 2 pointers of a shared_ptr], or values_and_holders */
    PyObject *weakrefs;
    uint8_t flags;         /* bit 0 owned, bit 1 simple_layout, ... */
} pybind_instance;

static void *value_of(PyObject *obj) {
    pybind_instance *instance = (pybind_instance *)obj;
    return (instance->flags & 2) ? instance->values[0] : *(void **)instance->values[0];
}

/* The index of key in sorted keys[n] (values[i] belongs to keys[i]), or -1. */
static int64_t lookup(const uint64_t *keys, const int64_t *values, Py_ssize_t n, uint64_t key) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < key) lo = mid + 1; else hi = mid;
    }
    return (lo < n && keys[lo] == key) ? values[lo] : -1;
}

static int append(PyObject *buffer, const void *data, Py_ssize_t nbytes) {
    Py_ssize_t at = PyByteArray_GET_SIZE(buffer);
    if (PyByteArray_Resize(buffer, at + nbytes) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(buffer) + at, data, (size_t)nbytes);
    return 0;
}

/* value_of(objects[i]) for a sequence of pybind11 objects, as uint64 bytes. */
static PyObject *value_addresses(PyObject *self, PyObject *args) {
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "O", &seq)) return NULL;
    PyObject *fast = PySequence_Fast(seq, "addresses() takes a sequence");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint64_t));
    if (out) {
        uint64_t *dst = (uint64_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) dst[i] = (uint64_t)(uintptr_t)value_of(PySequence_Fast_GET_ITEM(fast, i));
    }
    Py_DECREF(fast);
    return out;
}

/* read(contacts, body_keys, body_ids, shape_keys, shape_ids, tracked, robot, tolerance, rows, impulses,
 *      robot_rows)
 *
 * For each contact of the list whose two bodies are known (body_keys: sorted uint64 addresses,
 * body_ids: int64 body index of each) and one of them tracked (uint8 per body), whose closest
 * point is at most `tolerance` apart: one row of ROW float64 appended to the bytearray `rows`
 * (bodies, pieces (-1 unknown), depth of the closest point, its normal, the number of points, the
 * robot side (robot[i0] - robot[i1]), its position) and each point's impulse (3 float64) to
 * `impulses`; for rows with a robot side, (row number in this call, the robot's body) as two int64
 * to `robot_rows` (the adapter reads those links' motion). The closest point is the first of the
 * least separation, as Python's min() and list.index() find it. Returns the number of rows
 * appended. */
static PyObject *read_contacts(PyObject *self, PyObject *args) {
    PyObject *contacts, *rows, *impulses, *robot_rows;
    Py_buffer bk, bi, sk, si, tr, rb;
    double tolerance;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*y*y*dYYY", &contacts, &bk, &bi, &sk, &si, &tr, &rb, &tolerance,
                          &rows, &impulses, &robot_rows))
        return NULL;
    long kept = -1;
    PyObject *fast = PySequence_Fast(contacts, "read() takes the list of scene.get_contacts()");
    if (!fast) goto done;
    const uint64_t *body_keys = bk.buf, *shape_keys = sk.buf;
    const int64_t *body_ids = bi.buf, *shape_ids = si.buf;
    const uint8_t *tracked = tr.buf, *robot = rb.buf;
    Py_ssize_t nbody_keys = bk.len / 8, nshape_keys = sk.len / 8, nbodies = tr.len;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    kept = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        const contact *c = value_of(PySequence_Fast_GET_ITEM(fast, k));
        int64_t i0 = lookup(body_keys, body_ids, nbody_keys, (uint64_t)(uintptr_t)c->components[0]);
        int64_t i1 = lookup(body_keys, body_ids, nbody_keys, (uint64_t)(uintptr_t)c->components[1]);
        if (i0 < 0 || i1 < 0 || i0 >= nbodies || i1 >= nbodies || !(tracked[i0] || tracked[i1])) continue;
        Py_ssize_t npoints = c->end - c->begin;
        if (npoints <= 0) continue;
        Py_ssize_t closest = 0;
        for (Py_ssize_t p = 1; p < npoints; p++)
            if (c->begin[p].separation < c->begin[closest].separation) closest = p;
        const contact_point *deepest = c->begin + closest;
        if ((double)deepest->separation > tolerance) continue; /* speculative: pieces apart */
        double row[ROW] = {
            (double)i0, (double)i1,
            (double)lookup(shape_keys, shape_ids, nshape_keys, (uint64_t)(uintptr_t)c->shapes[0]),
            (double)lookup(shape_keys, shape_ids, nshape_keys, (uint64_t)(uintptr_t)c->shapes[1]),
            -(double)deepest->separation,
            deepest->normal.x, deepest->normal.y, deepest->normal.z,
            (double)npoints, (double)robot[i0] - (double)robot[i1],
            deepest->position.x, deepest->position.y, deepest->position.z,
        };
        if (append(rows, row, sizeof row) < 0) { kept = -1; break; }
        Py_ssize_t at = PyByteArray_GET_SIZE(impulses);
        if (PyByteArray_Resize(impulses, at + npoints * 3 * (Py_ssize_t)sizeof(double)) < 0) { kept = -1; break; }
        double *dst = (double *)(PyByteArray_AS_STRING(impulses) + at);
        for (Py_ssize_t p = 0; p < npoints; p++) {
            dst[3 * p] = c->begin[p].impulse.x;
            dst[3 * p + 1] = c->begin[p].impulse.y;
            dst[3 * p + 2] = c->begin[p].impulse.z;
        }
        if (robot[i0] != robot[i1]) {
            int64_t link[2] = {kept, robot[i0] ? i0 : i1};
            if (append(robot_rows, link, sizeof link) < 0) { kept = -1; break; }
        }
        kept++;
    }
    Py_DECREF(fast);
done:
    PyBuffer_Release(&bk); PyBuffer_Release(&bi); PyBuffer_Release(&sk); PyBuffer_Release(&si);
    PyBuffer_Release(&tr); PyBuffer_Release(&rb);
    return kept < 0 ? NULL : PyLong_FromLong(kept);
}

/* gather(packed, src, out, dst): out[dst[i]] = (double)packed[src[i]] for float32 `packed`, int64
 * `src` and `dst`, float64 `out` (writable); indices are checked against the buffers. */
static PyObject *gather(PyObject *self, PyObject *args) {
    Py_buffer packed, src, out, dst;
    if (!PyArg_ParseTuple(args, "y*y*w*y*", &packed, &src, &out, &dst)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = src.len / 8, npacked = packed.len / 4, nout = out.len / 8;
    const float *from = packed.buf;
    const int64_t *s = src.buf, *d = dst.buf;
    double *to = out.buf;
    if (dst.len != src.len) {
        PyErr_SetString(PyExc_ValueError, "gather(): src and dst differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || s[i] >= npacked || d[i] < 0 || d[i] >= nout) {
            PyErr_SetString(PyExc_IndexError, "gather(): an index is outside its buffer");
            goto done;
        }
        to[d[i]] = (double)from[s[i]];
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&packed); PyBuffer_Release(&src); PyBuffer_Release(&out); PyBuffer_Release(&dst);
    return result;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS, "out[dst] = packed[src], float32 to float64 (see the module doc)."},
    {"read", read_contacts, METH_VARARGS, "Stage the rows and impulses of one substep's contacts (see the module doc)."},
    {"addresses", value_addresses, METH_VARARGS, "The C++ objects behind pybind11 objects, as uint64 bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_simuguard_physx_capture",
                                    "SAPIEN 3.0.3's PhysX contacts and state read in one C call each.", -1, methods};

PyMODINIT_FUNC PyInit__simuguard_physx_capture(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "ROW", ROW) < 0 || PyModule_AddIntConstant(m, "VERSION", READER_VERSION) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
