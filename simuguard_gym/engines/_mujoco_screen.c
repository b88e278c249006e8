/* MuJoCo's control callback as a substep screen: no Python runs per substep.
 *
 * MuJoCo calls its global control callback (mjcb_control) once in every mj_step, after the
 * substep's positions, velocities and contacts are computed and before it integrates. At that
 * point mjData holds the state the substep starts from (the state the previous one ended in,
 * with whatever the env wrote since), its centre-of-mass velocities and its contacts. For each
 * scene bound here the callback
 *   - copies that start state into a ring of rows: its integrated part (time, positions,
 *     velocities, warm start, ...: runs of mjData's buffer) every substep, its inputs (controls,
 *     applied forces, mocap, ...) only where they differ from the inputs kept last, into a ring of
 *     their own that each substep's row points into (an env writes them between env steps, not
 *     between the substeps of one): any substep of the last rows can be re-simulated bit for bit;
 *   - screens the state the previous substep ended in: a watched body that touched something
 *     within the contact window, moves faster than the candidate speed and changed its velocity
 *     by at least the candidate change (the detector's stage-1 rule, conservatively), or any
 *     tracked body with a non-finite or absurd state, marks the substep (`flagged`);
 *   - notes which tracked bodies touch something in this substep, and keeps the deep-penetration
 *     flags (body pairs, first substep, deepest, substeps) exactly as the detector counts them.
 * The substep's index is MuJoCo's own substep counter (timer[mjTIMER_STEP].number) less its value
 * at the episode's start. Several calls can share an index: an mj_forward between two steps sees
 * the index (and time) of the next step, whose own call replaces what it copied; RK4 calls again
 * at three later times inside the substep, with states that are not the simulation's (no copy,
 * no screen). The contacts a substep leaves behind are those of its last call (RK4's fourth
 * stage): each call replaces the substep's pending contacts, which count once the next substep
 * starts (or settle() is called between env steps).
 *
 * After each env step the monitor asks poll() what needs it; while no candidate is open,
 * quiet_step() asks the same and, where nothing does, returns the env step's result with the
 * monitor's current info entry added: one C call for what an RL loop's step pays when nothing new
 * happens (a deep-penetration flag found earlier in the episode is reported again, not re-decided).
 *
 * Knows nothing of MuJoCo's headers: every address, offset and array comes from
 * engines/mujoco_screen.py (ScreenBinding, in engines/mujoco_screen_binding.py, mirrors screen_binding
 * field by field, every field 8 bytes; binding_layout() gives the offsets, compared before anything
 * is bound). Optional (setup.py):
 * without it the monitor runs its Python hooks around each substep.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_SEGMENTS 24
#define MAX_SCREENS 256
#define BINDING_VERSION 2
/* A threshold is met within this relative margin: the screen reads speeds computed otherwise
 * than the detector's decode, and must never miss what the detector would find. */
#define MARGIN 1e-9

