/* Sampling's hot path in C: the top-k search over a row of logits, llama.cpp's chain on its
   candidates (top-p, min-p, temperature), and a round's whole verification, as
   specrun/core/sampling.py does in numpy.

   Sampled speculation needs a distribution for every draft token and every verified row.
   In numpy the chain is a dozen calls of a few µs each on ~40 numbers, and they run with
   the CPU's caches cold after the pass over the row (0.6 MB at a 152k vocabulary): 30-50
   µs a row, as much as the pass. Here it is a few hundred instructions, and a round's
   rows, the accept/reject decisions and the residual sample are one call.

   A row is either a whole vocabulary's logits (token i at x[i]) or a device's candidates:
   the few best tokens of a position, chosen by llama.cpp's backend sampler, with their ids.

   The search: a min-heap of the k best so far is checked block by block; once it holds k
   good logits, a block of 64 whose logits all stay at or below its floor, nearly every
   block, costs one comparison per logit and one branch for the 64. Candidates rank by
   logit, ties to the lower id, so the top k and its order are fully determined.

   Plain C with the buffer protocol: no numpy headers, no GIL while it runs. Built as an
   optional extension (setup.py); specrun/core/sampling.py does the same in numpy without
   it, and the tests hold the two to the same results. */

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

/* One position's logits: the whole vocabulary (ids NULL: token i at x[i]), or n
   candidates with their token ids, in any order. */
typedef struct {
    const float *x;
    const int32_t *ids;
    Py_ssize_t n;
} Row;

/* Candidates in no order: ties are settled by id, compared in full. */
static void offer_ranked(float *vals, int64_t *ids, int k, float x, int64_t id) {
    if (x != x) x = -INFINITY;
    if (x > vals[0] || (x == vals[0] && id < ids[0])) {
        vals[0] = x;
        ids[0] = id;
        sift_down(vals, ids, k, 0);
    }
}

