#!/usr/bin/env python3
"""TRL's tool-calling loop as an oracle for grpo::run_tool_loop (tests/grpo/trl_tool_oracle_test.cpp).

  tool_loop.py model DIR qwen3   writes a model folder for both sides: the shared test data's Qwen3
                             tokenizer, TRL's own Qwen3 chat template in tokenizer_config.json
                             (trl/chat_templates/qwen3.jinja, which add_response_schema knows how to
                             parse) and TRL's prefix-preserving training version of it as
                             chat_template.jinja (qwen3_training.jinja: what GRPOTrainer renders with
                             when there are tools, and what a model folder's .jinja gives both sides)
  tool_loop.py model DIR llama3  the same with the Llama 3 tokenizer and TRL's Llama 3.1 template
                             (llama3_1.jinja, prefix-preserving: GRPOTrainer keeps it), <|eot_id|>
                             as the end of sequence (as Llama 3.1 Instruct's)
  tool_loop.py < cases.json  runs each case, prints a list of results (one Python start)
  tool_loop.py time N < cases.json  times each case's first-turn parse and loop N times, prints
                             the medians (bench/tool_loop_compare.sh)
  tool_loop.py tools         the same tools as a bucketrl tool command (task.tool_command): JSON lines
                             {"name", "arguments", ...} in, one JSON result per line out, a raised
                             exception as {"error": str(e)} (as TRL reports it)

A case:
  model_dir, chat_template_kwargs, max_completion_length, max_tool_calling_iterations (null: none),
  max_position_embeddings,
  prompts [B]         conversational prompts (lists of messages), one per completion
  prompt_ids [B]      their token ids (the caller's rendering; the loop takes them as they are)
  completion_ids [B]  the first turn's tokens, logprobs [B] their log-probs
  continuations {row: [[ids], ...]}  what the model generates after round r's tool results for
                      that row (the stand-in's _generate_single_turn finds the row by its prefix)
A result: completion_ids, tool_mask, logprobs, completions (the messages), tool_call_count,
tool_failure_count: what GRPOTrainer._tool_call_loop returns.

What is TRL's code and what is stubbed: GRPOTrainer._tool_call_loop and _get_tool_suffix_ids run
bound to a stand-in `self` holding what they read (the tokenizer with add_response_schema's
response template, the tools, the limits, a text-only model config). The first turns are parsed
by trl.chat_template_utils.parse_response, as GRPOTrainer._generate does. Stubbed: generation
(_generate_single_turn returns the case's continuations). The tools are Python functions:
  add(a, b) -> a + b;  fail(a) raises ValueError("bad input");  echo(x) -> x
(the C++ test's tool command implements the same three).
"""
import json
import os
import shutil
import statistics
import sys
import time
from types import SimpleNamespace



def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def fail(a: int) -> int:
    """Always fails.

    Args:
        a: anything
    """
    raise ValueError("bad input")


def echo(x: dict) -> dict:
    """Returns its argument.

    Args:
        x: an object
    """
    return x


TOOLS = {"add": add, "fail": fail, "echo": echo}


def make_model(out_dir, family):
    import trl
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "testdata",
                       "tokenizers")
    src = os.path.join(os.environ.get("BRL_TOKENIZERS", src), family)
    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(os.path.join(src, "tokenizer.json"), out_dir)
    with open(os.path.join(src, "tokenizer_config.json")) as f:
        config = json.load(f)
    templates = os.path.join(os.path.dirname(trl.__file__), "chat_templates")
    stock = {"qwen3": "qwen3.jinja", "llama3": "llama3_1.jinja"}[family]
    with open(os.path.join(templates, stock)) as f:
        config["chat_template"] = f.read()
    if family == "llama3":
        config["eos_token"] = "<|eot_id|>"  # as Llama 3.1 Instruct's: a turn ends the completion
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    if family == "qwen3":
        shutil.copy(os.path.join(templates, "qwen3_training.jinja"), os.path.join(out_dir, "chat_template.jinja"))


def stock_template(model_dir):
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        return json.load(f)["chat_template"]


