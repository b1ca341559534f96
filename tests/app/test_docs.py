"""The documentation stays true to the code: the generated CLI reference is current, every
command is documented, every command example is one `vprom` accepts, and every relative link
of README.md and docs/ leads to a file and heading that exist."""

import inspect
import re
import shlex
from pathlib import Path

import pytest

from vprom.app import cli, reference
from vprom.app.options import Done

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
#: a command line in a code block: `vprom CMD ...`, `$ vprom CMD ...`, `torchrun ... -m vprom CMD`
COMMAND = re.compile(r"^(?:\$ )?(?:torchrun .*?-m )?vprom ([a-z-]+)( .*)?$")


def test_cli_reference_is_current():
    rendered = reference.render()
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == rendered, (
        f"docs/cli.md is out of date with vprom/app/cli.py; regenerate it with "
        f"`{reference.REGENERATE}`")


def test_cli_reference_does_not_depend_on_the_terminal(monkeypatch):
    # argparse's own help wraps at $COLUMNS; the reference must not.
    monkeypatch.setenv("COLUMNS", "40")
    narrow = reference.render()
    monkeypatch.setenv("COLUMNS", "200")
    assert reference.render() == narrow


def test_cli_reference_renders_each_argument():
    text = reference.render()
    section = text.split("## `vprom generate`")[1].split("\n## ")[0]
    assert "`--shard K/N` | — | (K, N): only matrices i with i % N == K" in section
    assert "`--scale SCALE` | `1.0` |" in section and "`POOLS` | required |" in section
    build = text.split("## `vprom build`")[1].split("\n## ")[0]
    assert "(--vg VG | --synthetic)" in build
    assert "Exactly one of `--vg` or `--synthetic` is required." in build


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_is_in_the_reference(name):
    assert f"## `vprom {name}`" in (DOCS / "cli.md").read_text(encoding="utf-8")


def _readme_command_table() -> set[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Commands\n")[1].split("\n## ")[0]
    return set(re.findall(r"^\| `vprom ([a-z-]+)[ `]", section, flags=re.MULTILINE))


def test_readme_command_table_lists_every_command_and_no_other():
    assert _readme_command_table() == set(cli.COMMANDS)


def test_readme_has_the_quick_start():
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text


def _prose(page: Path) -> str:
    """The page without its code blocks (which hold no links or headings)."""
    return re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)


def _links(page: Path) -> list[str]:
    return LINK.findall(_prose(page))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of `page`: lower case, punctuation dropped,
    spaces as hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(page), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}-{seen[slug]}"
        else:
            seen[slug] = 0
        out.add(slug)
    return out


def test_anchors_follow_github():
    assert anchors(DOCS / "formats.md") >= {"poolsh5", "dataseth5", "exports-vprom-export"}
    assert "mining-the-element-pools-vprom-mine" in anchors(DOCS / "generation.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_in_the_repository(page):
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z]+:", target):
            continue  # web addresses, mail
        name, _, anchor = target.partition("#")
        path = (page.parent / name).resolve() if name else page
        if not path.exists() or ROOT not in (path, *path.parents):
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_every_docs_page_is_linked_from_the_index():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = {target.split("#")[0] for target in _links(DOCS / "README.md")}
    missing = [p.name for p in sorted(DOCS.glob("*.md"))
               if p.name != "README.md" and p.name not in linked]
    assert not missing, f"docs/README.md does not link to {missing}"
    assert index.startswith("# ")


def command_examples(page: Path) -> list[list[str]]:
    """The `vprom` command lines in the code blocks of `page`, as argument lists. In a block
    with `$ ` prompts only the prompted lines are commands (the rest is output); synopses
    (with [optional] parts, alternatives or ellipses) are not examples."""
    found = []
    text = page.read_text(encoding="utf-8")
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        lines = re.sub(r"\\\n\s*", "", block).splitlines()  # join continued lines
        if any(line.startswith("$ ") for line in lines):
            lines = [line for line in lines if line.startswith("$ ")]
        for line in lines:
            match = COMMAND.match(line.strip())
            if not match:
                continue
            rest = re.sub(r"\s+#.*$", "", match.group(2) or "")
            if not re.search(r"[\[|…]|\.\.\.", rest):
                found.append([match.group(1), *shlex.split(rest)])
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_example_is_accepted_by_the_parser(page, capsys):
    parser = cli.build_parser()
    refused = []
    for args in command_examples(page):
        try:
            parser.parse_args(args)
        except Done:  # `extract --list`
            pass
        except SystemExit as e:  # `--help` exits 0
            if e.code:
                refused.append(f"vprom {' '.join(args)}: {capsys.readouterr().err.strip()}")
    assert not refused, (f"{page.relative_to(ROOT)}: examples `vprom` refuses:\n"
                         + "\n".join(refused))


def test_command_examples_are_found():
    examples = command_examples(README)
    assert ["evaluate", "runs/rn-neutral-aux"] in examples
    assert any(args[0] == "extract" and "--nproc_per_node" not in args for args in examples)
    assert sum(args[0] == "train" for args in examples) >= 2  # plain and under torchrun


def _command_table() -> dict[str, tuple[str, str, str]]:
    text = (DOCS / "development.md").read_text(encoding="utf-8")
    section = text.split("\n## Commands and their modules\n")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `vprom ([a-z-]+)` \| `(\w+)` \| `([\w/.]+)` \| `(\w+)` \|$",
                      section, flags=re.MULTILINE)
    return {name: (api_function, module, function) for name, api_function, module, function
            in rows}


def test_the_command_table_lists_every_command():
    assert set(_command_table()) == set(cli.COMMANDS)


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_the_command_table_names_each_commands_code(name):
    import ast

    api_function, module, function = _command_table()[name]
    assert cli.COMMANDS[name].function.__name__ == api_function
    path = ROOT / module
    assert path.is_file(), f"{module} does not exist"
    defined = {n.name for n in ast.parse(path.read_text(encoding="utf-8")).body
               if isinstance(n, ast.FunctionDef)}
    assert function in defined, f"{module} defines no function {function}"
    # cli -> api -> stage: the API function calls the stage function itself
    dotted = "vprom." + module.removeprefix("vprom/").removesuffix(".py").replace("/", ".")
    dotted = dotted.removesuffix(".__init__")
    source = inspect.getsource(cli.COMMANDS[name].function)
    assert re.search(rf"from {re.escape(dotted)} import [^\n]*\b{function}\b", source), (
        f"vprom.app.api.{api_function} does not call {dotted}.{function}")
