/* lexi.kernels._cpu: the Python binding of the CPU kernels.

   `Kernels(threads, isa)` owns a thread pool and a workspace; its methods take raw addresses (tensor.data_ptr())
   and sizes, which the launcher in lexi/kernels/cpu_qmatmul.py checks before calling. Calls on one object are
   serialized (they share the workspace) and run without the GIL, so the event loop keeps serving meanwhile.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <string.h>

#include "decode.h"
#include "moe.h"
#include "qgemm.h"
#include "repack.h"

typedef struct {
    PyObject_HEAD
    pool *pool;
    const isa_kernels *isa;
    workspace ws;
    pthread_mutex_t mu;
    int ready;
} KernelsObject;

static int cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

/* AVX-512 VNNI on 256-bit registers needs F, BW, VL and VNNI (and the OS saving their state, which gcc's check
   includes). */
static int cpu_has_vnni(void) {
#if defined(__x86_64__) || defined(__i386__)
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

/* "auto": the widest this CPU runs (avx512vnni, then avx2, then scalar); a name forces that variant. */
static const isa_kernels *isa_by_name(const char *name) {
#if defined(__x86_64__) || defined(__i386__)
    if ((!strcmp(name, "auto") || !strcmp(name, "avx512vnni")) && cpu_has_vnni()) return &kernels_vnni;
    if ((!strcmp(name, "auto") || !strcmp(name, "avx2")) && cpu_has_avx2()) return &kernels_avx2;
#endif
    if (!strcmp(name, "auto") || !strcmp(name, "scalar")) return &kernels_scalar;
    return NULL;
}

static int Kernels_init(KernelsObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"threads", "isa", NULL};
    int threads = 1;
    const char *isa = "auto";
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|is", kwlist, &threads, &isa)) return -1;
    if (threads < 1 || threads > 1024) {
        PyErr_Format(PyExc_ValueError, "threads must be in [1, 1024], got %d", threads);
        return -1;
    }
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Kernels is already initialised");
        return -1;
    }
    self->isa = isa_by_name(isa);
    if (!self->isa) {
        PyErr_Format(PyExc_ValueError, "isa %s is not available on this CPU (try auto or scalar)", isa);
        return -1;
    }
    self->pool = pool_create(threads);
    if (!self->pool) {
        PyErr_NoMemory();
        return -1;
    }
    memset(&self->ws, 0, sizeof(self->ws));
    pthread_mutex_init(&self->mu, NULL);
    self->ready = 1;
    return 0;
}

static void Kernels_dealloc(KernelsObject *self) {
    if (self->ready) {
        pool_destroy(self->pool);
        workspace_free(&self->ws);
        pthread_mutex_destroy(&self->mu);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int parse_weights(PyObject *seq, weight_desc *w, int *nw) {
    PyObject *fast = PySequence_Fast(seq, "weights must be a sequence of (type, address, row_bytes, n, col)");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1 || n > QGEMM_MAX_WEIGHTS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "between 1 and %d weights per call, got %zd", QGEMM_MAX_WEIGHTS, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long addr;
        long long row_bytes, rows, col;
        int type, layout = 0;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "iKLLL|i", &type, &addr, &row_bytes, &rows, &col,
                              &layout)) {
            Py_DECREF(fast);
            return -1;
        }
        w[i] = (weight_desc){type, (const uint8_t *)(uintptr_t)addr, row_bytes, rows, col, layout};
    }
    *nw = (int)n;
    Py_DECREF(fast);
    return 0;
}