typedef struct {
    uint64_t version;
    uint64_t data;                 /* the mjData's address: the scene a callback is for */
    uint64_t step_count;           /* int32: MuJoCo's substep counter */
    int64_t base;                  /* its value at the episode's start */
    uint64_t time_src;             /* double: mjData's time */
    int64_t current;               /* the substep the last call was for (-1: none yet) */
    double current_time;           /* the time it started at */
    uint64_t nsegments;            /* runs of mjData's buffer a row copies: nstate of the state, then the inputs' */
    uint64_t seg_src[MAX_SEGMENTS];
    int64_t seg_bytes[MAX_SEGMENTS];
    int64_t seg_offset[MAX_SEGMENTS]; /* in its row: a state row, or an input row */
    int64_t nstate;
    uint64_t rows;                 /* the ring: capacity rows of row_bytes (the integrated state) */
    int64_t row_bytes;
    int64_t capacity;
    uint64_t inputs;               /* the inputs' ring: capacity rows of input_bytes */
    int64_t input_bytes;
    uint64_t input_of;             /* int64 per ring row: the input row (a count: % capacity) it started with */
    int64_t ninputs;               /* input rows written this episode */
    int64_t input_from;            /* the substep that wrote the last one */
    int64_t seen;                  /* one past the highest substep index seen */
    int64_t moved;                 /* one past the highest substep whose end state was screened */
    int64_t ntracked;
    uint64_t tracked;              /* int32 body id per column */
    uint64_t kind;                 /* uint8 per column: 0 tracked, 1 watched object, 2 watched base */
    uint64_t rootid;               /* int32 per body */
    uint64_t cvel, xipos, subtree_com; /* float64 arrays of mjData */
    uint64_t vel;                  /* float64 per column x 3: the velocity the last substep ended with */
    uint64_t running;              /* float64 per column: the fastest so far */
    uint64_t speed0;               /* float64 per column: the speed at the episode's start */
    uint64_t fastest;              /* float64 per ring row x column: the fastest up to that substep */
    uint64_t last_touch;           /* int64 per column */
    uint64_t touching;             /* uint8 per column: touches something in the current substep */
    uint64_t ncon;                 /* int32: the substep's contacts */
    uint64_t contacts;             /* their records (0: not located yet) */
    int64_t stride, dist_offset, geom_offset;
    int64_t ngeom, nbody;
    uint64_t geom_body;            /* int32 per geom */
    uint64_t body_col;             /* int32 per body: its column, or -1 */
    uint64_t body_class;           /* uint8 per body: 1 robot (link or base), 2 robot link or static */
    double min_speed, dv_min, ratio, max_speed, max_penetration;
    int64_t w_contact, w_carrier;
    int64_t flagged;               /* the earliest substep screened as a possible candidate, or -1 */
    int64_t unreadable;            /* contacts came while their records were not located */
    uint64_t pairs;                /* int64 x 5 per deep pair: lo, hi, first, substeps, last */
    uint64_t pair_depth;           /* float64 per deep pair: the deepest */
    int64_t npairs, pair_cap, pair_overflow;
    uint64_t pending;              /* float64 x 3 per deep contact of the current substep: lo, hi, depth */
    int64_t npending, pending_cap;
    int64_t npairs_told;           /* npairs as poll() last told it */
    int64_t refresh_at;            /* poll() tells when this many substeps have run */
    int64_t polled_at;             /* substeps seen at the last poll() */
    int64_t max_gap;               /* the most substeps between two polls (one env step) */
} screen_binding;

/* What poll() tells: work for the caller after an env step. */
#define POLL_FLAGGED 1     /* a substep is marked */
#define POLL_UNREADABLE 2  /* contacts came that could not be read */
#define POLL_NEW_PAIR 4    /* a body pair got its first deep penetration */
#define POLL_REFRESH 8     /* refresh_at substeps have run, and there are deep pairs to refresh */

static screen_binding *screens[MAX_SCREENS];
static int used; /* screens[used:] are all NULL: the callback looks no further */

static void flag(screen_binding *b, int64_t k) {
    if (b->flagged < 0 || k < b->flagged)
        b->flagged = k;
}

/* Tracked column col's centre-of-mass velocity (world frame) from mjData's velocities now. */
static void column_velocity(const screen_binding *b, int64_t col, double v[3]) {
    int32_t body = ((const int32_t *)b->tracked)[col];
    const double *w = (const double *)b->cvel + 6 * body, *lin = w + 3, *x = (const double *)b->xipos + 3 * body;
    const double *c = (const double *)b->subtree_com + 3 * ((const int32_t *)b->rootid)[body];
    double r[3] = {x[0] - c[0], x[1] - c[1], x[2] - c[2]};
    v[0] = lin[0] + w[1] * r[2] - w[2] * r[1];
    v[1] = lin[1] + w[2] * r[0] - w[0] * r[2];
    v[2] = lin[2] + w[0] * r[1] - w[1] * r[0];
}

