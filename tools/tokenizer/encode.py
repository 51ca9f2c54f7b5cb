#!/usr/bin/env python3
"""HF's own tokenizer (the Rust `tokenizers` library, PyPI binding) as a line-oriented oracle:
reads JSON lines on stdin, writes one JSON line per input line.
  {"text": "...", "add_special": false}  ->  {"ids": [...], "decoded": "...", "decoded_skip": "..."}
  {"ids": [...]}                          ->  {"decoded": "...", "decoded_skip": "..."}
Usage: .venv/bin/python encode.py TOKENIZER_JSON < lines.jsonl   (scripts/setup.sh --test)"""
import json
import sys

from tokenizers import Tokenizer


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: encode.py TOKENIZER_JSON < lines.jsonl")
    tok = Tokenizer.from_file(sys.argv[1])
    out = []
    for line in sys.stdin:
        if not line.strip():
            continue
        q = json.loads(line)
        r = {}
        ids = q.get("ids")
        if "text" in q:
            ids = tok.encode(q["text"], add_special_tokens=bool(q.get("add_special"))).ids
            r["ids"] = ids
        r["decoded"] = tok.decode(ids, skip_special_tokens=False)
        r["decoded_skip"] = tok.decode(ids, skip_special_tokens=True)
        out.append(json.dumps(r, ensure_ascii=False))
    sys.stdout.write("".join(o + "\n" for o in out))


if __name__ == "__main__":
    main()
