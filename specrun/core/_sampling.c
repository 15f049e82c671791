/* Sampling's hot path in C: the top-k search over a row of logits, and llama.cpp's chain
   on its candidates (top-p, min-p, temperature), as specrun/sampling.py does in numpy.

   Sampled speculation needs a distribution for every draft token and every verified row.
   In numpy the chain is a dozen calls of a few µs each on ~40 numbers, and they run with
   the CPU's caches cold after the pass over the row (0.6 MB at a 152k vocabulary): 30-50
   µs a row, as much as the pass. Here it is a few hundred instructions.

   The search: a min-heap of the k best so far is checked block by block; once it holds k
   good logits, a block of 64 whose logits all stay at or below its floor, nearly every
   block, costs one comparison per logit and one branch for the 64. Candidates rank by
   logit, ties to the lower id, so the top k and its order are fully determined.

   Plain C with the buffer protocol: no numpy headers, no GIL while it runs. Built as an
   optional extension (setup.py); specrun/sampling.py does the same in numpy without it,
   and the tests hold the two to the same results. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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

/* Candidate a ranks below candidate b: a lower logit, or the same at a higher id. */
static int worse(const float *vals, const int64_t *ids, int a, int b) {
    return vals[a] < vals[b] || (vals[a] == vals[b] && ids[a] > ids[b]);
}

static void swap(float *vals, int64_t *ids, int a, int b) {
    float v = vals[a]; vals[a] = vals[b]; vals[b] = v;
    int64_t i = ids[a]; ids[a] = ids[b]; ids[b] = i;
}

/* The heap's root is its worst candidate. */
static void sift_down(float *vals, int64_t *ids, int size, int at) {
    for (;;) {
        int child = 2 * at + 1;
        if (child >= size) return;
        if (child + 1 < size && worse(vals, ids, child + 1, child)) child++;
        if (!worse(vals, ids, child, at)) return;
        swap(vals, ids, at, child);
        at = child;
    }
}

/* Logits come in ascending id: one equal to the floor ranks below it. False for NaN. */
static void offer(float *vals, int64_t *ids, int k, float x, int64_t id) {
    if (x > vals[0]) {
        vals[0] = x;
        ids[0] = id;
        sift_down(vals, ids, k, 0);
    }
}

/* The k best of x[0..n) (1 <= k <= n) into vals/ids, best first. A NaN logit ranks as -inf. */
static void top_k_row(const float *x, Py_ssize_t n, int k, float *vals, int64_t *ids) {
    for (int i = 0; i < k; i++) { vals[i] = x[i] == x[i] ? x[i] : -INFINITY; ids[i] = i; }
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
    for (int end = k - 1; end > 0; end--) {  /* heap sort: the worst left goes last */
        swap(vals, ids, 0, end);
        sift_down(vals, ids, end, 0);
    }
}

/* Ascending ids, for the n kept candidates (a heap sort: k is the user's choice). */
static void sift_by_id(int64_t *ids, double *probs, int size, int at) {
    for (;;) {
        int child = 2 * at + 1;
        if (child >= size) return;
        if (child + 1 < size && ids[child + 1] > ids[child]) child++;
        if (ids[child] <= ids[at]) return;
        int64_t i = ids[at]; ids[at] = ids[child]; ids[child] = i;
        double p = probs[at]; probs[at] = probs[child]; probs[child] = p;
        at = child;
    }
}

static void sort_by_id(int64_t *ids, double *probs, int n) {
    for (int i = n / 2 - 1; i >= 0; i--) sift_by_id(ids, probs, n, i);
    for (int end = n - 1; end > 0; end--) {
        int64_t i = ids[0]; ids[0] = ids[end]; ids[end] = i;
        double p = probs[0]; probs[0] = probs[end]; probs[end] = p;
        sift_by_id(ids, probs, end, 0);
    }
}

/* llama.cpp's chain after top-k, on the k candidates best first (vals/ids): top-p and
   min-p look at the untempered probabilities exp(x - x0) up to their sum, then the kept
   ones get the tempered softmax. In float64, step for step as sampling.py's numpy chain.
   Returns how many are kept: ids[..keep) ascending, probs[..keep) their probabilities. */
