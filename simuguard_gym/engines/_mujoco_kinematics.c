/* MuJoCo's kinematics of many recorded states in one call: no Python runs per state.
 *
 * Decoding a chunk of recorded substeps needs, for bodies on joints, MuJoCo's kinematics of
 * every substep's state: mj_setState, mj_kinematics, mj_comPos, mj_comVel on a scratch mjData,
 * then its body arrays copied out. From Python that is nine calls per state, and their overhead
 * is most of the decode; here it is one call per chunk, calling the same C functions of the
 * same library in the same order, so the arrays are bit for bit those of the Python loop.
 *
 * Knows nothing of MuJoCo's headers: the five functions are addresses in the libmujoco the
 * bindings loaded, the scratch mjData's arrays addresses of its numpy views (both from
 * engines/mujoco_kinematics.py). Optional (setup.py): without it the loop runs in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NOUT 5

typedef void (*set_state_fn)(const void *m, void *d, const double *state, int sig);
typedef void (*model_data_fn)(const void *m, void *d);
typedef int (*state_size_fn)(const void *m, int sig);

/* kinematics(functions, model, data, sig, states, sources, outputs)
 *   functions: (mj_stateSize, mj_setState, mj_kinematics, mj_comPos, mj_comVel) addresses
 *   model, data: mjModel* and the scratch mjData* addresses
 *   states: a C-contiguous float64 buffer of n states of the signature sig (mj_stateSize's words each)
 *   sources: NOUT (address, words) of the scratch's arrays to copy after each state
 *   outputs: NOUT writable C-contiguous float64 buffers of n x words each */
static PyObject *kinematics(PyObject *self, PyObject *args) {
    unsigned long long f_size, f_set, f_kin, f_pos, f_vel, model, data;
    int sig;
    Py_buffer states;
    PyObject *sources, *outputs;
    if (!PyArg_ParseTuple(args, "(KKKKK)KKiy*OO", &f_size, &f_set, &f_kin, &f_pos, &f_vel, &model, &data, &sig, &states,
                          &sources, &outputs))
        return NULL;
    Py_buffer out[NOUT];
    const double *src[NOUT];
    Py_ssize_t words[NOUT];
    int held = 0;
    PyObject *result = NULL;
    if (!f_size || !f_set || !f_kin || !f_pos || !f_vel || !model || !data) {
        PyErr_SetString(PyExc_ValueError, "a function or an address is 0");
        goto done;
    }
    if (!PyTuple_Check(sources) || PyTuple_GET_SIZE(sources) != NOUT || !PyTuple_Check(outputs) ||
        PyTuple_GET_SIZE(outputs) != NOUT) {
        PyErr_SetString(PyExc_TypeError, "sources and outputs are tuples of 5");
        goto done;
    }
    if (states.len % sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "states are not float64");
        goto done;
    }
    for (int i = 0; i < NOUT; i++) {
        unsigned long long address;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(sources, i), "Kn", &address, &words[i]))
            goto done;
        src[i] = (const double *)(uintptr_t)address;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(outputs, i), &out[i], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        held++;
        if (!src[i] || words[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "a source is 0 or negative in size");
            goto done;
        }
    }
    /* n states, each of the model's state size: mj_setState reads no word past the buffer */
    Py_ssize_t size = ((state_size_fn)(uintptr_t)f_size)((const void *)(uintptr_t)model, sig);
    Py_ssize_t n = words[0] > 0 ? out[0].len / (Py_ssize_t)sizeof(double) / words[0] : -1;
    if (size <= 0 || n < 0 || states.len != n * size * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "states and outputs do not agree on their count, or a state is not "
                                          "the model's state size");
        goto done;
    }
    for (int i = 0; i < NOUT; i++) {
        if (out[i].len != n * words[i] * (Py_ssize_t)sizeof(double)) {
            PyErr_SetString(PyExc_ValueError, "an output is not n x its source's words");
            goto done;
        }
    }
    set_state_fn set_state = (set_state_fn)(uintptr_t)f_set;
    model_data_fn kin = (model_data_fn)(uintptr_t)f_kin, com_pos = (model_data_fn)(uintptr_t)f_pos,
                  com_vel = (model_data_fn)(uintptr_t)f_vel;
    const void *m = (const void *)(uintptr_t)model;
    void *d = (void *)(uintptr_t)data;
    const double *state = (const double *)states.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        set_state(m, d, state + k * size, sig);
        kin(m, d);
        com_pos(m, d);
        com_vel(m, d);
        for (int i = 0; i < NOUT; i++)
            memcpy((double *)out[i].buf + k * words[i], src[i], (size_t)words[i] * sizeof(double));
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&out[i]);
    PyBuffer_Release(&states);
    return result;
}

static PyMethodDef methods[] = {
    {"kinematics", kinematics, METH_VARARGS,
     "kinematics(functions, model, data, sig, states, sources, outputs): MuJoCo's kinematics of each state"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_simuguard_mujoco_kinematics",
                                    "MuJoCo's kinematics of many states in one call (engines/mujoco_kinematics.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__simuguard_mujoco_kinematics(void) { return PyModule_Create(&module); }
