/* Set-up for the llama.cpp benchmark driver (bench.c): quiet logging, loading the CPU backend
 * libraries from the build's lib folder (ggml picks the best one for this CPU), and the context
 * settings our own decoder is compared under: F32 KV cache and no flash attention. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

#ifndef ORACLE_BACKEND_DIR
#error "compile with -DORACLE_BACKEND_DIR=\"<dir with libggml-cpu*.so>\" (bench/llamacpp_setup.sh)"
#endif

static int oracle_verbose = 0;

static void oracle_log(enum ggml_log_level level, const char* text, void* user) {
  (void)user;
  if (oracle_verbose || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static void oracle_die(const char* what, const char* hint) {
  fprintf(stderr, "error: %s\n", what);
  if (hint) fprintf(stderr, "hint: %s\n", hint);
  exit(1);
}

static struct llama_model* oracle_load_model(const char* path) {
  if (getenv("ORACLE_VERBOSE")) oracle_verbose = 1;
  llama_log_set(oracle_log, NULL);
  ggml_backend_load_all_from_path(ORACLE_BACKEND_DIR);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(path, mp);
  if (!model) oracle_die("llama.cpp could not load the model", "rerun with ORACLE_VERBOSE=1 for its log");
  return model;
}

/* kv_type: the KV cache's element type (GGML_TYPE_F32, _F16 or _BF16); bench.c sets it to the
 * weights' type, which is what bucketrl's cache holds (src/model/kv_cache.h). */
static struct llama_context* oracle_context(struct llama_model* model, int n_ctx, int n_batch, int n_seq, int n_threads,
                                            enum ggml_type kv_type) {
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n_ctx;
  cp.n_batch = (uint32_t)n_batch;
  cp.n_ubatch = (uint32_t)n_batch;
  cp.n_seq_max = (uint32_t)n_seq;
  cp.n_threads = n_threads;
  cp.n_threads_batch = n_threads;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = kv_type;
  cp.type_v = kv_type;
  cp.no_perf = 1;
  /* one cache for all sequences, so a group's copies of a prompt share its cells */
  cp.kv_unified = n_seq > 1;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) oracle_die("llama.cpp could not create a context", "rerun with ORACLE_VERBOSE=1 for its log");
  return ctx;
}
