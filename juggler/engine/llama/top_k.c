/* The k best tokens of a logits row, written into a llama_token_data array (issue 47).
 *
 * Built by `make install` into the virtual environment (see top_k_native.py); the engine
 * falls back to top_k.py's numpy version, which returns the same tokens in the same
 * order, where no C compiler is found.
 *
 * Order: best logit first; equal logits by lower token id (the order of a stable sort of
 * the row by descending logit). Tokens whose logit is not finite (-inf: masked) and
 * tokens `banned` marks (nonzero) are never candidates.
 *
 * One pass: a threshold is guessed from every `stride`-th logit (the `guess`-th best of
 * those), and only the logits at or above it are looked at, a block of 64 at a time: a
 * block is first compared with the threshold as a whole (a loop the compiler vectorises)
 * and skipped when none reaches it, else its hits are read from a byte mask. Each is
 * inserted into a sorted array of at most k; once k are found the threshold rises to the
 * k-th best so far, so most later blocks are skipped. When fewer than k allowed tokens
 * lie at or above the guess, the whole row is scanned the same way with no threshold:
 * the answer is always exact.
 */

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int32_t id;
    float logit;
    float p;
} token_data;

/* Logits compared at a time: a block with none at or above the threshold is skipped. */
#define BLOCK 64

/* Insert (v, i) into best[0..*n) (sorted by logit descending; equal logits keep the
 * earlier, lower id first), keeping at most k. */
static inline void insert(token_data *best, int *n, int k, float v, int32_t i) {
    int m = *n;
    if (m == k) {
        if (v <= best[k - 1].logit) return;
        m = k - 1;
    }
    int j = m;
    while (j > 0 && best[j - 1].logit < v) {
        best[j] = best[j - 1];
        j--;
    }
    best[j].id = i;
    best[j].logit = v;
    best[j].p = 0.0f;
    if (*n < k) (*n)++;
}

static inline void consider(const float *row, const uint8_t *banned, int i, int k,
                            token_data *best, int *found) {
    float v = row[i];
    if (isfinite(v) && !(banned && banned[i])) insert(best, found, k, v, i);
}

/* AVX2 where the CPU has it, chosen when the library loads (GCC/clang on x86-64 Linux). */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define WIDEST __attribute__((target_clones("avx2", "default")))
#else
#define WIDEST
#endif

WIDEST static int scan(const float *row, int n, int k, const uint8_t *banned, float t,
                       token_data *best) {
    uint8_t hit[BLOCK];
    uint64_t words[BLOCK / 8];
    int found = 0;
    int i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        /* Once k are found, only a logit above the k-th can enter (ids only grow). */
        float lim = found == k && best[k - 1].logit > t ? best[k - 1].logit : t;
        const float *r = row + i;
        int any = 0;
        for (int j = 0; j < BLOCK; j++) any |= r[j] >= lim; /* vectorised */
        if (!any) continue;
        for (int j = 0; j < BLOCK; j++) hit[j] = r[j] >= lim; /* vectorised */
        memcpy(words, hit, BLOCK);
        for (int q = 0; q < BLOCK / 8; q++) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            for (uint64_t w = words[q]; w; w &= w - 1) /* each set byte, lowest first */
                consider(row, banned, i + q * 8 + (__builtin_ctzll(w) >> 3), k, best, &found);
#else
            if (words[q])
                for (int j = q * 8; j < q * 8 + 8; j++)
                    if (hit[j]) consider(row, banned, i + j, k, best, &found);
#endif
        }
    }
    for (; i < n; i++)
        if (row[i] >= t) consider(row, banned, i, k, best, &found);
    return found;
}

/* The `guess`-th best finite logit among every `stride`-th one (-INFINITY if none). */
static float guess_threshold(const float *row, int n, int stride, int guess) {
    float top[64];
    int m = 0;
    if (guess > 64) guess = 64;
    for (int i = 0; i < n; i += stride) {
        float v = row[i];
        if (!isfinite(v)) continue;
        if (m == guess && v <= top[m - 1]) continue;
        int j = m < guess ? m++ : m - 1;
        while (j > 0 && top[j - 1] < v) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = v;
    }
    return m == guess ? top[m - 1] : -INFINITY;
}

/* Writes the (at most k) best allowed tokens of row[0..n) into out, best first; returns
 * how many. */
int juggler_top_k(const float *row, int n, int k, const uint8_t *banned, int stride, int guess,
                  token_data *out) {
    if (k <= 0) return 0;
    float t = guess_threshold(row, n, stride, guess);
    if (t > -INFINITY) {
        int found = scan(row, n, k, banned, t, out);
        if (found >= k) return found;
    }
    return scan(row, n, k, banned, -INFINITY, out);
}

/* One draw of a sampler chain over the k best tokens of a batch row, in one call
 * (`best_k.BestK.draw`): the row's logits from llama.cpp, its k best into the candidate
 * array, the chain applied to them, its choice accepted. Every pointer is fixed for the
 * sampler's life and set once in a `draw_spec`; a draw passes the spec and the row. The
 * chain is llama.cpp's own, called through the addresses of `llama_get_logits_ith`,
 * `llama_sampler_apply` and `llama_sampler_accept`: the same draws as four calls from
 * Python, with one crossing (and one release of Python's lock) instead of four.
 *
 * Where the chain changes some tokens' logits before top_k (a logit bias, repetition
 * penalties), those tokens are known: the biased ones (`fixed`) and the ones the
 * penalties remember, every token accepted in the last `window` draws (`ring`, kept
 * here as the chain's penalty samplers keep theirs). Every other token keeps its logit,
 * so the k best after the changes are among the k + m best before them (m: how many
 * tokens may change) and the m themselves: the chain applied to those draws what it
 * draws over the vocabulary. Past `MAX_CANDIDATES`, or once the ring no longer holds
 * the whole window, a draw says so (-3) and the caller runs the chain over the
 * vocabulary. */

