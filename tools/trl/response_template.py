#!/usr/bin/env python3
"""transformers' response-template parser with TRL's templates, as an oracle for
tasks::ResponseTemplate (tests/tasks/response_template_oracle_test.cpp).

  response_template.py < cases.json > answers.json

cases.json: {"templates": [NAME, ...], "cases": [{"template": NAME, "prefix": str, "text": str,
"tools": [schema, ...] or null}, ...]}. NAME is one of TRL's response templates
(trl.chat_template_utils.NAME_template: qwen3, llama3, qwen3_5, glm4moe, gptoss, lfm2_2_5,
nemotron_3, gemma4, deepseek_r1_distill). answers.json: {"templates": {NAME: the template as JSON},
"results": [the parsed message, or {"error": "ValueError"} where the parser raises it (TRL then
falls back to the plain text), {"error": "<other type>"} for another exception]}.

The parse is transformers.utils.chat_parsing.parse_response(text, template, prefix=prefix,
tools=tools): what tokenizer.parse_response runs on text (TRL passes token ids; the test of the
token-id decoding is tests/grpo/trl_tool_oracle_test.cpp).
"""
import json
import sys

import trl.chat_template_utils as ctu
from transformers.utils.chat_parsing import parse_response


def main():
    spec = json.load(sys.stdin)
    templates = {name: getattr(ctu, name + "_template") for name in spec["templates"]}
    results = []
    for case in spec["cases"]:
        try:
            results.append(
                parse_response(
                    case["text"], templates[case["template"]], prefix=case["prefix"], tools=case.get("tools")
                )
            )
        except ValueError:
            results.append({"error": "ValueError"})
        except Exception as e:  # noqa: BLE001 - the type is the answer
            results.append({"error": type(e).__name__})
    json.dump({"templates": templates, "results": results}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