/* The k best of a row (1 <= k <= n) into vals/ids, best first. A NaN logit ranks as -inf. */
static void top_k_row(Row row, int k, float *vals, int64_t *ids) {
    const float *x = row.x;
    for (int i = 0; i < k; i++) {
        vals[i] = x[i] == x[i] ? x[i] : -INFINITY;
        ids[i] = row.ids ? row.ids[i] : i;
    }
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(vals, ids, k, i);
    Py_ssize_t i = k, n = row.n;
    if (row.ids) {
        for (; i < n; i++) offer_ranked(vals, ids, k, x[i], row.ids[i]);
    } else {
        for (; i + BLOCK <= n; i += BLOCK) {
            for (int line = 0; line < BLOCK; line += 16) PREFETCH(x + i + 512 + line);
            if (!any_above(x + i, BLOCK, vals[0])) continue;
            for (Py_ssize_t part = i; part < i + BLOCK; part += PART)
                if (any_above(x + part, PART, vals[0]))
                    for (Py_ssize_t j = part; j < part + PART; j++) offer(vals, ids, k, x[j], j);
        }
        for (; i < n; i++) offer(vals, ids, k, x[i], i);
    }
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
   Returns how many are kept: ids[..keep) ascending, probs[..keep) their probabilities; 0
   where the best logit is not finite (NaN ranks as -inf): no distribution, and the caller
   fails rather than draw an id from nothing. */
static int chain(const float *vals, int64_t *ids, double *probs, int k, double top_p, double min_p, double temperature) {
    double x0 = vals[0], cdf = 0.0;
    if (!isfinite(x0)) return 0;
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

/* The probability of `token` in a distribution on ascending ids; 0 off its support. */
static double probability_of(const int64_t *ids, const double *probs, Py_ssize_t n, int64_t token) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (ids[mid] < token) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && ids[lo] == token ? probs[lo] : 0.0;
}

/* Inverse CDF at u in [0, 1), as sampling.sample: the first index whose running sum exceeds
   u times the total (summed in the same order), the last where rounding leaves none. */
static int sample_index(const double *probs, int n, double u) {
    double total = 0.0;
    for (int i = 0; i < n; i++) total += probs[i];
    double at = u * total, sum = 0.0;
    for (int i = 0; i < n; i++) {
        sum += probs[i];
        if (sum > at) return i;
    }
    return n - 1;
}

typedef struct {  /* the chain's settings and its scratch of k each */
    int k;
    double top_p, min_p, temperature;
    float *vals;
    int64_t *ids;
    double *probs, *residual;
} Chain;

static int chain_row(Chain *c, Row row) {
    top_k_row(row, c->k, c->vals, c->ids);
    return chain(c->vals, c->ids, c->probs, c->k, c->top_p, c->min_p, c->temperature);
}

/* sampling.verify's rule on all rows at once. Draft i's q is q_ids/q_probs[q_at[i]..q_at[i+1])
   (ascending ids; a lookup's point mass is its one token at 1). u[i] decides row i, u[n]
   draws the token that follows. Returns the number accepted; *token is the next one. -1
   where a row the rule reads has no distribution (chain's 0). */
static int verify_rows(Chain *c, const Row *rows, int n, const int64_t *drafts, const int64_t *q_at,
                       const int64_t *q_ids, const double *q_probs, const double *u, int64_t *token) {
    for (int i = 0; i < n; i++) {
        int keep = chain_row(c, rows[i]);
        if (keep == 0) return -1;
        const int64_t *qi = q_ids + q_at[i];
        const double *qp = q_probs + q_at[i];
        Py_ssize_t qn = (Py_ssize_t)(q_at[i + 1] - q_at[i]);
        double p = probability_of(c->ids, c->probs, keep, drafts[i]);
        if (u[i] * probability_of(qi, qp, qn, drafts[i]) < p) continue;
        /* max(0, p - q) is zero off p's support, so it is computed on that support */
        double mass = 0.0;
        for (int j = 0; j < keep; j++) {
            double r = c->probs[j] - probability_of(qi, qp, qn, c->ids[j]);
            mass += c->residual[j] = r > 0.0 ? r : 0.0;
        }
        /* zero mass cannot happen after a rejection in exact arithmetic; rounding can */
        *token = c->ids[sample_index(mass > 0.0 ? c->residual : c->probs, keep, u[n])];
        return i;
    }
    int keep = chain_row(c, rows[n]);
    if (keep == 0) return -1;
    *token = c->ids[sample_index(c->probs, keep, u[n])];
    return n;
}

/* A C-contiguous buffer of `kind` ('f' floats, 'i' signed integers) and `itemsize`:
   numpy's format letters for an integer differ by platform, its size does not. */
static int get_buffer(PyObject *obj, Py_buffer *view, char kind, Py_ssize_t itemsize, int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) return 0;
    const char *format = view->format ? view->format : "B";
    char letter = format[strlen(format) - 1];
    int is_kind = kind == 'f' ? (letter == 'f' || letter == 'd') : strchr("bhilqn", letter) != NULL;
    if (is_kind && view->itemsize == itemsize) return 1;
    PyErr_Format(PyExc_ValueError, "%s must be %s of %zd bytes", name, kind == 'f' ? "floats" : "integers", itemsize);
    PyBuffer_Release(view);
    return 0;
}

/* Rows over `values` (float32, `rows` equal rows) and `ids` (None: whole-vocabulary rows;
   else int32 candidates, one per value). */
typedef struct {
    Py_buffer values, ids;
    int has_ids;
    Py_ssize_t width;
} RowsBuffer;