typedef struct {
    token_data *data;
    size_t size;
    int64_t selected;
    bool sorted;
} token_data_array; /* llama.cpp's llama_token_data_array */

typedef struct {
    void *ctx;
    float *(*logits_at)(void *ctx, int32_t row);
    void *chain;
    void (*apply)(void *chain, token_data_array *cur);
    void (*accept)(void *chain, int32_t token);
    token_data_array *arr;
    const uint8_t *banned;
    int32_t n_vocab;
    int32_t k;
    int32_t stride;
    int32_t guess;
    /* The tokens whose logits the chain may change: biased ones, then the ring. */
    const int32_t *fixed;
    int32_t n_fixed;
    int32_t *ring;     /* the last accepted tokens, `ring_cap` of them at most */
    int32_t ring_cap;  /* 0: no penalties */
    int32_t window;    /* tokens the penalties remember */
    int64_t accepted;  /* tokens accepted so far */
    int32_t *changed;  /* scratch: the distinct tokens that may change */
    uint8_t *marks;    /* scratch over the vocabulary, all zero between draws */
} draw_spec;

/* The k + m best a draw looks for at most before it leaves the row to the whole chain
 * (the array holds up to m more: twice this). */
#define MAX_CANDIDATES 256
/* top_k.py's WIDER: the threshold guess that holds about 1,024 tokens. */
#define WIDER_GUESS 16

/* The token was accepted by the chain: the ring remembers it. */
void juggler_note(draw_spec *s, int32_t token) {
    if (s->ring_cap > 0) s->ring[s->accepted % s->ring_cap] = token;
    s->accepted++;
}

/* The distinct tokens whose logits the chain may change, into s->changed (each marked
 * 2 in s->marks); -1 when the ring no longer holds the whole window. */
static int changed_tokens(draw_spec *s) {
    int64_t held = s->accepted < s->window ? s->accepted : s->window;
    if (held > s->ring_cap) return -1;
    int m = 0;
    for (int i = 0; i < s->n_fixed; i++) {
        int32_t t = s->fixed[i];
        if (t < 0 || t >= s->n_vocab) continue; /* not a token: nothing to change */
        if (!s->marks[t]) s->marks[t] = 2, s->changed[m++] = t;
    }
    for (int64_t j = s->accepted - held; j < s->accepted; j++) {
        int32_t t = s->ring[j % s->ring_cap];
        if (!s->marks[t]) s->marks[t] = 2, s->changed[m++] = t;
    }
    return m;
}

static void unmark(draw_spec *s, int m) {
    for (int i = 0; i < m; i++) s->marks[s->changed[i]] = 0;
}

/* The candidates of row `logits` into s->arr (see above); -1: too many, use the whole
 * chain. `changes`: the spec has the fields after `guess`. */
static int candidates(draw_spec *s, const float *logits, bool changes) {
    token_data_array *arr = s->arr;
    if (!changes || (s->n_fixed == 0 && s->ring_cap == 0)) {
        arr->size = (size_t)juggler_top_k(logits, s->n_vocab, s->k, s->banned, s->stride,
                                          s->guess, arr->data);
        arr->sorted = true;
        return 0;
    }
    int m = changed_tokens(s);
    if (m < 0) return -1;
    if (s->k + m > MAX_CANDIDATES) {
        unmark(s, m);
        return -1;
    }
    int kk = s->k + m;
    int guess = 2 * kk <= s->guess * s->stride ? s->guess : WIDER_GUESS;
    int found = juggler_top_k(logits, s->n_vocab, kk, s->banned, s->stride, guess, arr->data);
    for (int i = 0; i < found; i++) s->marks[arr->data[i].id] = 1; /* already there */
    for (int i = 0; i < m; i++) {
        int32_t t = s->changed[i];
        float v = logits[t];
        if (s->marks[t] == 2 && isfinite(v) && !(s->banned && s->banned[t])) {
            arr->data[found].id = t;
            arr->data[found].logit = v;
            arr->data[found].p = 0.0f;
            found++;
        }
        s->marks[t] = 0;
    }
    for (int i = 0; i < found; i++) s->marks[arr->data[i].id] = 0;
    arr->size = (size_t)found;
    arr->sorted = false;
    return 0;
}

static int32_t draw(draw_spec *s, int32_t row, bool changes) {
    const float *logits = s->logits_at(s->ctx, row);
    if (logits == NULL) return -1;
    if (candidates(s, logits, changes) < 0) return -3;
    token_data_array *arr = s->arr;
    arr->selected = -1;
    s->apply(s->chain, arr);
    if (arr->selected < 0 || arr->selected >= (int64_t)arr->size) return -2;
    int32_t token = arr->data[arr->selected].id;
    s->accept(s->chain, token);
    if (changes) juggler_note(s, token);
    return token;
}

/* The token drawn from batch row `row`; -1 when llama.cpp has no logits for the row, -2
 * when the chain selected none. Reads the spec up to `guess` only (as the engine did
 * before `juggler_draw_changed`, so that a checkout of then still runs with this
 * library). */
int32_t juggler_draw(draw_spec *s, int32_t row) { return draw(s, row, false); }

/* The same with the tokens the chain changes (the whole spec); -3 when the row is left
 * to the whole chain. */
int32_t juggler_draw_changed(draw_spec *s, int32_t row) { return draw(s, row, true); }