/* The episode's first substep starts: the velocities of the state it starts from (mjData's now)
 * are the ones its change is measured against, and the fastest each body moved so far. */
static void seed_motion(screen_binding *b) {
    double *vel = (double *)b->vel, *running = (double *)b->running, *speed0 = (double *)b->speed0;
    for (int64_t col = 0; col < b->ntracked; col++) {
        double *v = vel + 3 * col;
        column_velocity(b, col, v);
        speed0[col] = running[col] = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    }
}

/* The state substep k ended in (mjData's velocities now) against the screen's rules. */
static void screen_motion(screen_binding *b, int64_t k) {
    const uint8_t *kind = (const uint8_t *)b->kind;
    const double *xipos = (const double *)b->xipos, *speed0 = (const double *)b->speed0;
    double *vel = (double *)b->vel, *running = (double *)b->running, *fastest = (double *)b->fastest;
    const int64_t *last_touch = (const int64_t *)b->last_touch;
    int64_t before = k - b->w_carrier - 1, row = k % b->capacity;
    int have_before = before >= 0 && k - before < b->capacity;
    for (int64_t col = 0; col < b->ntracked; col++) {
        const double *x = xipos + 3 * ((const int32_t *)b->tracked)[col];
        double v[3];
        column_velocity(b, col, v);
        double *p = vel + 3 * col;
        double d[3] = {v[0] - p[0], v[1] - p[1], v[2] - p[2]};
        double speed = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
        double change = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
        p[0] = v[0], p[1] = v[1], p[2] = v[2];
        if (!isfinite(speed) || !isfinite(x[0] + x[1] + x[2]) || speed > b->max_speed * (1 - MARGIN))
            flag(b, k);
        else if (kind[col] && k - last_touch[col] <= b->w_contact && change >= b->dv_min * (1 - MARGIN)) {
            double limit = b->min_speed;
            if (kind[col] == 2) { /* a base: beyond carrier_ratio x the fastest before the carrier window */
                double prior = before < 0 ? speed0[col] : have_before ? fastest[(before % b->capacity) * b->ntracked + col]
                                                                      : speed0[col];
                if (b->ratio * prior > limit)
                    limit = b->ratio * prior;
            }
            if (speed > limit * (1 - MARGIN))
                flag(b, k);
        }
        running[col] = fmax(running[col], speed);
        fastest[row * b->ntracked + col] = running[col];
    }
}

/* The contacts mjData holds now, as the current substep's (replacing what an earlier call of it found). */
static void collect_contacts(screen_binding *b) {
    uint8_t *touching = (uint8_t *)b->touching;
    memset(touching, 0, (size_t)b->ntracked);
    b->npending = 0;
    int32_t n = *(const int32_t *)b->ncon;
    if (n <= 0)
        return;
    if (!b->contacts) {
        b->unreadable = 1;
        flag(b, b->current);
        return;
    }
    const int32_t *geom_body = (const int32_t *)b->geom_body, *body_col = (const int32_t *)b->body_col;
    const uint8_t *cls = (const uint8_t *)b->body_class;
    double *pending = (double *)b->pending;
    const char *record = (const char *)b->contacts;
    for (int32_t j = 0; j < n; j++, record += b->stride) {
        const int32_t *geom = (const int32_t *)(record + b->geom_offset);
        if (geom[0] < 0 || geom[1] < 0 || geom[0] >= b->ngeom || geom[1] >= b->ngeom) {
            b->unreadable = 1;
            flag(b, b->current);
            continue;
        }
        int32_t b1 = geom_body[geom[0]], b2 = geom_body[geom[1]];
        if ((cls[b1] & 1) && (cls[b2] & 1))
            continue; /* the robot touching itself is not audited */
        if (body_col[b1] >= 0)
            touching[body_col[b1]] = 1;
        if (body_col[b2] >= 0)
            touching[body_col[b2]] = 1;
        double depth = (double)(float)(-*(const double *)(record + b->dist_offset)); /* as decoded: float32 */
        if (!(depth > b->max_penetration) || ((cls[b1] & 2) && (cls[b2] & 2)))
            continue;
        if (b->npending == b->pending_cap) {
            b->pair_overflow = 1;
            flag(b, b->current);
            continue;
        }
        double *p = pending + 3 * b->npending++;
        p[0] = b1 < b2 ? b1 : b2, p[1] = b1 < b2 ? b2 : b1, p[2] = depth;
    }
}

