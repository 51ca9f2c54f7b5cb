#!/usr/bin/env python3
"""transformers' own chat-template rendering as an oracle for src/tokenizer/jinja.cpp and
chat_template.cpp. Reads a JSON list of cases, writes a JSON list of answers in the same order.
  {"template": T, "vars": {...}, "now": UNIX}            -> jinja2 exactly as transformers compiles
                                                          chat templates (its env, filters, globals)
  {"model_dir": D, "messages": [...], "add_generation_prompt": bool, "continue_final_message": bool,
   "tools": [...] | null, "kwargs": {...}, "now": UNIX}  -> AutoTokenizer(D).apply_chat_template(
                                                          ..., tokenize=False)
Answers: {"ok": true, "text": "..."} or {"ok": false, "error": "Type: message"}.
strftime_now is pinned to `now` (local time) so that both sides read the same clock.
Usage: .venv/bin/python chat_template.py CASES.json OUT.json   (scripts/setup.sh --test)"""
import datetime
import json
import sys

from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template

_tokenizers = {}


def pin_clock(template, now):
    # The compiled template shares transformers' environment; its strftime_now reads the clock.
    if now is not None:
        template.environment.globals["strftime_now"] = lambda fmt: datetime.datetime.fromtimestamp(now).strftime(fmt)


def answer(case):
    if "template" in case:
        template = _compile_jinja_template(case["template"])
        pin_clock(template, case.get("now"))
        return template.render(**case.get("vars", {}))
    d = case["model_dir"]
    if d not in _tokenizers:
        _tokenizers[d] = AutoTokenizer.from_pretrained(d)
    tok = _tokenizers[d]
    pin_clock(_compile_jinja_template(tok.get_chat_template(None, case.get("tools"))), case.get("now"))
    return tok.apply_chat_template(
        case["messages"],
        tools=case.get("tools"),
        tokenize=False,
        add_generation_prompt=case.get("add_generation_prompt", False),
        continue_final_message=case.get("continue_final_message", False),
        **case.get("kwargs", {}),
    )


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: chat_template.py CASES.json OUT.json")
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        try:
            out.append({"ok": True, "text": answer(case)})
        except Exception as e:  # the C++ side must fail on the same cases
            out.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
