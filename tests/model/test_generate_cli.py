"""``qwen-generate`` end to end: on a tiny saved checkpoint and on the built-in default model."""
import os

import pytest
from checkpoints import save_text_checkpoint

from qwen_ops.model.engine.generate import main


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
    assert "hits stopped: full=1" in err  # the hybrid model explains its miss: 8 tokens, no 16-token block before the last
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


def assert_clean_error(capsys, *needles):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("qwen-generate: ")
    for needle in needles:
        assert needle in line


def test_missing_prompts_file_is_a_clean_error(tiny_model_dir, tmp_path, capsys):
    missing = str(tmp_path / "nonexistent.txt")
    assert main(["--model", tiny_model_dir, "--prompts-file", missing]) == 2
    assert_clean_error(capsys, missing)


def test_directory_without_a_checkpoint_is_a_clean_error(tmp_path, capsys):
    assert main(["--model", str(tmp_path)]) == 2
    assert_clean_error(capsys, "config.json")


def test_corrupt_weights_are_a_clean_error(tiny_model_dir, tmp_path, capsys):
    for name in os.listdir(tiny_model_dir):
        data = open(os.path.join(tiny_model_dir, name), "rb").read()
        if name == "model.safetensors":
            data = data[: len(data) // 2]
        (tmp_path / name).write_bytes(data)
    assert main(["--model", str(tmp_path)]) == 2
    assert_clean_error(capsys, "model.safetensors")


@pytest.mark.parametrize("flags, needle", [
    (["--block-size", "0"], "block_size"),
    (["--max-num-seqs", "0"], "max_num_seqs"),
    (["--max-model-len", "8", "--prompt", "a prompt much longer than eight tokens"], "max_model_len=8"),
])
def test_bad_engine_flags_are_clean_errors(tiny_model_dir, capsys, flags, needle):
    assert main(["--model", tiny_model_dir, "--num-blocks", "16", *flags]) == 2
    assert_clean_error(capsys, needle)


def test_ascendc_backend_on_a_moe_model_reports_every_op_on_ascend_c(tmp_path, capsys):
    """qwen-generate --backend ascendc on a MoE checkpoint: the experts too (fused_experts) run on Ascend C."""
    from checkpoints import save_moe_checkpoint

    path = save_moe_checkpoint(tmp_path / "moe", seed=3)
    byte_level_tokenizer(path)
    assert main(["--model", path, "--prompt", "Hi", "--max-tokens", "3", "--temperature", "0", "--num-blocks", "16",
                 "--backend", "ascendc"]) == 0
    _, err = capsys.readouterr()
    assert "backend: ascendc for every op" in err.splitlines()