/* The current substep's contacts count: its touches and its deep pairs (once). */
static void settle_contacts(screen_binding *b) {
    int64_t k = b->current;
    uint8_t *touching = (uint8_t *)b->touching;
    int64_t *last_touch = (int64_t *)b->last_touch, *pairs = (int64_t *)b->pairs;
    double *pair_depth = (double *)b->pair_depth;
    const double *pending = (const double *)b->pending;
    if (k < 0)
        return;
    for (int64_t col = 0; col < b->ntracked; col++)
        if (touching[col]) {
            last_touch[col] = k;
            touching[col] = 0;
        }
    for (int64_t j = 0; j < b->npending; j++) {
        int64_t lo = (int64_t)pending[3 * j], hi = (int64_t)pending[3 * j + 1], i = 0;
        double depth = pending[3 * j + 2];
        while (i < b->npairs && !(pairs[5 * i] == lo && pairs[5 * i + 1] == hi))
            i++;
        if (i == b->npairs) {
            if (i == b->pair_cap) {
                b->pair_overflow = 1;
                continue;
            }
            int64_t *p = pairs + 5 * i;
            p[0] = lo, p[1] = hi, p[2] = k, p[3] = 0, p[4] = -1;
            pair_depth[i] = depth;
            b->npairs++;
        }
        int64_t *p = pairs + 5 * i;
        if (p[4] != k)
            p[3]++, p[4] = k;
        if (depth > pair_depth[i])
            pair_depth[i] = depth;
    }
    b->npending = 0;
}

/* Substep k's start state: the integrated part into its row, the inputs where they changed. At
 * most one input row per substep (a second call of substep k rewrites its own): a row of the ring
 * points to an input row no more than capacity input rows old, which the input ring still holds. */
static void copy_row(screen_binding *b, int64_t k) {
    int64_t slot = k % b->capacity;
    char *row = (char *)b->rows + slot * b->row_bytes;
    char *last = b->ninputs > 0 ? (char *)b->inputs + ((b->ninputs - 1) % b->capacity) * b->input_bytes : NULL;
    int64_t s, end = b->nsegments < MAX_SEGMENTS ? (int64_t)b->nsegments : MAX_SEGMENTS;
    for (s = 0; s < b->nstate && s < end; s++)
        memcpy(row + b->seg_offset[s], (const void *)b->seg_src[s], (size_t)b->seg_bytes[s]);
    int changed = last == NULL;
    for (; s < end && !changed; s++)
        changed = memcmp(last + b->seg_offset[s], (const void *)b->seg_src[s], (size_t)b->seg_bytes[s]) != 0;
    if (changed) {
        if (last == NULL || b->input_from != k)
            b->ninputs++;
        char *in = (char *)b->inputs + ((b->ninputs - 1) % b->capacity) * b->input_bytes;
        for (s = b->nstate; s < end; s++)
            memcpy(in + b->seg_offset[s], (const void *)b->seg_src[s], (size_t)b->seg_bytes[s]);
        b->input_from = k;
    }
    ((int64_t *)b->input_of)[slot] = b->ninputs - 1;
}

