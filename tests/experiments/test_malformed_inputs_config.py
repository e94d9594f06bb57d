"""Hostile config files and overrides through ``sopt run`` (issue 19, "inputs are bounded before they are read"): a
FIFO, a device, a broken or looping link, a name too long for the filesystem, a file over 4 MiB, nesting thousands
deep (brackets, inline tables, dotted keys, override keys), a 10 MB override, control characters and a huge problem
name. Each is exit 2 with one short printable ``error:`` line, nothing written, no traceback, within seconds.

The table has test_cli's MALFORMED format and goes through its check (imported, not copied); files that cannot live in
the checked folder (a FIFO, links: test_cli's listing follows links) are made in a folder of their own, ``{links}``.
"""

from __future__ import annotations

import os
import pathlib
import signal
from typing import Any

import pytest

from test_cli import P, sopt_process
from test_cli import test_a_malformed_config_or_override_is_one_line_exit_2_and_writes_nothing as check_refused

FIFO = object()   # a named pipe: opening it for reading waits for a writer


class Link(str):
    """A symbolic link to this target ("{links}" in it: the links' folder)."""


DEEP = 5000
MIB = 2 ** 20
# (id, files {name: text | FIFO | Link}, argv after "run", what the one error line holds)
HOSTILE: list[tuple[str, dict[str, Any], list[str], list[str]]] = [
    # files that are no regular file, or cannot be named
    ("fifo", {"fifo.toml": FIFO}, ["{links}/fifo.toml"], ["fifo.toml' is a FIFO (named pipe); expected a .toml"]),
    ("link_to_fifo", {"fifo.toml": FIFO, "c.toml": Link("{links}/fifo.toml")}, ["{links}/c.toml"],
     ["c.toml' is a FIFO (named pipe)"]),
    ("broken_link", {"c.toml": Link("{links}/gone.toml")}, ["{links}/c.toml"],
     ["c.toml' is a broken symbolic link (to '", "gone.toml')"]),
    ("link_loop", {"a.toml": Link("{links}/b.toml"), "b.toml": Link("{links}/a.toml")}, ["{links}/a.toml"],
     ["a.toml' is a loop of symbolic links"]),
    ("name_too_long", {}, ["{tmp}/" + "x" * 5000 + ".toml"],
     ["has a name too long for the filesystem (5005 bytes in one name", "at most 255"]),
    ("path_too_long", {}, ["{tmp}/" + "/".join(["d" * 200] * 30) + ".toml"],
     ["has a name too long for the filesystem"]),
    ("nul_in_name", {}, ["{tmp}/c\0.toml"], ["a NUL character in the name"]),
    ("over_4_mib", {"c.toml": "=" + "x" * (4 * MIB)}, ["{tmp}/c.toml"],
     ["c.toml' is 4194305 bytes or more; at most 4194304 bytes (4 MiB) are read"]),
    # nesting, in files
    ("toml_deep_arrays", {"c.toml": P + "x = " + "[" * DEEP + "]" * DEEP + "\n"}, ["{tmp}/c.toml"],
     ["c.toml' is nested 5001 levels deep; at most 32 levels"]),
    ("toml_deep_inline_tables", {"c.toml": P + "x = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n"}, ["{tmp}/c.toml"],
     ["c.toml' is nested 5001 levels deep; at most 32 levels"]),
    ("toml_deep_dotted_key", {"c.toml": P + "a" + ".a" * DEEP + " = 1\n"}, ["{tmp}/c.toml"],
     ["c.toml' is nested 5001 levels deep"]),
    ("toml_deep_table_header", {"c.toml": P + "[a" + ".a" * DEEP + "]\nx = 1\n"}, ["{tmp}/c.toml"],
     ["c.toml' is nested 5002 levels deep"]),
    ("json_deep_objects", {"c.json": '{"problem": "fit_projectile", "x": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001},
     ["{tmp}/c.json"], ["c.json' is nested 100001 levels deep; at most 32 levels"]),
    ("json_600_deep_arrays", {"c.json": '{"problem": "fit_projectile", "x": ' + "[" * 600 + "]" * 600 + "}"},
     ["{tmp}/c.json"], ["c.json' is nested 601 levels deep"]),
    # nesting and size, in overrides
    ("override_deep_array", {}, ["--problem", "fit_projectile", "x=" + "[" * DEEP + "]" * DEEP],
     ["override 'x=[[[[", "is nested 5000 levels deep; at most 32 levels"]),
    ("override_deep_inline_dotted_keys", {}, ["--problem", "fit_projectile", "+x={" + "a." * DEEP + "a = 1}"],
     ["override '+x={a.a.a.", "is nested 5001 levels deep"]),
    ("override_add_5000_segments", {}, ["--problem", "fit_projectile", "+" + "a." * DEEP + "a=1"],
     ["override '+a.a.a.", "is nested 5001 levels deep"]),
    ("override_set_5000_segments", {}, ["--problem", "fit_projectile", "a." * DEEP + "a=1"],
     ["is nested 5001 levels deep"]),
    ("override_remove_5000_segments", {}, ["--problem", "fit_projectile", "~" + "a." * DEEP + "a"],
     ["is nested 5001 levels deep"]),
    ("override_10_mb", {}, ["--problem", "fit_projectile", "+x=\"" + "a" * 10_000_000 + "\""],
     ["override '+x=\"aaaa", "is 10000005 characters long; at most 131072"]),
    # values and keys that are no trouble to store but were to print
    ("toml_5000_digit_integer", {"c.toml": P + "steps = " + "9" * 5000 + "\n"}, ["{tmp}/c.toml"],
     ["c.toml' is not valid TOML: Exceeds the limit (4300 digits)"]),
    ("key_with_escape_and_nul", {"c.toml": P + '"a\\u001b[2Jb\\u0000" = 1\n'}, ["{tmp}/c.toml"],
     ["config a\\x1b[2Jb\\x00 = 1: unknown key"]),
    ("problem_name_of_a_megabyte", {"c.toml": 'problem = "' + "x" * MIB + '"\n'}, ["{tmp}/c.toml"],
     ["config problem = 'xxx", "characters left out)...", "unknown problem"]),
    # a model validator of the whole config: its message once, without the config dumped before it
    ("top_level_validator", {}, ["--problem", "fit_cloth", "true.stiffness_variation=0.1"],
     ["error: config: true.stiffness_variation = 0.1 needs per_spring: true"]),
]


def test_there_are_at_least_18_hostile_cases():
    assert len(HOSTILE) >= 18 and len({c[0] for c in HOSTILE}) == len(HOSTILE)


def _expire(signum: int, frame: Any) -> None:
    raise TimeoutError("sopt run took more than 60 s (waiting on a FIFO?)")


def _make(files: dict[str, Any], links: pathlib.Path) -> dict[str, Any]:
    """The FIFOs and links of ``files`` made in ``links``; the plain files left for test_cli's _prepare."""
    plain = {}
    for name, content in files.items():
        if content is FIFO:
            os.mkfifo(links / name)
        elif isinstance(content, Link):
            os.symlink(content.replace("{links}", str(links)), links / name)
        else:
            plain[name] = content
    return plain


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_a_hostile_config_or_override_is_one_line_exit_2_at_once(case, tmp_path, tmp_path_factory, monkeypatch):
    links = tmp_path_factory.mktemp("links")
    name, files, argv, fragments = case
    concrete = (name, _make(files, links), [a.replace("{links}", str(links)) for a in argv], fragments)
    previous = signal.signal(signal.SIGALRM, _expire)
    signal.alarm(60)   # the first case pays for importing the problems; a FIFO read would wait forever
    try:
        check_refused(concrete, tmp_path, monkeypatch)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_the_real_command_refuses_a_fifo_and_devices_at_once(tmp_path):
    """``python -m sopt run`` on a FIFO and on links to /dev/zero and /dev/urandom named like configs: one line,
    exit 2, before the timeout (a read of /dev/zero would fill the memory: a real process, killed on timeout)."""
    os.mkfifo(tmp_path / "fifo.toml")
    os.symlink("/dev/zero", tmp_path / "zero.toml")
    os.symlink("/dev/urandom", tmp_path / "urandom.json")
    procs = {name: sopt_process(["run", str(tmp_path / name), "--root", str(tmp_path / "runs"), "--no-progress"])
             for name in ("fifo.toml", "zero.toml", "urandom.json")}
    try:
        for name, proc in procs.items():
            _, stderr = proc.communicate(timeout=120)
            lines = stderr.splitlines()
            assert proc.returncode == 2 and len(lines) == 1, (name, stderr)
            kind = "a FIFO (named pipe)" if name == "fifo.toml" else "a character device"
            assert lines[0].startswith("error: config file ") and f"{name}' is {kind}" in lines[0], lines[0]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert not (tmp_path / "runs").exists()
