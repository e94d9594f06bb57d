"""Every `sopt ...` command a problem README shows parses and validates (config files it names made by an earlier
command of the README, overrides checked by the problem's schema), and the output folders it names are real."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tomllib
from typing import Any

import pytest

from sopt.config.schema import defaults
from sopt.experiments.cli import load_run_config

REPO = pathlib.Path(__file__).resolve().parents[2]
READMES = sorted((REPO / "problems").glob("*/README.md"))
assert READMES, f"no problem READMEs under {REPO / 'problems'}"
DEFAULTS_MARK = "<!-- the defaults"   # the comment line before the TOML block that shows the defaults


def commands(text: str) -> list[list[str]]:
    """The `sopt ...` and `python -m sopt...` lines of the README's bash blocks, split as the shell would (comments
    dropped; `a && b` is two commands, `> file` kept as two words)."""
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```$", text, flags=re.M | re.S):
        for line in block.splitlines():
            for part in " ".join(shlex.split(line, comments=True)).split(" && ") if line.strip() else []:
                words = shlex.split(part)
                if words[:1] == ["sopt"] or words[:3] in (["python", "-m", "sopt"], ["python3", "-m", "sopt"]) \
                        or (words[:2] in (["python", "-m"], ["python3", "-m"]) and words[2].startswith("sopt.")):
                    out.append(words)
    return out


def check_readme(readme: pathlib.Path, folder: pathlib.Path) -> None:
    """AssertionError (or the ConfigError of load_run_config) naming the first command of ``readme`` that is wrong."""
    problem = readme.parent.name
    shown = commands(readme.read_text())
    assert shown, f"{readme}: no sopt command in a bash block"
    made: set[str] = set()      # config files an earlier command wrote
    outs: set[str] = set()      # --out folders of earlier runs
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    for words in shown:
        where = f"{readme}: {shlex.join(words)}"
        if words[:2] == ["python", "-m"] or words[:2] == ["python3", "-m"]:
            module = words[2]
            assert module == f"problems.{problem}", f"{where}: runs another module"
            words = ["sopt", "run", "--problem", problem, *words[3:]]
        if words[0] != "sopt":
            words = ["sopt", *words[3:]]
        verb, args = words[1], words[2:]
        if verb == "config":
            assert ">" in args, f"{where}: sopt config without '> FILE'"
            target = args[args.index(">") + 1]
            text = subprocess.run([sys.executable, "-m", "sopt", "config", args[0]], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=120, check=True).stdout
            (folder / target).write_text(text)
            made.add(target)
        elif verb == "run":
            out = args[args.index("--out") + 1] if "--out" in args else None
            rest = [a for i, a in enumerate(args) if a != "--out" and (i == 0 or args[i - 1] != "--out")]
            name = rest[rest.index("--problem") + 1] if "--problem" in rest else None
            rest = [a for i, a in enumerate(rest) if a != "--problem" and (i == 0 or rest[i - 1] != "--problem")]
            files = [a for a in rest if "=" not in a]
            assert len(files) <= 1, f"{where}: more than one config file"
            for f in files:
                assert f in made, f"{where}: config file {f!r} is made by no earlier command of the README"
            overrides = [a for a in rest if "=" in a]
            for value in (o.split("=", 1)[1].strip("'\"") for o in overrides):
                if value.lower().endswith((".jpg", ".jpeg", ".png")):   # the user's own image: any small one
                    from PIL import Image
                    Image.new("RGB", (8, 8)).save(folder / value, format="PNG")
            with contextlib.chdir(folder):   # relative paths are the user's, from where they run sopt
                cls, _ = load_run_config(files[0] if files else None, name, overrides)
            assert cls.schema.problem_name == problem, f"{where}: runs problem {cls.schema.problem_name!r}"
            if out is not None:
                outs.add(out)
        elif verb == "resume":
            assert args[0] in outs, f"{where}: resumes {args[0]!r}, which no earlier command of the README ran into"
        else:
            pytest.fail(f"{where}: unexpected sopt command {verb!r}")


@pytest.mark.parametrize("readme", READMES, ids=[r.parent.name for r in READMES])
def test_readme_commands_parse_and_validate(readme: pathlib.Path, tmp_path: pathlib.Path) -> None:
    check_readme(readme, tmp_path)


@pytest.mark.parametrize("readme", READMES, ids=[r.parent.name for r in READMES])
def test_readme_names_the_real_output_folder(readme: pathlib.Path) -> None:
    """A run without --out goes to runs/<problem>/<date>-<time>-<hash>/ (sopt.experiments.run_dir), never runs/<problem>."""
    text = readme.read_text()
    for m in re.finditer(r"runs/[A-Za-z_]+(/\S*)?", text):
        if m.group(0).split("/")[1] == readme.parent.name:
            assert (m.group(1) or "").startswith("/<date>-<time>-<hash>/"), f"{readme}: names {m.group(0)!r}"


def test_a_wrong_key_or_file_is_caught(tmp_path: pathlib.Path) -> None:
    """The check itself fails on what the READMEs used to show: a config file nothing made, a misspelt key."""
    readme = tmp_path / "fit_projectile" / "README.md"
    readme.parent.mkdir()
    readme.write_text("```bash\nsopt run my.json --problem fit_projectile --out runs/b\n```\n")
    with pytest.raises(AssertionError, match="my.json"):
        check_readme(readme, tmp_path)
    readme.write_text("```bash\nsopt run --problem fit_projectile stepz=3\n```\n")
    with pytest.raises(Exception, match="stepz"):
        check_readme(readme, tmp_path)


def toml_blocks(text: str) -> list[tuple[bool, str]]:
    """The README's ```toml blocks, each with whether a DEFAULTS_MARK comment line directly precedes it."""
    return [(bool(mark), body) for mark, body in
            re.findall(r"^(" + re.escape(DEFAULTS_MARK) + r".*?-->\n)?```toml\n(.*?)^```$", text, flags=re.M | re.S)]


