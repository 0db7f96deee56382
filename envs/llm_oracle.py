"""Optional LLM oracle: ``envs.make(name, oracle="hf:<model id or path>")``.

The game module supplies the prompt (the reference format, so the LMRL-Gym flan-t5 oracles plug in)
and the post-processing (map free text to a legal answer; never reveal the city). Seq2seq models
(T5/flan-t5) and causal LMs both work; answers are greedy and cached per (target, question).
"""

from __future__ import annotations


def hf_oracle(
    model_name: str, prompt_fn, postprocess_fn, max_new_tokens: int = 32, device: str = "cpu"
):
    """Return ``answer(target, question) -> str`` backed by a Hugging Face model."""
    try:
        import torch
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoTokenizer,
        )
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            "the hf: oracle needs torch and transformers (pip install -r requirements.txt)"
        ) from e
    try:
        config = AutoConfig.from_pretrained(model_name)
    except OSError as e:
        raise OSError(
            f"could not load oracle model {model_name!r} ({e}); give a local path or a cached "
            f"Hugging Face id, or use oracle='kb' (the built-in knowledge base)"
        ) from None
    seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    cls = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
    tok = AutoTokenizer.from_pretrained(model_name)
    model = cls.from_pretrained(model_name).to(device).eval()
    cache: dict[tuple[str, str], str] = {}

    @torch.no_grad()
    def answer(target: str, question: str) -> str:
        key = (target, question)
        if key not in cache:
            enc = tok(prompt_fn(target, question), return_tensors="pt").to(device)
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            )
            new = out[0] if seq2seq else out[0, enc["input_ids"].shape[1] :]
            cache[key] = postprocess_fn(target, question, tok.decode(new, skip_special_tokens=True))
        return cache[key]

    return answer
