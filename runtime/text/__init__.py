"""Text in and out of the model: the tokenizers (BPE and SentencePiece, from GGUF metadata), the incremental
detokenizer, and chat templates rendered in a sandboxed Jinja environment.

    tok = Tokenizer.from_gguf(path)       # text.tokenizer
    ids = tok.encode_chat(messages)       # text.chat_template renders, the tokenizer encodes
"""
