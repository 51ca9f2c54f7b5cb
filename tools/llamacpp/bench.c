/* llama.cpp throughput anchor: prompt processing, single-sequence decode and grouped decode
 * (G sequences that share one prompt, one token per sequence per step, as GRPO samples a
 * group), in tokens/s, medians over repeats after one warm-up.
 *
 *   bench MODEL.gguf [--threads N] [--prompt P] [--gen N] [--group G] [--reps R]
 *
 * F32 KV cache, no flash attention (oracle_common.h). The prompt's cache is
 * shared by the group through llama_memory_seq_cp into a unified KV cache; decode steps ask for
 * the logits of every new token (as sampling needs), the prompt only for its last. Output lines:
 * "prompt<P> <tok/s>", "decode1 <tok/s>", "decode<G> <tok/s>" (medians), then the samples. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "oracle_common.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Deterministic token ids (an LCG) so runs are repeatable without a tokenizer. */
static llama_token next_token(unsigned *state, int n_vocab) {
  *state = *state * 1664525u + 1013904223u;
  return (llama_token)((*state >> 8) % (unsigned)n_vocab);
}

static void prefill(struct llama_context *ctx, struct llama_batch *b, int P, int n_vocab, unsigned *rng) {
  b->n_tokens = P;
  for (int i = 0; i < P; ++i) {
    b->token[i] = next_token(rng, n_vocab);
    b->pos[i] = i;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = 0;
    b->logits[i] = i == P - 1;
  }
  if (llama_decode(ctx, *b) != 0) oracle_die("llama_decode (prompt) failed", NULL);
}

/* G sequences decode N steps from a shared prompt already in seq 0; returns tokens/s. */
static double decode_group(struct llama_context *ctx, struct llama_batch *b, int P, int N, int G,
                           int n_vocab, unsigned *rng) {
  llama_memory_t mem = llama_get_memory(ctx);
  for (int s = 1; s < G; ++s) llama_memory_seq_cp(mem, 0, s, -1, -1);
  double t0 = now_s();
  for (int step = 0; step < N; ++step) {
    b->n_tokens = G;
    for (int s = 0; s < G; ++s) {
      b->token[s] = next_token(rng, n_vocab);
      b->pos[s] = P + step;
      b->n_seq_id[s] = 1;
      b->seq_id[s][0] = s;
      b->logits[s] = 1;
    }
    if (llama_decode(ctx, *b) != 0) oracle_die("llama_decode (decode) failed", NULL);
    for (int s = 0; s < G; ++s) (void)llama_get_logits_ith(ctx, s);
  }
  return (double)N * G / (now_s() - t0);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.gguf [--threads N] [--prompt P] [--gen N] [--group G] [--reps R] [--kv f32|f16|bf16]\n", argv[0]);
    return 2;
  }
  int n_threads = 2, P = 64, N = 32, G = 8, R = 5;
  enum ggml_type kv = GGML_TYPE_F32;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "--kv") && i + 1 < argc) {
      const char *t = argv[++i];
      kv = !strcmp(t, "f32") ? GGML_TYPE_F32 : !strcmp(t, "f16") ? GGML_TYPE_F16 : !strcmp(t, "bf16") ? GGML_TYPE_BF16 : GGML_TYPE_COUNT;
      if (kv == GGML_TYPE_COUNT) oracle_die("--kv must be f32, f16 or bf16, not", t);
      continue;
    }
    int *dst = !strcmp(argv[i], "--threads") ? &n_threads : !strcmp(argv[i], "--prompt") ? &P
             : !strcmp(argv[i], "--gen") ? &N : !strcmp(argv[i], "--group") ? &G
             : !strcmp(argv[i], "--reps") ? &R : NULL;
    if (!dst || i + 1 >= argc) oracle_die("unknown argument", argv[i]);
    *dst = atoi(argv[++i]);
    if (*dst <= 0) oracle_die("arguments must be positive", argv[i]);
  }
  struct llama_model *model = oracle_load_model(argv[1]);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int n_ctx = P + G * N + 64;
  struct llama_context *ctx = oracle_context(model, n_ctx, P > G ? P : G, G, n_threads, kv);
  llama_memory_t mem = llama_get_memory(ctx);
  struct llama_batch b = llama_batch_init(P > G ? P : G, 0, 1);
  unsigned rng = 12345u;

  double *pp = malloc(sizeof(double) * R), *d1 = malloc(sizeof(double) * R), *dg = malloc(sizeof(double) * R);
  for (int r = -1; r < R; ++r) {  /* r = -1: warm-up, not recorded */
    llama_memory_clear(mem, 1);
    double t0 = now_s();
    prefill(ctx, &b, P, n_vocab, &rng);
    double t_pp = now_s() - t0;
    double v1 = decode_group(ctx, &b, P, N, 1, n_vocab, &rng);
    llama_memory_seq_rm(mem, 0, P, -1);  /* back to the bare prompt */
    double vg = decode_group(ctx, &b, P, N, G, n_vocab, &rng);
    if (r >= 0) pp[r] = P / t_pp, d1[r] = v1, dg[r] = vg;
  }
  double spp[64], sd1[64], sdg[64];
  int k = R < 64 ? R : 64;
  memcpy(spp, pp, sizeof(double) * k), memcpy(sd1, d1, sizeof(double) * k), memcpy(sdg, dg, sizeof(double) * k);
  printf("prompt%d %.1f\ndecode1 %.1f\ndecode%d %.1f\n", P, median(pp, R), median(d1, R), G, median(dg, R));
  printf("# threads %d, prompt %d, gen %d, group %d, reps %d, kv %s; samples (tok/s):\n", n_threads, P, N, G, R,
         ggml_type_name(kv));
  printf("#   prompt:");
  for (int i = 0; i < k; ++i) printf(" %.1f", spp[i]);
  printf("\n#   decode1:");
  for (int i = 0; i < k; ++i) printf(" %.1f", sd1[i]);
  printf("\n#   decode%d:", G);
  for (int i = 0; i < k; ++i) printf(" %.1f", sdg[i]);
  printf("\n");
  free(pp), free(d1), free(dg);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
