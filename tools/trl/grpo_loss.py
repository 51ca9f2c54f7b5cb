#!/usr/bin/env python3
"""TRL's own GRPO objective as an oracle for src/grpo/loss.{h,cpp} (tests/grpo/trl_oracle_test.cpp).

Reads one JSON object on stdin: a case, or {"cases": [case, ...]} (one Python start for many), and
prints {"results": [...]} (one result per case, same order).
Usage: .venv/bin/python tools/trl/grpo_loss.py < cases.json   (installed by scripts/setup.sh --test)

A case (B completions of T tokens; lists of floats):
  completion_mask [B][T]  0/1, right-padded (ones, then zeros), as TRL pads completions
  truncated [B]  completions that hit the length limit (no EOS); with mask_truncated_completions
                 TRL zeroes their mask rows (the result's completion_mask)
  rewards [B] + num_generations G      -> advantages (and num_items_in_batch) by TRL's generation step;
    rewards [B][K] for K reward functions, with reward_weights [K] (absent: 1 each) and
    multi_objective_aggregation
    or advantages [B] + num_items_in_batch  given directly
  logps, old_logps [B][T], ref_logps [B][T] (when beta != 0)   -> loss and d loss / d logps
  loss_type, beta, epsilon, epsilon_high, max_completion_length, scale_rewards,
  use_bias_correction_kl, gradient_accumulation_steps, steps_per_generation, micro_batch (which
  split of the generation batch the loss is computed on), num_iterations, importance_sampling_level,
  delta, sapo_temperature_pos, sapo_temperature_neg, off_policy_mask_threshold, vespo_k_pos,
  vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg, top_entropy_quantile: GRPOConfig's names;
  absent = GRPOConfig's default.
  sampling_logps [B][T]  the sampler's log-probs (float32 values, as vLLM returns them): the stand-in is
                    a trainer with use_vllm, and vllm_importance_sampling_correction, _mode, _clip_max
                    (null: None), _clip_min apply (TRL's generation step computes the importance
                    sampling ratio from old_logps and these)
  entropies [B][T]  the policy's per-token entropies the loss sees (for top_entropy_quantile and
                    the entropy bonus, entropy_coef: then a leaf with a gradient); absent = zeros
  entropy_steps [S][B][T]  adaptive entropy control (use_adaptive_entropy, entropy_coef_min,
                    entropy_coef_max, entropy_coef_delta, entropy_target): S optimizer steps over the
                    whole generation batch, each its steps_per_generation micro-batches in order
                    (gradient_accumulation_steps = steps_per_generation) with these entropies; the
                    accelerator syncs gradients on each step's last micro-batch, as TRL's loop does
A result: advantages [B] (rewards given), num_items_in_batch, completion_mask [B][T] as TRL built it,
rows [start, end) of the micro-batch, loss, grad [B][T] (zero outside the micro-batch), entropy_grad
[B][T] (d loss / d entropies; zeros without the bonus), and the
metrics TRL logged for that loss ("clip_ratio/region_mean", "kl", ...).
With entropy_steps, instead: steps [S], each {losses [micro-batches], entropy_grad [B][T] (summed
over the step's micro-batches), entropy_coef and last_world_entropy after the step (TRL's
controller state; "inf" as the string "inf")}.

What is TRL's code and what is stubbed:
  - trl.GRPOConfig builds the settings (TRL's own defaults and validation; epsilon_high None ->
    epsilon); the stand-in trainer copies them the way GRPOTrainer.__init__ does (epsilon_low =
    args.epsilon, ...). accelerate.Accelerator(cpu=True) is the real accelerator (one process).
  - GRPOTrainer._generate_and_score_completions (rewards given): builds prompt/completion tensors
    and completion_mask (trl pad), num_items_in_batch, old/ref per-token log-probs, and the
    advantages (group mean, nanstd over the group or the batch, +1e-4). Stubbed, inputs only:
    _generate returns the token lists (prompt = [row index]; completion = as many tokens as the
    mask row has ones, ending in EOS unless truncated); _calculate_rewards returns the given rewards as float64 [B, K] (TRL's reward functions give
    float32; float64 here so the comparison measures the formulas, not float32 rounding).
  - trl.trainer.utils.split_tensor_dict splits the generation batch into steps_per_generation
    micro-batches, as GRPOTrainer._prepare_inputs does (its shuffle_sequence_dict, a random row
    permutation, is skipped so the micro-batch rows are known).
  - GRPOTrainer._compute_loss computes the loss (train mode), then loss.backward(). Stubbed,
    input only: _get_per_token_logps_and_entropies returns the given log-probs instead of running
    a model: rows of `logps` (a float64 leaf that requires grad) in the loss, `old_logps` for the
    policy and `ref_logps` for ref_model during generation; rows of `entropies` (or zeros).
    get_high_entropy_mask is TRL's own method, bound to the stand-in (its accelerator gathers).
  num_iterations defaults to 2 here when old_logps are given, so that TRL's generation step asks for
  old_per_token_logps (it skips them when the step is on-policy and then uses logps.detach(): ratio 1).
"""
import functools
import json
import sys
import warnings
from collections import defaultdict, deque
from types import SimpleNamespace

