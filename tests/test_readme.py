"""The README's first commands are the ones CI runs, so they stay true."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _readme_command(label: str) -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"\*\*{label}\*\*.*?```bash\n(.+?)\n```", text, re.S)
    assert match, f"README has no '{label}' command block"
    return match.group(1).strip()


def test_ci_runs_the_readme_setup_and_test_commands():
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert _readme_command("Set up") in ci_lines
    assert _readme_command("Test") in ci_lines


def test_ci_runs_the_readme_main_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _readme_command("Run").split()[0] in ci


def test_main_command_is_the_generate_script():
    assert _readme_command("Run").endswith("qwen-generate")


def test_ops_example_runs_as_written():
    text = (ROOT / "README.md").read_text()
    section = text.split("## The ops", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.+?)\n```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md:The ops", "exec"), namespace)
    assert tuple(namespace["out"].shape) == (1, 4, 64)
