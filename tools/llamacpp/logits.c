/* llama.cpp logits oracle: evaluates a token sequence in one batch with every position marked
 * for output and writes all logits as raw little-endian float32 [T, vocab].
 *
 *   logits MODEL.gguf TOKENS OUT.f32 [--lora ADAPTER.gguf [--scale S]] [--threads N]
 *
 * TOKENS: comma-separated ids ("1,5,9"). The LoRA scale multiplies llama.cpp's alpha / r
 * (default 1, i.e. exactly PEFT's scaling). Prints "T vocab" on stdout. */
#include "oracle_common.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL.gguf TOKENS OUT.f32 [--lora ADAPTER.gguf [--scale S]] [--threads N]\n", argv[0]);
    return 2;
  }
  const char *model_path = argv[1], *tokens_arg = argv[2], *out_path = argv[3];
  const char *lora_path = NULL;
  float lora_scale = 1.0f;
  int n_threads = 2;
  for (int i = 4; i < argc; ++i) {
    if (!strcmp(argv[i], "--lora") && i + 1 < argc) lora_path = argv[++i];
    else if (!strcmp(argv[i], "--scale") && i + 1 < argc) lora_scale = strtof(argv[++i], NULL);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) n_threads = atoi(argv[++i]);
    else oracle_die("unknown argument", argv[i]);
  }

  /* tokens */
  int cap = 16, n = 0;
  llama_token *tokens = malloc(sizeof(llama_token) * cap);
  for (const char *p = tokens_arg; *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) oracle_die("TOKENS must be comma-separated integers", tokens_arg);
    if (n == cap) tokens = realloc(tokens, sizeof(llama_token) * (cap *= 2));
    tokens[n++] = (llama_token)v;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') oracle_die("TOKENS must be comma-separated integers", tokens_arg);
  }
  if (n == 0) oracle_die("no tokens given", NULL);

  struct llama_model *model = oracle_load_model(model_path);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab) oracle_die("token id out of the vocabulary", tokens_arg);

  struct llama_context *ctx = oracle_context(model, n < 64 ? 64 : n, n, 1, n_threads);
  if (lora_path) {
    struct llama_adapter_lora *ad = llama_adapter_lora_init(model, lora_path);
    if (!ad) oracle_die("llama.cpp could not load the LoRA adapter", "rerun with ORACLE_VERBOSE=1");
    if (llama_set_adapters_lora(ctx, &ad, 1, &lora_scale) != 0) oracle_die("llama_set_adapters_lora failed", NULL);
  }

  struct llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n;
  if (llama_decode(ctx, batch) != 0) oracle_die("llama_decode failed", NULL);

  FILE *f = fopen(out_path, "wb");
  if (!f) oracle_die("cannot open the output file", out_path);
  for (int i = 0; i < n; ++i) {
    const float *row = llama_get_logits_ith(ctx, i);
    if (!row || fwrite(row, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab)
      oracle_die("cannot get or write the logits", out_path);
  }
  if (fclose(f) != 0) oracle_die("cannot write the output file", out_path);
  printf("%d %d\n", n, n_vocab);

  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  free(tokens);
  return 0;
}