def differences(shown: dict[str, Any], default: Any, prefix: str = "") -> list[str]:
    """Each key of ``shown`` (nested tables as dotted keys) whose value is not ``default``'s."""
    out = []
    for key, value in shown.items():
        have = default.get(key) if isinstance(default, dict) else None
        if isinstance(value, dict):
            out += differences(value, have, f"{prefix}{key}.")
        elif value != have or type(value) is not type(have):
            out.append(f"{prefix}{key} shows {value!r}, the default is {have!r}")
    return out


def check_toml(readme: pathlib.Path, folder: pathlib.Path) -> None:
    """AssertionError (or load_run_config's ConfigError) naming the first wrong config block of ``readme``: each
    ```toml block, saved as a file, is what `sopt run FILE` takes (its own `problem` key, every key in the schema,
    every value allowed); the one marked as the defaults shows only default values, and `# key =   (unset)` only
    for keys unset by default (as `sopt config` prints them); no config is shown as JSON."""
    problem = readme.parent.name
    text = readme.read_text()
    assert "```json" not in text, f"{readme}: a JSON block; configs are shown as TOML, as `sopt config` prints them"
    blocks = toml_blocks(text)
    assert [marked for marked, _ in blocks].count(True) == 1, f"{readme}: not one TOML block marked {DEFAULTS_MARK!r}"
    for i, (marked, body) in enumerate(blocks):
        where = f"{readme}: TOML block {i + 1}"
        try:
            shown = tomllib.loads(body)
        except tomllib.TOMLDecodeError as e:
            raise AssertionError(f"{where}: {e}") from None
        assert shown.get("problem") == problem, f"{where}: problem = {shown.get('problem')!r}, not {problem!r}"
        (folder / f"block{i + 1}.toml").write_text(body)
        cls, _ = load_run_config(str(folder / f"block{i + 1}.toml"), None, [])
        if marked:
            default = defaults(cls.schema)
            wrong = differences(shown, default)
            for key in re.findall(r"^# ([\w.]+) =   \(unset\)$", body, flags=re.M):   # within the section above it
                section = re.findall(r"^\[([\w.]+)\]$", body[:body.index(f"# {key} =")], flags=re.M)
                dotted = ".".join([*section[-1:], key])
                value: Any = default
                for part in dotted.split("."):
                    value = value.get(part, "no such key") if isinstance(value, dict) else "no such key"
                if value is not None:
                    wrong.append(f"{dotted} shows (unset), the default is {value!r}")
            assert not wrong, f"{where} (the defaults): " + "; ".join(wrong)


@pytest.mark.parametrize("readme", READMES, ids=[r.parent.name for r in READMES])
def test_readme_configs_are_valid_toml_for_the_problem(readme: pathlib.Path, tmp_path: pathlib.Path) -> None:
    check_toml(readme, tmp_path)


def test_a_wrong_config_block_is_caught(tmp_path: pathlib.Path) -> None:
    """The check fails on what a README could show wrongly: JSON, a misspelt key, a value off the defaults, another
    problem's block."""
    readme = tmp_path / "fit_projectile" / "README.md"
    readme.parent.mkdir()
    marked = DEFAULTS_MARK + " -->\n"
    cases = {'```json\n{"steps": 300}\n```\n': "JSON block",
             marked + '```toml\nproblem = "fit_projectile"\nstepz = 300\n```\n': "stepz",
             marked + '```toml\nproblem = "fit_projectile"\nsteps = 301\n```\n': "steps shows 301",
             marked + '```toml\nproblem = "fit_projectile"\n\n[true]\ndrag = 0.05\n```\n': "true.drag shows 0.05",
             marked + '```toml\nproblem = "fit_projectile"\n# steps =   (unset)\n```\n': "steps shows .unset.",
             marked + '```toml\nproblem = "fit_cloth"\n```\n': "problem = 'fit_cloth'",
             '```toml\nproblem = "fit_projectile"\n```\n': "not one TOML block marked"}
    for text, message in cases.items():
        readme.write_text(text)
        with pytest.raises(Exception, match=message):
            check_toml(readme, tmp_path)
    readme.write_text(marked + '```toml\nproblem = "fit_projectile"\nsteps = 300\n# multi_start =   (unset)\n```\n')
    with pytest.raises(AssertionError, match="multi_start shows .unset., the default is 8"):
        check_toml(readme, tmp_path)