static int get_rows(PyObject *values, PyObject *ids, Py_ssize_t rows, RowsBuffer *out) {
    out->has_ids = 0;
    if (!get_buffer(values, &out->values, 'f', sizeof(float), 0, "rows")) return 0;
    Py_ssize_t count = out->values.len / (Py_ssize_t)sizeof(float);
    out->width = rows > 0 ? count / rows : 0;
    if (rows < 1 || out->width < 1 || out->width * rows != count) {
        PyErr_Format(PyExc_ValueError, "rows must hold %zd equal rows", rows);
        PyBuffer_Release(&out->values);
        return 0;
    }
    if (ids == Py_None) return 1;
    if (!get_buffer(ids, &out->ids, 'i', sizeof(int32_t), 0, "ids")) {
        PyBuffer_Release(&out->values);
        return 0;
    }
    if (out->ids.len != out->values.len) {
        PyErr_SetString(PyExc_ValueError, "ids must hold one id per logit");
        PyBuffer_Release(&out->values);
        PyBuffer_Release(&out->ids);
        return 0;
    }
    out->has_ids = 1;
    return 1;
}

static Row row_at(const RowsBuffer *b, Py_ssize_t i) {
    Row row = {(const float *)b->values.buf + i * b->width,
               b->has_ids ? (const int32_t *)b->ids.buf + i * b->width : NULL, b->width};
    return row;
}

static void release_rows(RowsBuffer *b) {
    PyBuffer_Release(&b->values);
    if (b->has_ids) PyBuffer_Release(&b->ids);
}

static int check_k(int k, Py_ssize_t width) {
    if (k >= 1 && k <= width) return 1;
    PyErr_SetString(PyExc_ValueError, "need 1 <= k <= the row's length");
    return 0;
}

static int check_chain(double top_p, double min_p, double temperature) {
    if (temperature > 0 && top_p > 0 && top_p <= 1 && min_p >= 0 && min_p < 1) return 1;
    PyErr_SetString(PyExc_ValueError, "need temperature > 0, 0 < top_p <= 1 and 0 <= min_p < 1");
    return 0;
}

/* top_k(logits, ids, k) -> [(id, value), ...]: the k best of one row, best first. Python
   objects, not buffers to fill: the loop asks for the best two of a row right after a
   decode, where every numpy call it saves runs with cold caches. */
