#!/usr/bin/env python3
"""TRL's GRPOTrainer + PEFT LoRA on a bucketrl task: the baseline of bench/trl_compare.sh.

Trains on the prompts `bucketrl dataset` printed (JSONL: prompt, answer), rewards a completion 1
when the first integer it states equals the answer (tasks::ExactAnswerReward, the same rule),
and writes metrics.jsonl in the shape `bucketrl train` writes: per step {"step", "reward",
"reward_std", "samples", "time_s"}, per evaluation {"step", "eval_accuracy", "time_s"} (greedy
held-out accuracy, the answers as `bucketrl eval` scores them). time_s counts from the first
step's start, model loading excluded, as ours does.

Usage: .venv/bin/python bench/trl_grpo.py --config run.json --train train.jsonl --eval eval.jsonl
         --out DIR [--seed S] [--max-steps N] [--eval-steps K] [--threads T]
run.json is bucketrl's run config as `bucketrl demo --print-config` prints it (model.path set): its
[grpo] and [lora] knobs carry GRPOConfig's and LoraConfig's names and are passed on as they are.
"""
import argparse
import json
import os
import re
import sys
import time
import warnings

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

warnings.filterwarnings("ignore")
LEADING_INT = re.compile(r"^[ \t\n]*(-?[0-9]{1,18})(?![0-9])")


def leading_int(text):
    m = LEADING_INT.match(text)
    return int(m.group(1)) if m else None


def correct(completion, answer):
    got, want = leading_int(completion), leading_int(str(answer))
    return 1.0 if got is not None and got == want else 0.0


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument("--eval-steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    run = json.load(open(a.config))
    g, lc = run["grpo"], run["lora"]
    if lc["target_modules"] != ["all-linear"]:
        sys.exit("trl_grpo.py: this comparison passes only all-linear LoRA")
    a.model = run["model"]["path"]
    a.max_completion_length = g["max_completion_length"]
    a.eval_max_examples = run["train"]["eval_max_examples"]
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    train = Dataset.from_list([{"prompt": e["prompt"], "answer": str(e["answer"])} for e in read_jsonl(a.train)])
    held_out = read_jsonl(a.eval)[: a.eval_max_examples]

    def exact_answer(completions, answer, **_):
        return [correct(c, x) for c, x in zip(completions, answer)]

    metrics = open(os.path.join(a.out, "metrics.jsonl"), "w")
    clock = {"t0": None}

    def elapsed():
        return time.perf_counter() - clock["t0"] if clock["t0"] is not None else 0.0

    def emit(obj):
        metrics.write(json.dumps(obj) + "\n")
        metrics.flush()

    @torch.no_grad()
    def evaluate(m):
        # Greedy answers to every held-out prompt, left-padded in batches of 64 (as bucketrl).
        was_training = m.training
        m.eval()
        tok.padding_side = "left"
        right = 0.0
        for b in range(0, len(held_out), 64):
            batch = held_out[b : b + 64]
            enc = tok([e["prompt"] for e in batch], return_tensors="pt", padding=True, add_special_tokens=False)
            out = m.generate(**enc, max_new_tokens=a.max_completion_length, do_sample=False,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
            texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            right += sum(correct(t, e["answer"]) for t, e in zip(texts, batch))
        if was_training:
            m.train()
        return right / max(1, len(held_out))

    def sampled(args):
        # Completions sampled in a step that logs a reward (TRL logs rewards only where it sampled):
        # one generation batch, or several when steps_per_generation < gradient_accumulation_steps.
        return args.generation_batch_size * max(1, args.gradient_accumulation_steps // args.steps_per_generation)

    class Curves(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            emit({"step": 0, "eval_accuracy": evaluate(model), "time_s": 0.0})
            clock["t0"] = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                emit({"step": state.global_step, "reward": logs["reward"], "reward_std": logs.get("reward_std", 0.0),
                      "samples": sampled(args), "time_s": elapsed()})

        def on_step_end(self, args, state, control, model=None, **kw):
            if state.global_step % a.eval_steps == 0 or state.global_step == a.max_steps:
                t = time.perf_counter()
                acc = evaluate(model)
                clock["t0"] += time.perf_counter() - t  # held-out evaluation is not training time
                emit({"step": state.global_step, "eval_accuracy": acc, "time_s": elapsed()})

    cfg = GRPOConfig(
        output_dir=a.out, seed=a.seed, data_seed=a.seed, max_steps=a.max_steps, logging_steps=1,
        use_cpu=True, bf16=False, report_to="none", save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0,
        **{k: g[k] for k in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations", "max_completion_length",
                             "learning_rate", "lr_scheduler_type", "weight_decay", "adam_beta1",
                             "adam_beta2", "adam_epsilon", "max_grad_norm", "beta", "epsilon", "num_iterations",
                             "loss_type", "scale_rewards", "temperature", "top_p", "mask_truncated_completions",
                             "importance_sampling_level", "use_bias_correction_kl", "delta",
                             "off_policy_mask_threshold", "top_entropy_quantile")},
        # Keys newer than some resolved configs: TRL's defaults where absent.
        **{k: g[k] for k in ("repetition_penalty", "entropy_coef", "use_adaptive_entropy", "entropy_coef_min",
                             "entropy_coef_max", "entropy_coef_delta", "entropy_target") if k in g},
        # transformers 5 folded warmup_ratio into warmup_steps (a float below 1 is a ratio).
        warmup_steps=g["warmup_ratio"], top_k=g["top_k"] or None, epsilon_high=g.get("epsilon_high"),
        min_p=g.get("min_p") or None, steps_per_generation=g.get("steps_per_generation"),
        generation_batch_size=g.get("generation_batch_size"), generation_kwargs=g.get("generation_kwargs") or None)
    lora = LoraConfig(r=lc["r"], lora_alpha=lc["lora_alpha"], lora_dropout=lc["lora_dropout"], use_rslora=lc["use_rslora"],
                      target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=exact_answer, args=cfg, train_dataset=train,
                          processing_class=tok, peft_config=lora, callbacks=[Curves()])
    trainer.train()
    print(f"trl: {a.max_steps} steps in {elapsed():.1f} s of training", file=sys.stderr)


if __name__ == "__main__":
    main()
