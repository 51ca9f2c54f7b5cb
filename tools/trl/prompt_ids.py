#!/usr/bin/env python3
"""TRL's prompt token ids as an oracle for grpo::prompt_ids (tests/grpo/trl_prompt_oracle_test.cpp).

Reads a JSON list of batches on stdin, each
  model_dir             a folder with tokenizer.json / tokenizer_config.json (its chat template)
  prompts               one batch: all text, or all conversational (lists of messages)
  chat_template_kwargs  GRPOConfig.chat_template_kwargs (an object)
  tools                 GRPOTrainer's tools, as JSON schemas (optional)
and prints a list of {"ids": [[...], ...]}, one per batch (one process: TRL imports slowly).
TRL's code, run as GRPOTrainer runs it: GRPOTrainer._tokenize_prompts, with `self` a stand-in
holding only what that method reads for a text-only model without tools or environments.
Usage: .venv/bin/python tools/trl/prompt_ids.py < request.json   (installed by scripts/setup.sh --test)
"""
import json
import sys
from types import SimpleNamespace

from transformers import AutoTokenizer
from trl import GRPOTrainer


def tokenize(q):
    trainer = SimpleNamespace(
        processing_class=AutoTokenizer.from_pretrained(q["model_dir"]),
        _is_vlm=False,
        environment_factories=None,
        tools=q.get("tools"),
        chat_template=None,
        chat_template_kwargs=q.get("chat_template_kwargs") or {},
    )
    ids, _, _ = GRPOTrainer._tokenize_prompts(trainer, q["prompts"])
    return {"ids": [list(map(int, x)) for x in ids]}


def main():
    print(json.dumps([tokenize(q) for q in json.load(sys.stdin)]))


if __name__ == "__main__":
    main()
