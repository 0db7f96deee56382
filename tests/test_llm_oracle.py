"""The optional LLM oracle (oracle="hf:<path>") loads a local model, prompts it in the reference
format and post-processes its text into a legal answer. A tiny random model stands in for the
flan-t5 oracles."""

import pytest

import envs

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    words = [
        "<pad>",
        "</s>",
        "<unk>",
        "yes",
        "no",
        "Yes",
        "No",
        ".",
        "the",
        "city",
        "Lima",
        "dog",
        "is",
    ]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    cfg = T5Config(
        vocab_size=len(words),
        d_model=16,
        d_ff=32,
        num_layers=1,
        num_heads=2,
        d_kv=8,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    path = tmp_path_factory.mktemp("t5")
    T5ForConditionalGeneration(cfg).save_pretrained(path)
    hf_tok.save_pretrained(path)
    return str(path)


def test_hf_oracle_gives_only_legal_twenty_questions_answers(tiny_t5):
    env = envs.make("twenty_questions_subset", oracle=f"hf:{tiny_t5}")
    env.reset(options={"target": "dog"})
    for q in ["Is it an animal?", "Is it alive?", "What is it?"]:
        obs, reward, term, _, _ = env.step(q)
        assert (
            obs.splitlines()[-1] in {f"{q} Yes.", f"{q} No.", f"{q} Invalid Question."}
            and reward == -1
        )
    obs, reward, term, _, info = env.step("Is it a dog?")
    assert reward == 0 and term and info["won"] and obs.endswith("Is it a dog? Yes.\n")


def test_hf_oracle_never_names_the_city(tiny_t5):
    env = envs.make("guess_my_city", oracle=f"hf:{tiny_t5}", targets=["Lima"])
    env.reset(seed=0)
    obs, *_ = env.step("What is the name of the city?")
    assert not envs.mentions(
        obs.splitlines()[-1].replace("What is the name of the city?", ""), "Lima"
    )


def test_missing_oracle_model_fails_with_the_alternative(tmp_path):
    with pytest.raises(OSError, match="oracle='kb'"):
        envs.make("twenty_questions", oracle=f"hf:{tmp_path / 'missing'}")
