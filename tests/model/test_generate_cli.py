"""``qwen-generate`` end to end: on a tiny saved checkpoint and on the built-in default model."""
import os

import pytest
from checkpoints import save_text_checkpoint

from qwen_ops.model.generate import main


def byte_level_tokenizer(path):
    """A 256-token byte-level tokenizer.json, so text prompts fit the tiny model's vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(path, "tokenizer.json"))


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    path = save_text_checkpoint(tmp_path_factory.mktemp("cli_model"), seed=3)
    byte_level_tokenizer(path)
    return path


def test_single_prompt_streams_and_reports(tiny_model_dir, capsys):
    assert main(["--model", tiny_model_dir, "--prompt", "Hi there", "--max-tokens", "6", "--temperature", "0",
                 "--num-blocks", "16", "--trace"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Hi there")  # the model's own tokenizer.json was used: no out-of-vocab error
    assert "budget: max_num_batched_tokens=" in err
    assert "generation" in err and "time to first token" in err and "steps:" in err
    assert out.count("step ") >= 6  # --trace: one line per step


def test_many_prompts_and_int8(tiny_model_dir, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one\ntwo two\n\nthree three three\n")
    assert main(["--model", tiny_model_dir, "--prompts-file", str(prompts), "--prompt", "four", "--max-tokens",
                 "4", "--kv-cache-dtype", "int8", "--num-blocks", "32"]) == 0
    out, err = capsys.readouterr()
    assert out.count("--- ") == 4
    assert "INT8 KV scales: calibrated" in err and "requests: 4" in err


def test_bad_sampling_flag_is_a_clean_error(tiny_model_dir, capsys):
    assert main(["--model", tiny_model_dir, "--temperature", "-1"]) == 2
    assert "SamplingParams.temperature" in capsys.readouterr().err


def test_default_model_runs(capsys):
    """The README's main command: no arguments at all (a short run)."""
    assert main(["--max-tokens", "4"]) == 0
    out, err = capsys.readouterr()
    assert "built-in tiny" in err and "generated tokens: 4" in err
