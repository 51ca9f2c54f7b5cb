#!/usr/bin/env python3
"""TRL's per-token log-probabilities of completions as an oracle for grpo::completion_logprobs
(tests/grpo/trl_logps_oracle_test.cpp).

Reads one JSON object on stdin:
  model_dir        a Hugging Face checkpoint folder (float32)
  input_ids        [B][Lp + Lc] prompts left-padded, completions right-padded
  attention_mask   [B][Lp + Lc] 0/1
  logits_to_keep   Lc, the completion length
  temperatures     [T, ...]  one result per temperature
and prints {"logps": [[B][Lc] per temperature], "entropies": [[B][Lc] per temperature]} (the
entropy of each position's tempered distribution, as TRL computes it for top_entropy_quantile).
Usage: .venv/bin/python tools/trl/token_logps.py < request.json   (installed by scripts/setup.sh --test)

TRL's code, run as GRPOTrainer runs it: trl.trainer.utils.add_fused_lm_head(model, temperature=T,
outputs=("log_probs", "entropy"))
(GRPOTrainer.__init__ patches the policy and the reference model with its GRPOConfig.temperature)
and GRPOTrainer._get_per_token_logps_and_entropies, which divides the logits by the temperature
and takes the log-softmax over the whole vocabulary, without top-k or top-p. Stubbed: `self` is a
stand-in with only what that method reads (an Accelerator on the CPU, for its autocast).
The model is loaded afresh for each temperature: add_fused_lm_head patches it in place.
"""
import json
import sys
import warnings
from types import SimpleNamespace

try:
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    from trl import GRPOTrainer
    from trl.trainer.utils import add_fused_lm_head
except ImportError as e:
    sys.exit(f"{e}: TRL's oracle needs trl, transformers and torch in .venv: run scripts/setup.sh --test")

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
warnings.filterwarnings("ignore", category=FutureWarning)


def main():
    req = json.load(sys.stdin)
    ids = torch.tensor(req["input_ids"], dtype=torch.long)
    mask = torch.tensor(req["attention_mask"], dtype=torch.long)
    stand_in = SimpleNamespace(accelerator=Accelerator(cpu=True))
    out, ents = [], []
    for t in req["temperatures"]:
        model = AutoModelForCausalLM.from_pretrained(req["model_dir"], dtype=torch.float32).eval()
        add_fused_lm_head(model, temperature=t, outputs=("log_probs", "entropy"))  # as GRPOTrainer patches the policy
        with torch.no_grad():
            logps, entropies, _ = GRPOTrainer._get_per_token_logps_and_entropies(
                stand_in, model, ids, mask, req["logits_to_keep"], compute_entropy=True)
        out.append(logps.to(torch.float64).tolist())
        ents.append(entropies.to(torch.float64).tolist())
    json.dump({"logps": out, "entropies": ents}, sys.stdout)


if __name__ == "__main__":
    main()
