"""The llama.cpp side of `localllm bench spec --compare`: run by llama-cpp-python's own interpreter (its own virtual
environment), never imported by localllm. Standard library, numpy and llama_cpp only.

    python llama_cpp_lookup.py '{"model": PATH, "threads": 2, "ctx": 1024, "kv": "f16"}'
        -> {"ready": true, "version": "0.3.36"} on stdout once the model is loaded, then one line per request:
    stdin  {"ids": [...], "max_tokens": 384, "num_pred": 0}
    stdout {"tokens": [...], "elapsed_s": 5.1, "first_s": 1.2, "steps": 97}
        num_pred 0: plain decoding (a Llama without a draft model); k: a Llama whose draft model is
        LlamaPromptLookupDecoding(num_pred_tokens=k) (max_ngram_size 2, its default) and logits_all=True (load()).
        ids: the prompt, already rendered and tokenized by the caller (the same ids both sides decode). Greedy
        (temp 0), ending at an end-of-generation token (not returned) or after max_tokens. Each request starts from an
        empty cache (reset: the whole prompt is evaluated, as the caller's runs do); elapsed_s from the call to
        the last token, first_s to the first; steps: evaluations after the prompt's (each verifies its drafts).
    The process ends at the end of stdin.
"""

import json
import sys
import time

GGML_TYPES = {"f16": 1, "q4_0": 2, "q8_0": 8}


def load(a, draft_model=None):
    """A Llama; with a draft model also logits_all=True, without which llama-cpp-python keeps scores for only n_batch
    positions while its draft verification writes one row per position (a ValueError past n_batch tokens)."""
    from llama_cpp import Llama

    kw = {}
    if a.get("kv", "f16") != "f16":
        kw = {"flash_attn": True, "type_k": GGML_TYPES[a["kv"]], "type_v": GGML_TYPES[a["kv"]]}
    return Llama(
        model_path=a["model"],
        n_ctx=a["ctx"],
        n_threads=a["threads"],
        n_threads_batch=a["threads"],
        draft_model=draft_model,
        logits_all=draft_model is not None,
        verbose=False,
        **kw,
    )


class Counted:
    """llm.eval, counting its calls (one per step: the prompt's, then one per verified token run)."""

    def __init__(self, llm):
        self.calls = 0
        self._eval = llm.eval
        llm.eval = self

    def __call__(self, tokens):
        self.calls += 1
        return self._eval(tokens)


def generate(llm, counter: Counted, ids: list[int], max_tokens: int) -> dict:
    import llama_cpp

    llm.reset()  # n_tokens 0: generate evaluates the whole prompt again
    counter.calls = 0
    out: list[int] = []
    first = 0.0
    t0 = time.perf_counter()
    if max_tokens > 0:
        for tok in llm.generate(ids, temp=0.0, repeat_penalty=1.0):
            if llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok):
                break
            out.append(int(tok))
            if len(out) == 1:
                first = time.perf_counter() - t0
            if len(out) >= max_tokens:
                break
    elapsed = time.perf_counter() - t0
    return {"tokens": out, "elapsed_s": elapsed, "first_s": first, "steps": max(counter.calls - 1, 0)}


def main() -> None:
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    a = json.loads(sys.argv[1])
    plain = load(a)
    lookup = load(a, LlamaPromptLookupDecoding())
    counters = {id(plain): Counted(plain), id(lookup): Counted(lookup)}
    print(json.dumps({"ready": True, "version": getattr(llama_cpp, "__version__", "?")}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        r = json.loads(line)
        k = int(r["num_pred"])
        llm = plain if k == 0 else lookup
        if k:
            llm.draft_model = LlamaPromptLookupDecoding(num_pred_tokens=k)
        print(
            json.dumps(generate(llm, counters[id(llm)], [int(i) for i in r["ids"]], int(r["max_tokens"]))), flush=True
        )


if __name__ == "__main__":
    main()