try:
    import torch
    from accelerate import Accelerator
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import split_tensor_dict
except ImportError as e:
    sys.exit(f"{e}: TRL's oracle needs trl, accelerate and torch in .venv: run scripts/setup.sh --test")

# TrainingArguments warns that its own default for a renamed field is deprecated; noise in test logs.
warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)

_SETTINGS = ("loss_type", "beta", "epsilon", "epsilon_high", "max_completion_length", "scale_rewards",
             "use_bias_correction_kl", "num_generations", "gradient_accumulation_steps",
             "steps_per_generation", "num_iterations", "mask_truncated_completions",
             "importance_sampling_level", "delta", "sapo_temperature_pos", "sapo_temperature_neg",
             "off_policy_mask_threshold", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg",
             "top_entropy_quantile", "multi_objective_aggregation", "entropy_coef", "use_adaptive_entropy",
             "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target",
             "vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
             "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min")
_EOS, _PAD = 2, 0  # token ids of the stand-in tokenizer; every other completion token is 1


def _tensor(x):
    return torch.tensor(x, dtype=torch.float64)


def _make_args(case, batch_size):
    kw = {k: case[k] for k in _SETTINGS if k in case}
    kw.setdefault("num_iterations", 2 if "old_logps" in case else 1)
    kw.setdefault("num_generations", batch_size)  # advantages given: G only has to divide the batch
    spg = kw.get("steps_per_generation", kw.get("gradient_accumulation_steps", 1))
    if batch_size % spg != 0:
        raise SystemExit(f"batch of {batch_size} rows does not split into steps_per_generation ({spg}) micro-batches")
    return GRPOConfig(output_dir="/tmp/brl_trl_oracle", report_to="none", use_cpu=True, logging_steps=1,
                      per_device_train_batch_size=batch_size // spg, **kw)


class _LogpsSource:
    """The per-token log-probs a model would produce, keyed by row (the prompt token is the row index)."""

    def __init__(self, case, policy, ref):
        self.policy, self.ref = policy, ref
        self.old = _tensor(case["old_logps"]) if "old_logps" in case else None
        self.ref_logps = _tensor(case["ref_logps"]) if "ref_logps" in case else None
        self.logps = _tensor(case["logps"]).requires_grad_(True) if "logps" in case else None
        self.entropies = _tensor(case["entropies"]) if "entropies" in case else None
        if self.entropies is not None and case.get("entropy_coef", 0.0) != 0.0:
            self.entropies.requires_grad_(True)  # the bonus differentiates the entropies
        self.phase = "generate"

    def __call__(self, model, input_ids, attention_mask, logits_to_keep, **_):
        rows = input_ids[:, 0]  # prompts are one token, the row index
        if self.phase == "loss":
            src = self.logps
        elif model is self.ref:
            src = self.ref_logps
        else:
            src = self.old
        if src is None:
            raise SystemExit(f"TRL asked for log-probs the case does not give (phase {self.phase})")
        out = src[rows]
        assert out.shape[1] == logits_to_keep
        ent = self.entropies[rows] if self.phase == "loss" and self.entropies is not None else torch.zeros_like(out.detach())
        return out, ent, None


def _stand_in(args, accelerator, source, sampled=False):
    """The attributes of a GRPOTrainer that the two methods read, set as GRPOTrainer.__init__ sets them.
    sampled: completions come with the sampler's log-probs (a trainer with use_vllm)."""
    trainer = SimpleNamespace(
        args=args, accelerator=accelerator, model=source.policy, ref_model=source.ref if args.beta != 0.0 else None,
        loss_type=args.loss_type, beta=args.beta, epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        max_completion_length=args.max_completion_length, num_generations=args.num_generations,
        num_iterations=args.num_iterations, scale_rewards=args.scale_rewards,
        multi_objective_aggregation=args.multi_objective_aggregation,
        importance_sampling_level=args.importance_sampling_level,
        off_policy_mask_threshold=args.off_policy_mask_threshold,
        top_entropy_quantile=args.top_entropy_quantile, mask_truncated_completions=args.mask_truncated_completions,
        use_vllm=sampled, vllm_importance_sampling_correction=args.vllm_importance_sampling_correction,
        vllm_importance_sampling_mode=args.vllm_importance_sampling_mode,
        vllm_importance_sampling_clip_max=args.vllm_importance_sampling_clip_max,
        vllm_importance_sampling_clip_min=args.vllm_importance_sampling_clip_min,
        aux_loss_enabled=False, _entropy_bonus_enabled=args.entropy_coef != 0.0 or args.use_adaptive_entropy,
        entropy_coef=args.entropy_coef, use_adaptive_entropy=args.use_adaptive_entropy,
        _last_world_entropy=float("inf"), _entropy_window_stats=None,  # as GRPOTrainer.__init__ sets them
        current_gradient_accumulation_steps=args.gradient_accumulation_steps,
        reward_weights=torch.ones(1, dtype=torch.float32), reward_func_names=["given"],
        environment_factories=None, environments=None, tools=None, pad_to_multiple_of=args.pad_to_multiple_of,
        _tokenizer=SimpleNamespace(pad_token_id=_PAD), eos_token_ids=[_EOS], log_multimodal=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _logs={"images": deque(), "prompt": deque(), "completion": deque(), "advantages": deque(),
               "rewards": defaultdict(deque), "extra": defaultdict(deque)},
        _pending_extra_logs=defaultdict(list), _pending_metrics=defaultdict(list),
        _get_per_token_logps_and_entropies=source,
        get_off_policy_mask=GRPOTrainer.get_off_policy_mask,  # staticmethods: TRL's own code
        get_gamma_weights=GRPOTrainer.get_gamma_weights,
    )
    trainer.get_high_entropy_mask = functools.partial(GRPOTrainer.get_high_entropy_mask, trainer)
    return trainer


def _generation_batch(case, trainer, mask):
    """TRL's generation step on the given completions and rewards: the training batch it hands on."""
    lengths = [int(n) for n in mask.sum(1).tolist()]
    if any(n == 0 for n in lengths):
        raise SystemExit("rewards path: every completion needs >= 1 token (generation never yields an empty one)")
    B, G = len(lengths), trainer.num_generations
    truncated = case.get("truncated", [False] * B)  # hit the length limit: no EOS at the end
    completions = [[1] * (n - 1) + [1 if cut else _EOS] for n, cut in zip(lengths, truncated, strict=True)]

    sampling = None  # as vLLM returns them: one list per completion, of its own length
    if "sampling_logps" in case:
        sampling = [row[:n] for row, n in zip(case["sampling_logps"], lengths, strict=True)]

    def generate(prompts):
        return ([[i] for i in range(B)], completions, None, [""] * B, sampling, {}, None, None)

    rewards = _tensor(case["rewards"])
    rewards = rewards.unsqueeze(1) if rewards.dim() == 1 else rewards  # [B, K reward functions]
    K = rewards.shape[1]

    def calculate_rewards(inputs, prompts, completions, completion_ids_list):
        return rewards

    # As GRPOTrainer.__init__ keeps them: float32 weights, one name per function.
    trainer.reward_weights = torch.tensor(case.get("reward_weights", [1.0] * K), dtype=torch.float32)
    trainer.reward_func_names = [f"reward_{k}" for k in range(K)]
    trainer.reward_funcs = [None] * K  # only counted (normalize_then_sum)
    trainer._generate = generate
    trainer._calculate_rewards = calculate_rewards
    inputs = [{"prompt": f"prompt {i // G}"} for i in range(B)]
    return GRPOTrainer._generate_and_score_completions(trainer, inputs)


def _given_batch(case, source, mask):
    """The same dict as TRL's generation step outputs, from given advantages and token count."""
    B, T = mask.shape
    batch = {"prompt_ids": torch.arange(B).unsqueeze(1), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
             "completion_ids": mask.clone(), "completion_mask": mask, "advantages": _tensor(case["advantages"]),
             "num_items_in_batch": torch.tensor(case["num_items_in_batch"])}
    if source.old is not None:
        batch["old_per_token_logps"] = source.old
    if source.ref_logps is not None:
        batch["ref_per_token_logps"] = source.ref_logps
    return batch


def run_case(case):
    mask = torch.tensor(case["completion_mask"], dtype=torch.long)
    B = mask.shape[0]
    args = _make_args(case, B)
    accelerator = Accelerator(cpu=True)  # after GRPOConfig, which resets accelerate's shared state
    source = _LogpsSource(case, SimpleNamespace(training=True, is_gradient_checkpointing=False), object())
    trainer = _stand_in(args, accelerator, source, sampled="sampling_logps" in case)
    if "sampling_logps" in case and "rewards" not in case:
        raise SystemExit("sampling_logps: TRL computes the importance sampling ratio in its generation step: give rewards")
    out = {}
    if "rewards" in case:
        batch = _generation_batch(case, trainer, mask)
        out["advantages"] = batch["advantages"].tolist()
        kept = mask * (1 - torch.tensor(case.get("truncated", [False] * B), dtype=torch.long)).unsqueeze(1)
        if not torch.equal(batch["completion_mask"], kept if args.mask_truncated_completions else mask):
            raise SystemExit("TRL built another completion mask: is the given one right-padded?")
    else:
        batch = _given_batch(case, source, mask)
    out["num_items_in_batch"] = float(batch["num_items_in_batch"])
    out["completion_mask"] = batch["completion_mask"].tolist()
    if source.logps is None:
        return out
    spg = args.steps_per_generation
    if "entropy_steps" in case:
        out["steps"] = _controlled_steps(case, trainer, source, split_tensor_dict(batch, spg))
        return out
    k = case.get("micro_batch", 0)
    micro = split_tensor_dict(batch, spg)[k]
    out["rows"] = [k * (B // spg), (k + 1) * (B // spg)]
    source.phase = "loss"
    loss = GRPOTrainer._compute_loss(trainer, source.policy, micro)
    loss.backward()
    out["loss"] = loss.item()
    out["grad"] = source.logps.grad.tolist()
    ent = source.entropies
    out["entropy_grad"] = (ent.grad if ent is not None and ent.grad is not None else torch.zeros_like(mask, dtype=torch.float64)).tolist()
    out["metrics"] = {name: vals[-1] for name, vals in trainer._metrics["train"].items()}
    return out


def _controlled_steps(case, trainer, source, micros):
    """Optimizer steps of the adaptive entropy controller: every micro-batch of each step, in order."""
    source.phase = "loss"
    steps = []
    for entropies in case["entropy_steps"]:
        source.entropies = _tensor(entropies).requires_grad_(True)
        losses = []
        for k, micro in enumerate(micros):
            trainer.accelerator.sync_gradients = k == len(micros) - 1  # the optimizer-step boundary
            loss = GRPOTrainer._compute_loss(trainer, source.policy, micro)
            loss.backward()
            losses.append(loss.item())
        last = trainer._last_world_entropy
        steps.append({"losses": losses, "entropy_grad": source.entropies.grad.tolist(),
                      "entropy_coef": trainer.entropy_coef, "last_world_entropy": "inf" if last == float("inf") else last})
    return steps


def main():
    req = json.load(sys.stdin)
    cases = req["cases"] if "cases" in req else [req]
    json.dump({"results": [run_case(c) for c in cases]}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