static void screen_substep(screen_binding *b) {
    int64_t k = (int64_t)*(const int32_t *)b->step_count - b->base;
    double t = *(const double *)b->time_src;
    if (k < 0 || b->capacity <= 0 || k < b->current) { /* the counter went back (a reset inside the episode) */
        b->unreadable = 1;
        flag(b, k < 0 ? 0 : k);
        return;
    }
    if (k != b->current) { /* a new substep: the last one's contacts count, this one's start is kept */
        settle_contacts(b);
        b->current = k, b->current_time = t;
        copy_row(b, k);
        if (k + 1 > b->seen)
            b->seen = k + 1;
        if (k >= 1 && b->moved < k) {
            screen_motion(b, k - 1);
            b->moved = k;
        }
        if (k == 0)
            seed_motion(b);
    } else if (t == b->current_time) {
        copy_row(b, k); /* the substep's own start, after an mj_forward's at the same time */
        if (k == 0)
            seed_motion(b);
    }
    collect_contacts(b);
}

static void control_callback(const void *model, void *data) {
    (void)model;
    for (int s = 0; s < used; s++) {
        screen_binding *b = screens[s];
        if (b != NULL && b->data == (uint64_t)(uintptr_t)data)
            screen_substep(b);
    }
}

/* The end state of substep k, from the velocities mjData holds now (the caller ran MuJoCo's
 * kinematics of that state on a scratch mjData and bound cvel, xipos and subtree_com to it). */
static PyObject *screen_end(PyObject *self, PyObject *args) {
    unsigned long long address;
    long long k;
    if (!PyArg_ParseTuple(args, "KL", &address, &k))
        return NULL;
    screen_binding *b = (screen_binding *)(uintptr_t)address;
    if (k >= 0 && b->moved <= k) {
        screen_motion(b, k);
        b->moved = k + 1;
    }
    Py_RETURN_NONE;
}

static PyObject *settle(PyObject *self, PyObject *args) {
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "K", &address))
        return NULL;
    settle_contacts((screen_binding *)(uintptr_t)address);
    Py_RETURN_NONE;
}

/* After an env step: settle the last substep's contacts, and say what needs the caller (POLL_*). */
static long poll_binding(screen_binding *b) {
    settle_contacts(b);
    if (b->seen - b->polled_at > b->max_gap)
        b->max_gap = b->seen - b->polled_at;
    b->polled_at = b->seen;
    long tell = (b->flagged >= 0 ? POLL_FLAGGED : 0) | (b->unreadable || b->pair_overflow ? POLL_UNREADABLE : 0) |
                (b->npairs != b->npairs_told ? POLL_NEW_PAIR : 0) |
                (b->npairs > 0 && b->seen >= b->refresh_at ? POLL_REFRESH : 0); /* no pairs: no flags to refresh */
    b->npairs_told = b->npairs;
    return tell;
}

/* The binding at a Python-given address; NULL with an error set for 0 or no integer. */
static screen_binding *binding_at(PyObject *address) {
    screen_binding *b = (screen_binding *)(uintptr_t)PyLong_AsUnsignedLongLong(address);
    if (b == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "no screen binding at address 0");
    return b;
}

static PyObject *poll(PyObject *self, PyObject *arg) {
    screen_binding *b = binding_at(arg);
    if (b == NULL)
        return NULL;
    return PyLong_FromLong(poll_binding(b));
}

static PyObject *key_simuguard, *key_errors;

/* An env step's result (obs, reward, terminated, truncated, info) as the monitor returns it when
 * the episode goes on and the screen tells nothing new, in one call: None where the result is not
 * that case's (the episode ends, info is no dict, or holds the monitor's key with no dict, or a
 * dict whose errors are no list; nothing polled), poll()'s bits where the screen has work for the
 * caller, else the result with info copied and the monitor's current entry (`entry`: its fields as
 * the last step that had work left them) added as with_simuguard() adds it, each list in it copied,
 * into a copy of the entry an inner wrapper wrote (a RecordPhysics inside), its errors first. */