static PyObject *top_k(PyObject *self, PyObject *args) {
    PyObject *values, *ids_in;
    int k;
    RowsBuffer b;
    if (!PyArg_ParseTuple(args, "OOi", &values, &ids_in, &k) || !get_rows(values, ids_in, 1, &b)) return NULL;
    PyObject *result = NULL;
    int64_t *ids = NULL;
    float *vals = NULL;
    if (check_k(k, b.width)) {
        ids = PyMem_Malloc(k * sizeof(int64_t));
        vals = PyMem_Malloc(k * sizeof(float));
        if (!ids || !vals) PyErr_NoMemory();
    }
    if (ids && vals) {
        Py_BEGIN_ALLOW_THREADS
        top_k_row(row_at(&b, 0), k, vals, ids);
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
    release_rows(&b);
    return result;
}

/* distribution(logits, ids, k, top_p, min_p, temperature, out_ids, out_probs) -> keep: the
   chain top-k -> top-p -> min-p -> temperature on one row; out_ids (int64) and out_probs
   (float64) writable buffers of k each, the first `keep` written; 0 where the row's best
   logit is not finite. */
static PyObject *distribution(PyObject *self, PyObject *args) {
    PyObject *values, *ids_in, *ids_out, *probs_out;
    int k;
    double top_p, min_p, temperature;
    RowsBuffer b;
    Py_buffer ids, probs;
    if (!PyArg_ParseTuple(args, "OOidddOO", &values, &ids_in, &k, &top_p, &min_p, &temperature, &ids_out, &probs_out))
        return NULL;
    if (!check_chain(top_p, min_p, temperature) || !get_rows(values, ids_in, 1, &b)) return NULL;
    PyObject *result = NULL;
    if (check_k(k, b.width) && get_buffer(ids_out, &ids, 'i', sizeof(int64_t), 1, "out_ids")) {
        if (get_buffer(probs_out, &probs, 'f', sizeof(double), 1, "out_probs")) {
            float *vals = NULL;
            if (ids.len != k * (Py_ssize_t)sizeof(int64_t) || probs.len != k * (Py_ssize_t)sizeof(double))
                PyErr_Format(PyExc_ValueError, "out_ids and out_probs must hold k = %d items", k);
            else if ((vals = malloc(k * sizeof *vals)) == NULL)
                PyErr_NoMemory();
            else {
                int keep;
                Py_BEGIN_ALLOW_THREADS
                top_k_row(row_at(&b, 0), k, vals, ids.buf);
                keep = chain(vals, ids.buf, probs.buf, k, top_p, min_p, temperature);
                Py_END_ALLOW_THREADS
                result = PyLong_FromLong(keep);
            }
            free(vals);
            PyBuffer_Release(&probs);
        }
        PyBuffer_Release(&ids);
    }
    release_rows(&b);
    return result;
}

/* verify_greedy(logits, ids, drafts, near_tie) -> (accepted, token, ties): the target's
   rows (one per draft and the bonus) read in order, each once, until the first whose best
   token is not the draft's; ties[i] whether row i's top two lie closer than near_tie. */
static PyObject *verify_greedy(PyObject *self, PyObject *args) {
    PyObject *values, *ids_in, *drafts_in;
    double near_tie;
    RowsBuffer b;
    Py_buffer drafts;
    if (!PyArg_ParseTuple(args, "OOOd", &values, &ids_in, &drafts_in, &near_tie)) return NULL;
    if (!get_buffer(drafts_in, &drafts, 'i', sizeof(int64_t), 0, "drafts")) return NULL;
    int n = (int)(drafts.len / (Py_ssize_t)sizeof(int64_t));
    if (!get_rows(values, ids_in, n + 1, &b)) {
        PyBuffer_Release(&drafts);
        return NULL;
    }
    const int64_t *d = drafts.buf;
    float vals[2];
    int64_t best[2];
    int read = 0, k = b.width < 2 ? 1 : 2;
    char ties[64 + 1];  /* rows read, at most γ + 1 */
    PyObject *result = NULL;
    if (n + 1 > (int)sizeof ties) {
        PyErr_SetString(PyExc_ValueError, "at most 64 drafts");
    } else {
        Py_BEGIN_ALLOW_THREADS
        for (; read <= n; read++) {
            top_k_row(row_at(&b, read), k, vals, best);
            ties[read] = k == 2 && (double)vals[0] - (double)vals[1] < near_tie;
            if (read == n || best[0] != d[read]) break;
        }
        Py_END_ALLOW_THREADS
        PyObject *flags = PyList_New(read + 1);
        for (int i = 0; flags && i <= read; i++) PyList_SET_ITEM(flags, i, PyBool_FromLong(ties[i]));
        if (flags) result = Py_BuildValue("(iLN)", read, (long long)best[0], flags);
    }
    PyBuffer_Release(&drafts);
    release_rows(&b);
    return result;
}

/* verify(logits, ids, drafts, q_at, q_ids, q_probs, uniforms, k, top_p, min_p, temperature)
   -> (accepted, token): sampling.verify's rule on a round's rows in one call (verify_rows);
   accepted -1 where a row it read had no finite logit. */
static PyObject *verify(PyObject *self, PyObject *args) {
    PyObject *values, *ids_in, *objects[5];
    double top_p, min_p, temperature;
    int k;
    if (!PyArg_ParseTuple(args, "OOOOOOOiddd", &values, &ids_in, &objects[0], &objects[1], &objects[2],
                          &objects[3], &objects[4], &k, &top_p, &min_p, &temperature))
        return NULL;
    if (!check_chain(top_p, min_p, temperature)) return NULL;
    static const char kinds[5] = {'i', 'i', 'i', 'f', 'f'};
    static const Py_ssize_t sizes[5] = {sizeof(int64_t), sizeof(int64_t), sizeof(int64_t), sizeof(double), sizeof(double)};
    static const char *names[5] = {"drafts", "q_at", "q_ids", "q_probs", "uniforms"};
    Py_buffer buffers[5];
    int got = 0;
    while (got < 5 && get_buffer(objects[got], &buffers[got], kinds[got], sizes[got], 0, names[got])) got++;
    PyObject *result = NULL;
    RowsBuffer b;
    int n = got == 5 ? (int)(buffers[0].len / (Py_ssize_t)sizeof(int64_t)) : 0;
    if (got == 5 && get_rows(values, ids_in, n + 1, &b)) {
        const int64_t *q_at = buffers[1].buf;
        Py_ssize_t q_len = buffers[2].len / (Py_ssize_t)sizeof(int64_t);
        int ok = check_k(k, b.width);
        if (ok && (buffers[1].len != (n + 1) * (Py_ssize_t)sizeof(int64_t) || buffers[3].len != q_len * (Py_ssize_t)sizeof(double)
                   || buffers[4].len != (n + 1) * (Py_ssize_t)sizeof(double))) {
            PyErr_SetString(PyExc_ValueError, "need n + 1 q bounds and uniforms, and one q probability per q id");
            ok = 0;
        }
        for (int i = 0; ok && i < n; i++)
            if (q_at[i] < 0 || q_at[i] > q_at[i + 1] || q_at[i + 1] > q_len) {
                PyErr_SetString(PyExc_ValueError, "q bounds must ascend within q_ids");
                ok = 0;
            }
        Row *rows = ok ? PyMem_Malloc((n + 1) * sizeof(Row)) : NULL;
        Chain c = {k, top_p, min_p, temperature, NULL, NULL, NULL, NULL};
        if (ok) {
            c.vals = PyMem_Malloc(k * sizeof(float));
            c.ids = PyMem_Malloc(k * sizeof(int64_t));
            c.probs = PyMem_Malloc(k * sizeof(double));
            c.residual = PyMem_Malloc(k * sizeof(double));
            if (!rows || !c.vals || !c.ids || !c.probs || !c.residual) {
                PyErr_NoMemory();
                ok = 0;
            }
        }
        if (ok) {
            for (int i = 0; i <= n; i++) rows[i] = row_at(&b, i);
            int64_t token = 0;
            int accepted;
            Py_BEGIN_ALLOW_THREADS
            accepted = verify_rows(&c, rows, n, buffers[0].buf, q_at, buffers[2].buf, buffers[3].buf, buffers[4].buf, &token);
            Py_END_ALLOW_THREADS
            result = Py_BuildValue("(iL)", accepted, (long long)token);
        }
        PyMem_Free(rows);
        PyMem_Free(c.vals);
        PyMem_Free(c.ids);
        PyMem_Free(c.probs);
        PyMem_Free(c.residual);
        release_rows(&b);
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&buffers[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"top_k", top_k, METH_VARARGS, "The k best of one row, best first: top_k(logits, ids, k) -> [(id, value)]."},
    {"distribution", distribution, METH_VARARGS,
     "llama.cpp's sampling chain on one row: "
     "distribution(logits, ids, k, top_p, min_p, temperature, out_ids, out_probs) -> keep."},
    {"verify_greedy", verify_greedy, METH_VARARGS,
     "Greedy verification of a round: verify_greedy(logits, ids, drafts, near_tie) -> (accepted, token, ties)."},
    {"verify", verify, METH_VARARGS,
     "Sampled verification of a round: verify(logits, ids, drafts, q_at, q_ids, q_probs, uniforms, "
     "k, top_p, min_p, temperature) -> (accepted, token)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sampling", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sampling(void) { return PyModule_Create(&module); }