def run(case, repeats=0):
    from transformers import AutoTokenizer
    from trl import GRPOTrainer
    from trl.chat_template_utils import (add_response_schema, get_training_chat_template,
                                         is_chat_template_prefix_preserving, parse_response)
    # As GRPOTrainer.__init__ with tools: the response template from the stock template, then a
    # prefix-preserving training template in its place.
    tokenizer = AutoTokenizer.from_pretrained(case["model_dir"])
    tokenizer.chat_template = stock_template(case["model_dir"])
    tokenizer = add_response_schema(tokenizer)
    chat_template = None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
    prompt_ids = case["prompt_ids"]
    completion_ids = [list(c) for c in case["completion_ids"]]
    firsts = [p + c for p, c in zip(prompt_ids, completion_ids)]
    rounds = {}

    def generate_single_turn(prefixes, images, multimodal_fields, num_generations, has_tool_images=False):
        out, lps = [], []
        for prefix in prefixes:
            row = next(i for i, f in enumerate(firsts) if prefix[: len(f)] == f)
            r = rounds.get(row, 0)
            rounds[row] = r + 1
            ids = case["continuations"][str(row)][r]
            out.append(list(ids))
            lps.append([-0.01 * (k + 1) for k in range(len(ids))])
        return out, lps

    trainer = SimpleNamespace(
        processing_class=tokenizer,
        _tokenizer=tokenizer,
        _is_vlm=False,
        chat_template=chat_template,
        chat_template_kwargs=case.get("chat_template_kwargs") or {},
        tools=list(TOOLS.values()),
        environment_factories=None,
        _sync_tool_dicts=[dict(TOOLS) for _ in completion_ids],
        _async_tool_dicts=[{} for _ in completion_ids],
        use_vllm=False,
        model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=case["max_position_embeddings"])),
        max_completion_length=case["max_completion_length"],
        max_tool_calling_iterations=case["max_tool_calling_iterations"]
        if case["max_tool_calling_iterations"] is not None
        else sys.maxsize,
        _generate_single_turn=generate_single_turn,
    )
    trainer._get_tool_suffix_ids = GRPOTrainer._get_tool_suffix_ids.__get__(trainer)

    def once(completion_ids):
        completions = [[parse_response(tokenizer, ids, prefix=p, tools=trainer.tools)]
                       for p, ids in zip(prompt_ids, completion_ids)]
        prompts = [list(p) for p in case["prompts"]]
        logprobs = [list(l) for l in case["logprobs"]]
        return GRPOTrainer._tool_call_loop(trainer, prompts, prompt_ids, completion_ids, completions, logprobs, None, {})

    if repeats:  # bench/tool_loop_compare.sh: the first turns' parse and the loop, timed
        times = []
        for _ in range(repeats):
            rounds.clear()
            ids = [list(c) for c in case["completion_ids"]]
            t0 = time.perf_counter()
            once(ids)
            times.append(time.perf_counter() - t0)
        return {"whole_ms": 1e3 * statistics.median(times)}
    tool_mask, completions, completion_ids, logprobs, calls, failures, _ = once(completion_ids)
    return {"completion_ids": completion_ids, "tool_mask": tool_mask, "logprobs": logprobs,
            "completions": completions, "tool_call_count": calls, "tool_failure_count": failures}


def serve_tools():  # no transformers or TRL imported: it starts once per round of calls
    for line in sys.stdin:
        call = json.loads(line)
        try:
            result = TOOLS[call["name"]](**call["arguments"])
        except Exception as e:  # noqa: BLE001 -- every failure goes back to the model, as in TRL
            result = {"error": str(e)}
        print(json.dumps(result))


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "tools":
        serve_tools()
        return
    if len(sys.argv) == 4 and sys.argv[1] == "model":
        make_model(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "time":
        print(json.dumps([run(case, int(sys.argv[2])) for case in json.load(sys.stdin)]))
        return
    print(json.dumps([run(case) for case in json.load(sys.stdin)]))


if __name__ == "__main__":
    main()
