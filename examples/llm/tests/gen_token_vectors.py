#!/usr/bin/env python3
"""Writes tests/data/token_vectors.json: token ids of test strings (and of the
perplexity text) as llama.cpp's own tokenizer produces them from the GGUF,
the reference the engine's tokenizer (the `tokenizers` crate with the GGUF's
vocabulary and merges) is checked against in tests/engine.rs.

Needs llama-cpp-python (pip install llama-cpp-python; it builds llama.cpp).
Run from examples/llm:  python3 tests/gen_token_vectors.py MODEL.gguf
"""
import json
import os
import sys

from llama_cpp import Llama

STRINGS = [
    "The capital of France is",
    "Hello world! 12345 numbers, 3.14159 and 1,000,000",
    "tabs\tand\nnewlines\n\n  double  spaces",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "\u00e9migr\u00e9 caf\u00e9 na\u00efve \u6771\u4eac \U0001f642 \u03a9mega",
    "def f(x):\n    return x**2  # comment",
    "It's, they're, we've, I'd, you'll",
    "ALL CAPS and MiXeD CaSe words",
]


def main():
    model = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    llm = Llama(model_path=model, vocab_only=True, verbose=False)

    def ids(text):
        # Special tokens written in the text are matched whole, as the
        # engine does; no BOS (the model's add_bos_token is false).
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    with open(os.path.join(here, "..", "data", "alice-ch1-2.txt"), encoding="utf-8") as f:
        alice = f.read()
    out = {
        "generator": "llama-cpp-python %s (llama.cpp's tokenizer), vocab_only" % __import__("llama_cpp").__version__,
        "model": os.path.basename(model),
        "vectors": [{"text": s, "ids": ids(s)} for s in STRINGS],
        "file": {"path": "data/alice-ch1-2.txt", "ids": ids(alice)},
    }
    with open(os.path.join(here, "data", "token_vectors.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True)
        f.write("\n")


if __name__ == "__main__":
    main()