static int chain(const float *vals, int64_t *ids, double *probs, int k, double top_p, double min_p, double temperature) {
    double x0 = vals[0], cdf = 0.0;
    for (int i = 0; i < k; i++) cdf += probs[i] = exp((double)vals[i] - x0);
    int keep = k;
    if (top_p < 1) {  /* the smallest prefix whose mass reaches top_p (at least one) */
        double cut = top_p * cdf, sum = 0.0;
        for (keep = 0; keep < k - 1; keep++) {
            sum += probs[keep];
            if (sum >= cut) break;
        }
        keep++;
    }
    if (min_p > 0) {  /* probs[0] is 1, and they do not increase */
        int above = 0;
        while (above < k && probs[above] >= min_p) above++;
        keep = above < keep ? above : keep;
    }
    double total = 0.0;
    for (int i = 0; i < keep; i++) total += probs[i] = exp(((double)vals[i] - x0) / temperature);
    for (int i = 0; i < keep; i++) probs[i] /= total;
    sort_by_id(ids, probs, keep);
    return keep;
}

static int is_row(const Py_buffer *logits, int k) {
    if (k >= 1 && k <= logits->len / (Py_ssize_t)sizeof(float)) return 1;
    PyErr_SetString(PyExc_ValueError, "need 1 <= k <= len(logits)");
    return 0;
}

static int holds(const Py_buffer *buffer, int k, Py_ssize_t item, const char *name) {
    if (buffer->len == k * item) return 1;
    PyErr_Format(PyExc_ValueError, "%s must hold k = %d items", name, k);
    return 0;
}

/* top_k(logits, k) -> [(id, value), ...]: the k best of a C-contiguous float32 row, best
   first. Python objects, not buffers to fill: the loop asks for the best two of a row each
   round, right after a decode, where every numpy call it saves runs with cold caches. */
static PyObject *top_k(PyObject *self, PyObject *args) {
    Py_buffer logits;
    int k;
    if (!PyArg_ParseTuple(args, "y*i", &logits, &k)) return NULL;
    PyObject *result = NULL;
    int64_t *ids = NULL;
    float *vals = NULL;
    if (is_row(&logits, k)) {
        ids = PyMem_Malloc(k * sizeof(int64_t));
        vals = PyMem_Malloc(k * sizeof(float));
        if (!ids || !vals) PyErr_NoMemory();
    }
    if (ids && vals) {
        Py_BEGIN_ALLOW_THREADS
        top_k_row(logits.buf, logits.len / sizeof(float), k, vals, ids);
        Py_END_ALLOW_THREADS
        result = PyList_New(k);
        for (int i = 0; result && i < k; i++) {
            PyObject *pair = Py_BuildValue("(Ld)", (long long)ids[i], (double)vals[i]);
            if (!pair) Py_CLEAR(result);
            else PyList_SET_ITEM(result, i, pair);
        }
    }
    PyMem_Free(ids);
    PyMem_Free(vals);
    PyBuffer_Release(&logits);
    return result;
}

/* distribution(logits, k, top_p, min_p, temperature, ids, probs) -> keep: the chain
   top-k -> top-p -> min-p -> temperature on one C-contiguous float32 row; ids (int64)
   and probs (float64) writable buffers of k each, the first `keep` written. */
static PyObject *distribution(PyObject *self, PyObject *args) {
    Py_buffer logits, ids, probs;
    int k;
    double top_p, min_p, temperature;
    if (!PyArg_ParseTuple(args, "y*idddw*w*", &logits, &k, &top_p, &min_p, &temperature, &ids, &probs)) return NULL;
    PyObject *result = NULL;
    float *vals = NULL;
    if (!(temperature > 0 && top_p > 0 && top_p <= 1 && min_p >= 0 && min_p < 1))
        PyErr_SetString(PyExc_ValueError, "need temperature > 0, 0 < top_p <= 1 and 0 <= min_p < 1");
    else if (is_row(&logits, k) && holds(&ids, k, sizeof(int64_t), "ids") && holds(&probs, k, sizeof(double), "probs")) {
        if ((vals = malloc(k * sizeof *vals)) == NULL) {
            PyErr_NoMemory();
        } else {
            int keep;
            Py_BEGIN_ALLOW_THREADS
            top_k_row(logits.buf, logits.len / sizeof(float), k, vals, ids.buf);
            keep = chain(vals, ids.buf, probs.buf, k, top_p, min_p, temperature);
            Py_END_ALLOW_THREADS
            result = PyLong_FromLong(keep);
        }
    }
    free(vals);
    PyBuffer_Release(&logits);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&probs);
    return result;
}

static PyMethodDef methods[] = {
    {"top_k", top_k, METH_VARARGS, "The k best of a row of float32 logits, best first: top_k(logits, k) -> [(id, value)]."},
    {"distribution", distribution, METH_VARARGS,
     "llama.cpp's sampling chain on a row of float32 logits: "
     "distribution(logits, k, top_p, min_p, temperature, ids, probs) -> keep."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sampling", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sampling(void) { return PyModule_Create(&module); }