static PyObject *quiet_step(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "quiet_step(binding address, step result, entry: dict)");
        return NULL;
    }
    PyObject *result = args[1], *fields = args[2];
    if (!PyTuple_CheckExact(result) || PyTuple_GET_SIZE(result) != 5)
        Py_RETURN_NONE;
    PyObject *info = PyTuple_GET_ITEM(result, 4);
    if (!PyDict_CheckExact(info))
        Py_RETURN_NONE;
    for (int i = 2; i < 4; i++) {
        int ended = PyObject_IsTrue(PyTuple_GET_ITEM(result, i));
        if (ended != 0) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    /* Everything that sends the step to Python is decided before the screen is polled: a poll
     * tells each new deep pair once. */
    PyObject *inner = PyDict_GetItemWithError(info, key_simuguard), *inner_errors = NULL; /* borrowed */
    if (inner == NULL && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (inner != NULL) {
        if (!PyDict_CheckExact(inner))
            Py_RETURN_NONE;
        inner_errors = PyDict_GetItemWithError(inner, key_errors);
        if (inner_errors == NULL && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (inner_errors != NULL && !PyList_CheckExact(inner_errors))
            Py_RETURN_NONE;
    }
    screen_binding *b = binding_at(args[0]);
    if (b == NULL)
        return NULL;
    long tell = poll_binding(b);
    if (tell)
        return PyLong_FromLong(tell);
    PyObject *out = NULL, *entry = NULL, *step = NULL, *key, *value;
    Py_ssize_t at = 0;
    if ((out = PyDict_Copy(info)) == NULL || (entry = inner != NULL ? PyDict_Copy(inner) : PyDict_New()) == NULL)
        goto done;
    while (PyDict_Next(fields, &at, &key, &value)) {
        PyObject *copy;
        int errors = key == key_errors || (PyUnicode_CheckExact(key) && PyUnicode_Compare(key, key_errors) == 0);
        if (errors && inner_errors != NULL && PyList_GET_SIZE(inner_errors) > 0)
            copy = PySequence_Concat(inner_errors, value);
        else if (PyList_CheckExact(value))
            copy = PyList_GetSlice(value, 0, PyList_GET_SIZE(value));
        else
            Py_INCREF(value), copy = value;
        if (copy == NULL || PyDict_SetItem(entry, key, copy) < 0) {
            Py_XDECREF(copy);
            goto done;
        }
        Py_DECREF(copy);
    }
    if (PyDict_SetItem(out, key_simuguard, entry) < 0)
        goto done;
    step = PyTuple_Pack(5, PyTuple_GET_ITEM(result, 0), PyTuple_GET_ITEM(result, 1), PyTuple_GET_ITEM(result, 2),
                        PyTuple_GET_ITEM(result, 3), out);
done:
    Py_XDECREF(out), Py_XDECREF(entry);
    return step;
}

static PyObject *attach(PyObject *self, PyObject *args) {
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "K", &address))
        return NULL;
    screen_binding *b = (screen_binding *)(uintptr_t)address;
    if (b->version != BINDING_VERSION) {
        PyErr_SetString(PyExc_ValueError, "screen binding of another version");
        return NULL;
    }
    for (int s = 0; s < MAX_SCREENS; s++)
        if (screens[s] == b)
            Py_RETURN_TRUE;
    for (int s = 0; s < MAX_SCREENS; s++)
        if (screens[s] == NULL) {
            screens[s] = b;
            if (s + 1 > used)
                used = s + 1;
            Py_RETURN_TRUE;
        }
    Py_RETURN_FALSE; /* full: the caller keeps its hooks */
}

static PyObject *detach(PyObject *self, PyObject *args) {
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "K", &address))
        return NULL;
    int left = 0;
    for (int s = 0; s < MAX_SCREENS; s++) {
        if (screens[s] == (screen_binding *)(uintptr_t)address)
            screens[s] = NULL;
        left += screens[s] != NULL;
    }
    while (used > 0 && screens[used - 1] == NULL)
        used--;
    return PyLong_FromLong(left);
}

static PyObject *callback_address(PyObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)&control_callback);
}

