"""What fabricctl's parser gives operators besides running commands: the CLI reference
docs/fabricctl-reference.md (rendered from the parser: fails when the committed file is stale) and the
bash completion script of `fabricctl completion bash` (run in a real bash: command words, a command's
options, an option's choices)."""

from __future__ import annotations

import difflib
import shutil
import subprocess
from pathlib import Path

import pytest

from fabricctl import commands, reference
from fabricctl.completion import bash_script
from fabricctl.main import build_parser, main
from fabricctl.tree import walk

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "fabricctl-reference.md"


# --------------------------------------------------------------------------------------------
# the reference


def test_the_committed_reference_is_the_rendered_one():
    rendered = reference.render()
    committed = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    if committed != rendered:
        diff = list(difflib.unified_diff(committed.splitlines(), rendered.splitlines(), "committed", "rendered",
                                         lineterm=""))
        pytest.fail("docs/fabricctl-reference.md differs from the commands' parsers: run `make docs` and commit "
                    "the result\n" + "\n".join(diff[:40]), pytrace=False)


def test_the_reference_has_every_command_its_description_and_options():
    text = reference.render()
    for module in commands.ALL:
        name = " ".join(("fabricctl", *module.PATH))
        assert f"\n## {name}\n" in text and f"usage: {name} " in text, name
        assert (module.__doc__ or module.HELP).strip().splitlines()[0] in text, name
    # an option with its value, help and choices; the shared options; the root's
    assert "| `--size SIZE` | volume size, e.g. 500G or 2T (required) |" in text
    assert "(one of `ext4`, `xfs`)" in text and "| `--dry-run` |" in text and "| `--version` |" in text


def test_the_reference_is_linked_from_the_guide():
    assert "fabricctl-reference.md" in (REPO / "docs" / "fabricctl.md").read_text()
    assert "fabricctl.reference" in (REPO / "Makefile").read_text()


def test_the_reference_writes_a_file(tmp_path):
    assert reference.main([str(tmp_path / "ref.md")]) == 0
    assert (tmp_path / "ref.md").read_text() == reference.render()


def test_the_tree_walks_every_command_in_the_order_of_all():
    leaves = [n.path for n in walk(build_parser()) if n.module is not None]
    assert leaves == [m.PATH for m in commands.ALL]


# --------------------------------------------------------------------------------------------
# bash completion

BASH = shutil.which("bash")


def complete(script: Path, line: str) -> list[str]:
    """The candidates the completion function offers for a command line typed up to its end."""
    driver = f"""
source {script}
COMP_LINE={line!r}
read -ra COMP_WORDS <<<"$COMP_LINE"
[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
COMP_POINT=${{#COMP_LINE}}
fn=$(complete -p fabricctl | sed -E 's/.* -F ([^ ]+) .*/\\1/')
"$fn" fabricctl "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    res = subprocess.run([BASH, "--norc", "--noprofile", "-c", driver], capture_output=True, text=True, check=True)
    return [w for w in res.stdout.split("\n") if w]


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "fabricctl"
    path.write_text(bash_script(build_parser()))
    return path


@pytest.mark.skipif(BASH is None, reason="no bash")
def test_the_script_is_valid_bash_and_registers_fabricctl(script):
    subprocess.run([BASH, "-n", str(script)], check=True)
    res = subprocess.run([BASH, "--norc", "-c", f"source {script}; complete -p fabricctl"], capture_output=True,
                         text=True, check=True)
    assert res.stdout.strip() == "complete -o default -F _fabricctl fabricctl"


@pytest.mark.skipif(BASH is None, reason="no bash")
def test_completion_offers_the_command_words(script):
    top = complete(script, "fabricctl ")
    assert set(top) == {m.PATH[0] for m in commands.ALL} and "dataset" in top and "publish" in top
    assert complete(script, "fabricctl dat") == ["dataset"]
    assert complete(script, "fabricctl dataset ") == ["create", "ingest", "seal", "destroy"]
    assert complete(script, "fabricctl --config /tmp/c.yml checkpoint volume ") == ["create", "destroy"]
    assert complete(script, "fabricctl config ") == ["check"]
    assert complete(script, "fabricctl completion ") == ["bash"]
    # a positional (a version) is not a command word: bash's file names then (complete -o default)
    assert complete(script, "fabricctl publish imagenet@v1 ") == []


@pytest.mark.skipif(BASH is None, reason="no bash")
def test_completion_offers_a_commands_options_and_their_choices(script):
    assert complete(script, "fabricctl publish --") == ["--dry-run", "--from-nodes", "--help", "--json", "--to"]
    assert complete(script, "fabricctl publish imagenet@v1 --t") == ["--to"]
    assert complete(script, "fabricctl dataset create --size 10G --") == ["--dry-run", "--fs", "--help", "--json",
                                                                         "--size", "--volblocksize"]
    assert complete(script, "fabricctl dataset create --fs ") == ["ext4", "xfs"]
    assert complete(script, "fabricctl dataset create --fs x") == ["xfs"]
    assert complete(script, "fabricctl --") == ["--config", "--debug", "--help", "--verbose", "--version"]
    assert complete(script, "fabricctl config check --") == ["--help", "--json"]
    assert complete(script, "fabricctl publish imagenet@v1 --to ") == []  # a value without choices: file names


def test_fabricctl_completion_bash_prints_the_script(capsys):
    assert main(["completion", "bash"]) == 0
    out = capsys.readouterr().out
    assert out == bash_script(build_parser(), reference_version()).rstrip("\n") + "\n"
    assert main(["completion", "zsh"]) == 2  # only bash


def reference_version() -> str:
    from fabricctl.about import fabricctl_version

    return fabricctl_version()