static PyObject *Kernels_qmatmul(KernelsObject *self, PyObject *args) {
    unsigned long long x, y;
    long long m, k, ldx, ldy;
    PyObject *weights;
    int terms = 2;
    if (!PyArg_ParseTuple(args, "KLLLOKL|i", &x, &m, &k, &ldx, &weights, &y, &ldy, &terms)) return NULL;
    if (terms != 1 && terms != 2) return PyErr_Format(PyExc_ValueError, "qmatmul: terms must be 1 or 2, got %d", terms);
    weight_desc w[QGEMM_MAX_WEIGHTS];
    int nw;
    if (parse_weights(weights, w, &nw)) return NULL;
    const char *problem = qgemm_check(self->isa, w, nw, k);
    if (problem) return PyErr_Format(PyExc_ValueError, "qmatmul: %s", problem);
    if (m < 1 || ldx < k) return PyErr_Format(PyExc_ValueError, "qmatmul: need m >= 1 and ldx >= k");
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    rc = qgemm(self->pool, &self->ws, self->isa, (const float *)(uintptr_t)x, m, k, ldx, w, nw,
               (float *)(uintptr_t)y, ldy, terms);
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    if (rc) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* A layer's experts in one call: see moe.c. Addresses of float32 / int32 / int64 buffers, checked before the
   GIL is released. */
static PyObject *Kernels_moe(KernelsObject *self, PyObject *args) {
    unsigned long long table, x, ids, route, y, gb, ub, db;
    long long t, d, f;
    int e, k, terms, act;
    float alpha, limit;
    if (!PyArg_ParseTuple(args, "KiKLLLiKKKiiffKKK", &table, &e, &x, &t, &d, &f, &k, &ids, &route, &y, &terms, &act,
                          &alpha, &limit, &gb, &ub, &db))
        return NULL;
    moe_args a = {.x = (const float *)(uintptr_t)x, .t = t, .d = d, .f = f, .k = k,
                  .ids = (const int32_t *)(uintptr_t)ids, .route = (const float *)(uintptr_t)route,
                  .table = (const int64_t *)(uintptr_t)table, .e = e, .gate_bias = (const float *)(uintptr_t)gb,
                  .up_bias = (const float *)(uintptr_t)ub, .down_bias = (const float *)(uintptr_t)db, .act = act,
                  .alpha = alpha, .limit = limit, .y = (float *)(uintptr_t)y, .terms = terms};
    const char *problem = moe_check(self->isa, &a);
    if (problem) return PyErr_Format(PyExc_ValueError, "moe: %s", problem);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    rc = moe_ffn(self->pool, &self->ws, self->isa, &a);
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    if (rc) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* A decode step's layers in one call: see decode.c. `model`: the address of a dec_model record (its layers'
   records and every tensor they name kept alive by the caller), checked once with decode_check. */
static PyObject *Kernels_decode_check(KernelsObject *self, PyObject *args) {
    unsigned long long model;
    if (!PyArg_ParseTuple(args, "K", &model)) return NULL;
    const char *problem = decode_check_model(self->isa, (const dec_model *)(uintptr_t)model);
    if (problem) return PyErr_Format(PyExc_ValueError, "decode: %s", problem);
    Py_RETURN_NONE;
}

static PyObject *Kernels_decode(KernelsObject *self, PyObject *args) {
    unsigned long long model, x, positions, slots, query_start, tables, kv, cos_g, sin_g, cos_l, sin_l;
    long long t, s, bt_stride, block_size, num_blocks;
    if (!PyArg_ParseTuple(args, "KKLLKKKKLLLKKKKK", &model, &x, &t, &s, &positions, &slots, &query_start, &tables,
                          &bt_stride, &block_size, &num_blocks, &kv, &cos_g, &sin_g, &cos_l, &sin_l))
        return NULL;
    const dec_model *m = (const dec_model *)(uintptr_t)model;
    dec_step st = {.x = (float *)(uintptr_t)x, .t = t, .s = s, .positions = (const int64_t *)(uintptr_t)positions,
                   .slots = (const int64_t *)(uintptr_t)slots, .query_start = (const int32_t *)(uintptr_t)query_start,
                   .block_tables = (const int32_t *)(uintptr_t)tables, .bt_stride = bt_stride,
                   .block_size = block_size, .num_blocks = num_blocks, .kv = (const int64_t *)(uintptr_t)kv,
                   .cos_g = (const float *)(uintptr_t)cos_g, .sin_g = (const float *)(uintptr_t)sin_g,
                   .cos_l = (const float *)(uintptr_t)cos_l, .sin_l = (const float *)(uintptr_t)sin_l};
    const char *problem = decode_check_step(m, &st);
    if (problem) return PyErr_Format(PyExc_ValueError, "decode: %s", problem);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    rc = decode_layers(self->pool, &self->ws, self->isa, m, &st);
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    if (rc) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *Kernels_quantize(KernelsObject *self, PyObject *args) {
    unsigned long long x, q, d, g;
    long long m, k, ldx;
    int block;
    if (!PyArg_ParseTuple(args, "KLLLiKKK", &x, &m, &k, &ldx, &block, &q, &d, &g)) return NULL;
    if (block != QA && block != 256) return PyErr_Format(PyExc_ValueError, "quantize: block must be 32 or 256");
    if (m < 1 || k <= 0 || k % block || ldx < k) return PyErr_Format(PyExc_ValueError, "quantize: bad m, k or ldx");
    act_q8 a = {(int8_t *)(uintptr_t)q, (float *)(uintptr_t)d, (int16_t *)(uintptr_t)g, m, k, block};
    Py_BEGIN_ALLOW_THREADS
    self->isa->quantize((const float *)(uintptr_t)x, ldx, 0, m, &a, -1);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* W = D * s * v + O from the unpackers, row by row: how tests check each type's unpacking. */
static PyObject *Kernels_dequantize(KernelsObject *self, PyObject *args) {
    int type;
    unsigned long long data, out;
    long long rows, row_bytes, k;
    if (!PyArg_ParseTuple(args, "iKLLLK", &type, &data, &rows, &row_bytes, &k, &out)) return NULL;
    weight_desc w = {type, (const uint8_t *)(uintptr_t)data, row_bytes, rows, 0, 0};
    const char *problem = qgemm_check(self->isa, &w, 1, k);
    if (problem) return PyErr_Format(PyExc_ValueError, "dequantize: %s", problem);
    const qtype_info *info = self->isa->lookup(type);
    struct {
        uint8_t v[KC];
        int32_t s[KC / 16];
        int16_t o[KC / 16];
        float D[KC / QA], Dm[KC / QA];
    } u;
    unpack_out uo = {u.v, u.s, u.o, u.D, u.Dm, 1};
    float *o = (float *)(uintptr_t)out;
    for (long long r = 0; r < rows; r++) {
        for (long long k0 = 0; k0 < k; k0 += KC) {
            int n = (int)(k - k0 < KC ? k - k0 : KC);
            info->unpack(w.data + r * row_bytes, k0, n, &uo);
            for (int j = 0; j < n; j++) {
                int v = info->is_signed ? (int)(int8_t)u.v[j] : (int)u.v[j];
                float w = u.D[j / QA] * (float)((int16_t)u.s[j / 16] * v);
                o[r * k + k0 + j] = info->has_offset ? w + u.Dm[j / QA] * (float)u.o[j / 16] : w;
            }
        }
    }
    Py_RETURN_NONE;
}

/* The interleaved layout's size for an (n x k) weight of `type`, or 0 when this CPU's kernels do not read one. */
static PyObject *Kernels_x8_bytes(KernelsObject *self, PyObject *args) {
    int type;
    long long n, k;
    if (!PyArg_ParseTuple(args, "iLL", &type, &n, &k)) return NULL;
    const x8_layout *l = x8_lookup(type);
    if (!l || !self->isa->x8(type) || n <= 0 || k <= 0 || k % l->block) return PyLong_FromLong(0);
    return PyLong_FromLongLong(x8_bytes(l, n, k));
}

typedef struct {
    const x8_layout *l;
    const uint8_t *src;
    int64_t row_bytes, n, k;
    uint8_t *dst;
} repack_job;

static void repack_task(void *ctx, int task, int thread) {
    (void)thread;
    repack_job *j = ctx;
    x8_repack_group(j->l, j->src, j->row_bytes, j->n, j->k, task, j->dst);
}

static PyObject *Kernels_repack(KernelsObject *self, PyObject *args) {
    int type;
    unsigned long long src, dst;
    long long n, row_bytes, k;
    if (!PyArg_ParseTuple(args, "iKLLLK", &type, &src, &n, &row_bytes, &k, &dst)) return NULL;
    const qtype_info *info = self->isa->lookup(type);
    const x8_layout *l = x8_lookup(type);
    if (!info || !l || !self->isa->x8(type)) return PyErr_Format(PyExc_ValueError, "repack: type %d has no interleaved layout here", type);
    if (n <= 0 || k <= 0 || k % l->block || row_bytes != k / info->block * info->bytes)
        return PyErr_Format(PyExc_ValueError, "repack: bad n, k or row_bytes");
    repack_job j = {l, (const uint8_t *)(uintptr_t)src, row_bytes, n, k, (uint8_t *)(uintptr_t)dst};
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    pool_run(self->pool, repack_task, &j, (int)((n + 7) / 8));
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Kernels_supports(KernelsObject *self, PyObject *arg) {
    long type = PyLong_AsLong(arg);
    if (type == -1 && PyErr_Occurred()) return NULL;
    return PyBool_FromLong(self->isa->lookup((int)type) != NULL);
}

static PyObject *Kernels_get_isa(KernelsObject *self, void *closure) {
    (void)closure;
    return PyUnicode_FromString(self->isa->name);
}

static PyObject *Kernels_get_threads(KernelsObject *self, void *closure) {
    (void)closure;
    return PyLong_FromLong(pool_threads(self->pool));
}

static PyMethodDef Kernels_methods[] = {
    {"qmatmul", (PyCFunction)Kernels_qmatmul, METH_VARARGS,
     "qmatmul(x, m, k, ldx, weights, y, ldy, terms=2): y[:, col:col+n] = x @ W.T for each (type, address, row_bytes, n, col[, layout]), x as 1 or 2 int8 terms"},
    {"moe", (PyCFunction)Kernels_moe, METH_VARARGS,
     "moe(table, e, x, t, d, f, k, ids, route, y, terms, act, alpha, limit, gate_bias, up_bias, down_bias): "
     "a layer's mixture-of-experts FFN, y = sum_s route * (down(act(gate x, up x)) + bias) (0 for no bias)"},
    {"decode_check", (PyCFunction)Kernels_decode_check, METH_VARARGS,
     "decode_check(model): ValueError naming what a dec_model record's layers cannot run"},
    {"decode", (PyCFunction)Kernels_decode, METH_VARARGS,
     "decode(model, x, t, s, positions, slots, query_start, block_tables, bt_stride, block_size, num_blocks, kv, "
     "cos_g, sin_g, cos_l, sin_l): every layer of a decode step over x (t x dim float32, in place)"},
    {"quantize", (PyCFunction)Kernels_quantize, METH_VARARGS,
     "quantize(x, m, k, ldx, block, q, d, g): x's int8 values, per-block scales and int16 sums of every 16"},
    {"dequantize", (PyCFunction)Kernels_dequantize, METH_VARARGS,
     "dequantize(type, data, rows, row_bytes, k, out): the weights as the unpackers see them, float32"},
    {"supports", (PyCFunction)Kernels_supports, METH_O, "supports(type): whether a ggml type has a kernel"},
    {"x8_bytes", (PyCFunction)Kernels_x8_bytes, METH_VARARGS,
     "x8_bytes(type, n, k): bytes of the interleaved layout, 0 when this CPU's kernels read none for the type"},
    {"repack", (PyCFunction)Kernels_repack, METH_VARARGS,
     "repack(type, src, n, row_bytes, k, dst): the file's rows into the interleaved layout at dst"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Kernels_getset[] = {
    {"isa", (getter)Kernels_get_isa, NULL, "the instruction set the kernels use", NULL},
    {"threads", (getter)Kernels_get_threads, NULL, "threads of the pool, the caller included", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject KernelsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lexi.kernels._cpu.Kernels",
    .tp_basicsize = sizeof(KernelsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Kernels(threads=1, isa='auto'): quantized matmuls over GGUF blocks on a pool of threads",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernels_init,
    .tp_dealloc = (destructor)Kernels_dealloc,
    .tp_methods = Kernels_methods,
    .tp_getset = Kernels_getset,
};

static PyObject *isas(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    if (cpu_has_vnni()) return Py_BuildValue("(sss)", "scalar", "avx2", "avx512vnni");
    return cpu_has_avx2() ? Py_BuildValue("(ss)", "scalar", "avx2") : Py_BuildValue("(s)", "scalar");
}

static PyMethodDef module_methods[] = {
    {"isas", isas, METH_NOARGS, "isas(): the kernel variants this CPU can run, portable first (scalar, avx2, avx512vnni)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef cpu_module = {PyModuleDef_HEAD_INIT, "_cpu", "LexiEngine's CPU kernels.", -1,
                                        module_methods};

PyMODINIT_FUNC PyInit__cpu(void) {
    if (PyType_Ready(&KernelsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&cpu_module);
    if (!m) return NULL;
    Py_INCREF(&KernelsType);
    if (PyModule_AddObject(m, "Kernels", (PyObject *)&KernelsType) < 0) {
        Py_DECREF(&KernelsType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "KC", KC);
    PyModule_AddIntConstant(m, "GEMV_MAX_M", GEMV_MAX_M);
    return m;
}
