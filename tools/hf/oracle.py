#!/usr/bin/env python3
"""Hugging Face's own libraries (transformers, PEFT, tokenizers) as the oracle for our model,
adapter and tokenizer code (tests/model/hf_oracle_test.cpp, tests/lora/peft_oracle_test.cpp,
tests/grpo/pretrain_hf_oracle_test.cpp). Offline: nothing is downloaded.

  oracle.py logits MODEL_DIR TOKENS OUT.f32 [--adapter PEFT_DIR]
      AutoModelForCausalLM (float32, eager attention), optionally wrapped by
      peft.PeftModel.from_pretrained; TOKENS = comma-separated ids, run as one sequence;
      writes the logits [T, V] as raw little-endian float32.
  oracle.py peft-lora BASE_DIR OUT_DIR [--seed S] [--r R] [--alpha A] [--rslora] [--targets q_proj,...]
      A LoRA adapter made by PEFT itself (LoraConfig + get_peft_model + save_pretrained); A and B
      then set to seeded random values (PEFT's B = 0 would leave the logits unchanged).
  oracle.py resave MODEL_DIR OUT_DIR
      The checkpoint as transformers itself saves it (save_pretrained: its own config.json form,
      e.g. transformers 5's rope_parameters and dtype).
  oracle.py tokenize TOKENIZER_DIR TEXT...
      AutoTokenizer ids without special tokens: one JSON list per text, one per line (put "--"
      before texts that may start with "-").
  oracle.py warp SPEC.json OUT.json
      transformers' own sampling chain (GenerationMixin._get_logits_processor with do_sample: the
      repetition penalty over each row's unpadded input ids, then temperature, top-k, top-p,
      min-p, in its order) applied to given logits. SPEC: {"logits": [R][V], "input_ids": [R][L]
      left-padded, "attention_mask": [R][L], "temperature", "top_k", "top_p", "min_p" (null:
      off), "repetition_penalty"}. Writes {"probs": [R][V]}: the softmax of the processed scores.
  oracle.py generate MODEL_DIR TOKENS OUT.json [--max-new-tokens N] [--repetition-penalty P]
      model.generate greedy (do_sample=False) from TOKENS; writes the new token ids as JSON.
  oracle.py batch < FILE
      Each line a JSON list of the arguments of one command above, run in order in one process
      (importing transformers costs seconds; a test sends all its requests at once).

Run with the project's .venv python (scripts/setup.sh --test installs it).
"""
import argparse
import json
import os
import sys
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"  # before the imports: they read it once
os.environ["TRANSFORMERS_OFFLINE"] = "1"

try:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
except ImportError as e:
    sys.exit(f"{e}: the oracle needs torch, transformers and peft in .venv: run scripts/setup.sh --test")

# Progress bars and deprecation notices of the libraries' own internals: noise in test logs.
hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
warnings.filterwarnings("ignore", category=FutureWarning)


def load_model(model_dir):
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    return m.eval()


def cmd_logits(a):
    model = load_model(a.model_dir)
    if a.adapter:
        model = PeftModel.from_pretrained(model, a.adapter).eval()
    ids = torch.tensor([[int(t) for t in a.tokens.split(",")]], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]  # [T, V]
    logits.to(torch.float32).numpy().astype("<f4").tofile(a.out)


def cmd_peft_lora(a):
    base = load_model(a.base_dir)
    cfg = LoraConfig(r=a.r, lora_alpha=a.alpha, use_rslora=a.rslora, target_modules=a.targets.split(","),
                     lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(base, cfg)
    gen = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):  # sorted: the draws do not depend on module order
            if ".lora_A." in name:  # [r, in]
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
            elif ".lora_B." in name:  # [out, r]
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(a.out_dir)


def cmd_resave(a):
    load_model(a.model_dir).save_pretrained(a.out_dir)


def cmd_tokenize(a):
    tok = AutoTokenizer.from_pretrained(a.tokenizer_dir)
    for text in a.texts:
        print(json.dumps(tok.encode(text, add_special_tokens=False)), flush=True)


class _DecoderOnly:
    """What _get_logits_processor reads of a model: a decoder-only config."""

    config = argparse.Namespace(is_encoder_decoder=False)

    @staticmethod
    def _merge_criteria_processor_list(default_list, custom_list):
        return default_list


def cmd_warp(a):
    from transformers import GenerationConfig
    from transformers.generation.utils import GenerationMixin

    with open(a.spec) as f:
        spec = json.load(f)
    ids = torch.tensor(spec["input_ids"], dtype=torch.long)
    mask = torch.tensor(spec["attention_mask"], dtype=torch.long)
    cfg = GenerationConfig(do_sample=True, temperature=spec["temperature"], top_k=spec["top_k"], top_p=spec["top_p"],
                           min_p=spec["min_p"], repetition_penalty=spec["repetition_penalty"])
    procs = GenerationMixin._get_logits_processor(_DecoderOnly(), cfg, input_ids_seq_length=ids.shape[1],
                                                  device="cpu", model_kwargs={"attention_mask": mask})
    scores = procs(ids, torch.tensor(spec["logits"], dtype=torch.float32))
    with open(a.out, "w") as f:
        json.dump({"probs": torch.softmax(scores, -1).tolist()}, f)


def cmd_generate(a):
    model = load_model(a.model_dir)
    ids = torch.tensor([[int(t) for t in a.tokens.split(",")]], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=a.max_new_tokens, repetition_penalty=a.repetition_penalty,
                             pad_token_id=model.generation_config.eos_token_id)
    with open(a.out, "w") as f:
        json.dump(out[0, ids.shape[1]:].tolist(), f)


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("model_dir")
    lg.add_argument("tokens")
    lg.add_argument("out")
    lg.add_argument("--adapter")
    lg.set_defaults(run=cmd_logits)
    pl = sub.add_parser("peft-lora")
    pl.add_argument("base_dir")
    pl.add_argument("out_dir")
    pl.add_argument("--seed", type=int, default=2)
    pl.add_argument("--r", type=int, default=4)
    pl.add_argument("--alpha", type=float, default=8.0)
    pl.add_argument("--rslora", action="store_true")
    pl.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    pl.set_defaults(run=cmd_peft_lora)
    rs = sub.add_parser("resave")
    rs.add_argument("model_dir")
    rs.add_argument("out_dir")
    rs.set_defaults(run=cmd_resave)
    tk = sub.add_parser("tokenize")
    tk.add_argument("tokenizer_dir")
    tk.add_argument("texts", nargs="*")
    tk.set_defaults(run=cmd_tokenize)
    wp = sub.add_parser("warp")
    wp.add_argument("spec")
    wp.add_argument("out")
    wp.set_defaults(run=cmd_warp)
    gn = sub.add_parser("generate")
    gn.add_argument("model_dir")
    gn.add_argument("tokens")
    gn.add_argument("out")
    gn.add_argument("--max-new-tokens", type=int, default=16)
    gn.add_argument("--repetition-penalty", type=float, default=1.0)
    gn.set_defaults(run=cmd_generate)
    sub.add_parser("batch").set_defaults(run=None)
    return ap


def main():
    ap = parser()
    a = ap.parse_args()
    if a.run is not None:
        a.run(a)
        return
    for line in sys.stdin:
        if line.strip():
            req = ap.parse_args(json.loads(line))
            if req.run is None:
                sys.exit("batch: a batch line cannot be another batch")
            req.run(req)


if __name__ == "__main__":
    main()