#define FIELD(name) {#name, offsetof(screen_binding, name), sizeof(((screen_binding *)0)->name)}

static const struct { const char *name; size_t offset, size; } LAYOUT[] = {
    FIELD(version), FIELD(data), FIELD(step_count), FIELD(base), FIELD(time_src), FIELD(current),
    FIELD(current_time), FIELD(nsegments), FIELD(seg_src), FIELD(seg_bytes), FIELD(seg_offset), FIELD(nstate),
    FIELD(rows), FIELD(row_bytes), FIELD(capacity), FIELD(inputs), FIELD(input_bytes), FIELD(input_of),
    FIELD(ninputs), FIELD(input_from), FIELD(seen),
    FIELD(moved), FIELD(ntracked), FIELD(tracked), FIELD(kind), FIELD(rootid), FIELD(cvel), FIELD(xipos),
    FIELD(subtree_com), FIELD(vel), FIELD(running), FIELD(speed0), FIELD(fastest), FIELD(last_touch),
    FIELD(touching),
    FIELD(ncon), FIELD(contacts), FIELD(stride), FIELD(dist_offset), FIELD(geom_offset), FIELD(ngeom),
    FIELD(nbody), FIELD(geom_body), FIELD(body_col), FIELD(body_class), FIELD(min_speed), FIELD(dv_min),
    FIELD(ratio), FIELD(max_speed), FIELD(max_penetration), FIELD(w_contact), FIELD(w_carrier),
    FIELD(flagged), FIELD(unreadable), FIELD(pairs), FIELD(pair_depth), FIELD(npairs), FIELD(pair_cap),
    FIELD(pair_overflow), FIELD(pending), FIELD(npending), FIELD(pending_cap), FIELD(npairs_told),
    FIELD(refresh_at), FIELD(polled_at), FIELD(max_gap)};

static PyObject *binding_layout(PyObject *self, PyObject *unused) {
    Py_ssize_t n = (Py_ssize_t)(sizeof(LAYOUT) / sizeof(LAYOUT[0]));
    PyObject *fields = PyTuple_New(n);
    if (fields == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *field = Py_BuildValue("(snn)", LAYOUT[i].name, (Py_ssize_t)LAYOUT[i].offset, (Py_ssize_t)LAYOUT[i].size);
        if (field == NULL) {
            Py_DECREF(fields);
            return NULL;
        }
        PyTuple_SET_ITEM(fields, i, field);
    }
    return Py_BuildValue("(inN)", BINDING_VERSION, (Py_ssize_t)sizeof(screen_binding), fields);
}

static PyMethodDef methods[] = {
    {"attach", attach, METH_VARARGS, "attach(binding address) -> bool: screen that scene's substeps"},
    {"detach", detach, METH_VARARGS, "detach(binding address) -> screens left"},
    {"poll", poll, METH_O, "poll(binding address) -> what needs the caller after an env step (bits)"},
    {"quiet_step", (PyCFunction)(void (*)(void))quiet_step, METH_FASTCALL,
     "quiet_step(binding address, step result, entry) -> the monitor's result where the screen tells nothing new, "
     "poll()'s bits, or None"},
    {"settle", settle, METH_VARARGS, "settle(binding address): the current substep's contacts count"},
    {"screen_end", screen_end, METH_VARARGS, "screen_end(binding address, k): screen substep k's end state"},
    {"callback_address", callback_address, METH_NOARGS, "the address of the control callback"},
    {"binding_layout", binding_layout, METH_NOARGS, "(version, size, ((field, offset, size), ...))"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_simuguard_mujoco_screen",
                                    "MuJoCo's control callback as a substep screen (engines/mujoco_screen.py).", -1, methods};

PyMODINIT_FUNC PyInit__simuguard_mujoco_screen(void) {
    if ((key_simuguard = PyUnicode_InternFromString("simuguard")) == NULL ||
        (key_errors = PyUnicode_InternFromString("errors")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
