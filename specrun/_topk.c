/* The k largest logits of a row, in one pass: sampling's top-k candidates.

   numpy needs a dozen calls of a few µs each for this on one row, more than the pass
   over a 152k vocabulary itself; sampled speculation does it for every draft token and
   every verified row. A min-heap of the k best so far is checked block by block: once
   it holds k good logits, a block of 64 whose logits all stay at or below its floor,
   nearly every block, costs one comparison per logit and one branch for the 64.

   Plain C with the buffer protocol: no numpy headers, no GIL while it runs. Built as an
   optional extension (setup.py); specrun/sampling.py falls back to numpy without it. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 64  /* logits per test against the floor: one test, then a branch nearly never taken */
#define PART 16   /* after a block passes its floor, the parts of it that do are offered logit by logit */

#if defined(__GNUC__)  /* GCC and Clang: 4-wide compares (SSE2, NEON) on any target */
typedef float f4 __attribute__((vector_size(16)));
typedef int32_t i4 __attribute__((vector_size(16)));
typedef int64_t i2 __attribute__((vector_size(16)));

static int any_above(const float *x, int len, float floor) {
    f4 f = {floor, floor, floor, floor}, v;
    i4 m = {0, 0, 0, 0};
    for (int j = 0; j < len; j += 4) {
        memcpy(&v, x + j, sizeof v);
        m |= v > f;
    }
    i2 halves;  /* two 64-bit lanes: a cheaper horizontal test than four 32-bit ones */
    memcpy(&halves, &m, sizeof halves);
    return (halves[0] | halves[1]) != 0;
}
/* A GPU's logits reach the CPU by DMA, outside its caches: asking for the row 2 KB
   ahead saved ~10% a row on this machine's x86 (measured; the hardware prefetcher alone
   falls behind after the mispredicted branches of the first few thousand logits). */
#define PREFETCH(p) __builtin_prefetch(p)
#else
static int any_above(const float *x, int len, float floor) {
    int above = 0;
    for (int j = 0; j < len; j++) above |= x[j] > floor;
    return above;
}
#define PREFETCH(p) ((void)0)
#endif

static void sift_down(float *vals, int64_t *ids, int k, int at) {
    for (;;) {
        int child = 2 * at + 1;
        if (child >= k) return;
        if (child + 1 < k && vals[child + 1] < vals[child]) child++;
        if (!(vals[child] < vals[at])) return;
        float v = vals[at]; vals[at] = vals[child]; vals[child] = v;
        int64_t i = ids[at]; ids[at] = ids[child]; ids[child] = i;
        at = child;
    }
}

static void offer(float *vals, int64_t *ids, int k, float x, int64_t id) {
    if (x > vals[0]) {  /* false for NaN: a NaN logit is never a candidate */
        vals[0] = x;
        ids[0] = id;
        sift_down(vals, ids, k, 0);
    }
}

/* The k largest of x[0..n) (k <= n) into vals/ids, in heap order. */
static void top_k_row(const float *x, Py_ssize_t n, int k, float *vals, int64_t *ids) {
    for (int i = 0; i < k; i++) { vals[i] = x[i]; ids[i] = i; }
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(vals, ids, k, i);
    Py_ssize_t i = k;
    for (; i + BLOCK <= n; i += BLOCK) {
        for (int line = 0; line < BLOCK; line += 16) PREFETCH(x + i + 512 + line);
        if (!any_above(x + i, BLOCK, vals[0])) continue;
        for (Py_ssize_t part = i; part < i + BLOCK; part += PART)
            if (any_above(x + part, PART, vals[0]))
                for (Py_ssize_t j = part; j < part + PART; j++) offer(vals, ids, k, x[j], j);
    }
    for (; i < n; i++) offer(vals, ids, k, x[i], i);
}

/* top_k(logits, k, ids, values): logits a C-contiguous float32 buffer of one row,
   ids (int64) and values (float32) writable buffers of k each. */
static PyObject *top_k(PyObject *self, PyObject *args) {
    Py_buffer logits, ids, vals;
    int k;
    if (!PyArg_ParseTuple(args, "y*iw*w*", &logits, &k, &ids, &vals)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n_vocab = logits.len / (Py_ssize_t)sizeof(float);
    if (k < 1 || k > n_vocab || ids.len != k * (Py_ssize_t)sizeof(int64_t) || vals.len != k * (Py_ssize_t)sizeof(float)) {
        PyErr_SetString(PyExc_ValueError, "top_k: need 1 <= k <= len(logits) and k ids and values");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    top_k_row((const float *)logits.buf, n_vocab, k, (float *)vals.buf, (int64_t *)ids.buf);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&logits);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&vals);
    return result;
}

static PyMethodDef methods[] = {
    {"top_k", top_k, METH_VARARGS, "The k largest of a row of float32 logits: top_k(logits, k, ids, values)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_topk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__topk(void) { return PyModule_Create(&module); }
