"""'# vram:' comment grammar, normalisation and errors (never exceptions)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from vram_estimator.reading.config_comments import comments_from_source, normalise, parse_comment, read_comments


def test_full_comment_parses_every_key():
    values, errors = parse_comment(
        "# vram: gpu=a100-80gb model=meta-llama/Llama-2-7b-hf batch=4 seq=2k precision=bf16-mixed "
        "optimizer=adamw world=8 sharding=zero3 offload=optimizer checkpointing=on attention=flash_attention_2 "
        "lora=16 mode=train image=224 context=8192   # a remark with = signs",
        3,
    )
    assert errors == []
    v = {k: x.value for k, x in values.items()}
    assert v == dict(
        gpu="a100-80gb",
        model="llama-2-7b",
        batch=4,
        seq=2048,
        precision="bf16-mixed",
        optimizer="adamw",
        world=8,
        sharding="zero3",
        offload="optimizer",
        checkpointing="on",
        attention="flash",
        lora=16,
        mode="train",
        image=224,
        context=8192,
    )
    assert values["batch"].source == "comment line 3"


def test_aliases_and_params():
    values, errors = parse_comment(
        "# vram: params=7B precision=4bit optimizer=paged_adamw_8bit zero=2 ckpt=true", 1
    )
    assert errors == []
    assert values["params"].value == 7_000_000_000
    assert values["precision"].value == "nf4"
    assert values["optimizer"].value == "paged-adamw-8bit"
    assert values["sharding"].value == "zero2"
    assert values["checkpointing"].value == "on"


def test_model_params_form():
    values, errors = parse_comment("# vram: model=params=350M", 1)
    assert errors == [] and values["params"].value == 350_000_000


def test_errors_name_offending_text_and_accepted_values():
    _, errors = parse_comment(
        "# vram: batch=four precison=bf16 checkpointing gpu=a100-90gb model=gpt5 mode=fly", 2
    )
    messages = " | ".join(e.message for e in errors)
    assert "batch=four" in messages and "positive integer" in messages
    assert "unknown key 'precison'" in messages and "accepted keys" in messages
    assert "'checkpointing'" in messages and "key=value" in messages
    assert "unknown GPU 'a100-90gb'" in messages and "a100-80gb" in messages
    assert "unknown model 'gpt5'" in messages and "params=7B" in messages
    assert "mode=fly" in messages and "train, inference, generate" in messages
    assert all(e.line == 2 for e in errors)


def test_empty_comment_is_an_error():
    _, errors = parse_comment("# vram:", 5)
    assert len(errors) == 1 and "empty" in errors[0].message


def test_non_vram_comments_ignored():
    values, errors = parse_comment("# just a comment with gpu=a100", 1)
    assert values == {} and errors == []


def test_later_comment_wins_and_first_line_recorded():
    src = "x = 1  # not ours\n# vram: batch=4\n\n# vram: batch=8 gpu=t4\n"
    c = read_comments(comments_from_source(src))
    assert c.values["batch"].value == 8 and c.first_line == 2


def test_normalise_rejects_zero_and_negative():
    assert normalise("batch", "0")[0] is None
    assert normalise("world", "-2")[0] is None
    assert normalise("seq", "1.5")[0] is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_malformed_comments_never_raise(text):
    values, errors = parse_comment("# vram: " + text, 1)
    assert isinstance(values, dict) and isinstance(errors, list)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "gpu",
                    "model",
                    "batch",
                    "seq",
                    "precision",
                    "lora",
                    "zero",
                    "bogus",
                    "world",
                    "mode",
                    "context",
                    "params",
                ]
            ),
            st.text(alphabet="abcxyz0123456789-_.=/kKmMbB", max_size=12),
        ),
        max_size=6,
    )
)
def test_key_value_soup_never_raises(pairs):
    text = "# vram: " + " ".join(f"{k}={v}" for k, v in pairs)
    values, errors = parse_comment(text, 7)
    for e in errors:
        assert e.line == 7 and e.message
