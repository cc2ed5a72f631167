"""The README's first commands are the ones CI runs, so they stay true; its links and docs/ examples too."""
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
    """The op reference's first example (docs/ops.md, moved there from the README) runs as written."""
    text = (ROOT / "docs" / "ops.md").read_text()
    code = re.search(r"```python\n(.+?)\n```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/ops.md", "exec"), namespace)
    assert tuple(namespace["out"].shape) == (1, 4, 64)


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 400, f"README.md has {lines} lines; reference material belongs in docs/"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # no headings inside code blocks
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


DOCUMENTS = ["README.md", "bench/RESULTS.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]


def test_docs_pages_exist():
    assert {"docs/ops.md", "docs/scheduler.md", "docs/engine.md", "docs/benchmarks.md"} <= set(DOCUMENTS)


def test_every_relative_link_resolves():
    """Every relative link of the README, bench/RESULTS.md and docs/ names a file, and its #anchor a heading there."""
    broken = []
    for name in DOCUMENTS:
        source = ROOT / name
        text = re.sub(r"```.*?```", "", source.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (source.parent / path).resolve() if path else source
            if not file.exists():
                broken.append(f"{name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{name}: {target} (no heading #{anchor} in {file.relative_to(ROOT)})")
    assert not broken, "broken links:\n" + "\n".join(broken)
