"""Config inputs bounded before they are read (issue 19): only regular files of at most MAX_CONFIG_BYTES are read
(a FIFO neither waited for nor read, also when swapped in after the check), nesting over MAX_DEPTH is one line
before the parsers recurse, overrides are bounded in length and depth, and error lines are printable and short.
Pure Python: no device. The would-hang cases run under an alarm, so a regression fails instead of hanging."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any, Iterator

import pytest
from pydantic import model_validator

from sopt.config import files
from sopt.config.files import MAX_CONFIG_BYTES, read_config, read_config_file
from sopt.config.overrides import MAX_OVERRIDE_CHARS, parse_literal, parse_override
from sopt.config.files import read_json_file
from sopt.config.schema import MAX_DEPTH, MAX_LINE_CHARS, ConfigError, StrictModel, text_depth, validate


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"took more than {seconds} s (a hang?)")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def refused(read: Any, *args: Any) -> str:
    """The one line of the ConfigError ``read(*args)`` raises, within 10 s."""
    with within(10), pytest.raises(ConfigError) as info:
        read(*args)
    assert len(info.value.lines) == 1, info.value.lines
    return info.value.lines[0]


# -- only regular files, bounded -------------------------------------------------------------------------------------
def test_a_fifo_a_device_and_links_to_them_are_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "fifo.toml")
    os.symlink(tmp_path / "fifo.toml", tmp_path / "to_fifo.json")
    os.symlink("/dev/null", tmp_path / "null.toml")   # a device that reads as empty
    assert refused(read_config, tmp_path / "fifo.toml").endswith("fifo.toml' is a FIFO (named pipe); expected a "
                                                                 ".toml or .json file")
    assert "to_fifo.json' is a FIFO (named pipe)" in refused(read_config, tmp_path / "to_fifo.json")
    assert "null.toml' is a character device" in refused(read_config, tmp_path / "null.toml")
    assert "fifo.toml' is a FIFO (named pipe); expected a JSON file" in refused(read_json_file, tmp_path / "fifo.toml")


def test_a_fifo_swapped_in_after_the_check_is_neither_waited_for_nor_read(tmp_path, monkeypatch):
    """The race: stat saw a regular file, a FIFO took its place before open. O_NONBLOCK and fstat on the opened file
    still refuse it at once."""
    regular = tmp_path / "regular.toml"
    regular.write_text('problem = "fit_projectile"\n', encoding="utf-8")
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: real_stat(regular if str(path) == str(fifo) else path,
                                                                      *a, **k))
    assert "c.toml' is a FIFO (named pipe)" in refused(read_config, fifo)


def test_the_size_is_checked_before_reading_and_the_read_is_bounded(tmp_path, monkeypatch):
    big = tmp_path / "c.toml"
    big.write_bytes(b"=" + b"x" * MAX_CONFIG_BYTES)   # one byte over; invalid from its first byte on
    assert refused(read_config, big).endswith(f"c.toml' is {MAX_CONFIG_BYTES + 1} bytes or more; at most "
                                              f"{MAX_CONFIG_BYTES} bytes (4 MiB) are read")
    real_fstat = os.fstat   # a file that grew after fstat: the read stops at the limit + 1
    with monkeypatch.context() as patch:
        patch.setattr(os, "fstat", lambda fd: os.stat_result((*real_fstat(fd)[:6], 10, *real_fstat(fd)[7:10])))
        assert f"is {MAX_CONFIG_BYTES + 1} bytes or more" in refused(read_config, big)


def test_names_the_filesystem_cannot_take_and_bad_links_are_one_line(tmp_path):
    line = refused(read_config, tmp_path / ("x" * 5000 + ".toml"))
    assert "has a name too long for the filesystem (5005 bytes in one name" in line and "at most 255" in line
    assert len(line) < 600   # the name is shown cut
    os.symlink(tmp_path / "gone.toml", tmp_path / "broken.toml")
    assert f"broken.toml' is a broken symbolic link (to {str(tmp_path / 'gone.toml')!r})" in refused(
        read_config, tmp_path / "broken.toml")
    os.symlink(tmp_path / "b.toml", tmp_path / "a.toml")
    os.symlink(tmp_path / "a.toml", tmp_path / "b.toml")
    assert "a.toml' is a loop of symbolic links" in refused(read_config, tmp_path / "a.toml")
    assert "a NUL character in the name" in refused(read_config, "c\0.toml")


def test_a_byte_order_mark_is_no_content(tmp_path):
    for name, text in (("c.toml", 'problem = "fit_projectile"\n'), ("c.json", '{"problem": "fit_projectile"}')):
        (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + text.encode())
        assert read_config(tmp_path / name) == {"problem": "fit_projectile"}


def test_sweep_reads_its_config_the_same_way(tmp_path, capsys):
    from sopt.experiments.sweep import sweep_main
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "deep.toml").write_text('problem = "x"\nx = ' + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with within(10):
        codes = [sweep_main([str(tmp_path / name), "steps=1,2"], check_trial=None)
                 for name in ("fifo.toml", "deep.toml")]
    err = capsys.readouterr().err.splitlines()
    assert codes == [2, 2] and len(err) == 2, err
    assert "fifo.toml' is a FIFO (named pipe)" in err[0] and "is nested 5001 levels deep" in err[1]


# -- nesting -----------------------------------------------------------------------------------------------------------
def nested_toml(levels: int) -> str:
    """A TOML config whose deepest value sits ``levels`` levels down, the top-level table included."""
    return 'problem = "p"\nx = ' + "[" * (levels - 1) + "1" + "]" * (levels - 1) + "\n"


@pytest.mark.parametrize("name,text,depth", [
    ("c.toml", nested_toml(5000), 5000),
    ("c.toml", "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n", 5001),
    ("c.toml", "a" + ".a" * 5000 + " = 1\n", 5001),                       # dotted keys: no brackets at all
    ("c.toml", "[a" + ".a" * 5000 + "]\n", 5002),
    ("c.toml", "[[a" + ".a" * 100 + "]]\n", 103),
    ("c.json", '{"a": ' * 100_000 + "1" + "}" * 100_000, 100_000),
    ("c.json", "[" * 100_000 + "]" * 100_000, 100_000),
    ("c.toml", nested_toml(MAX_DEPTH + 1), MAX_DEPTH + 1),
], ids=["toml_arrays", "toml_inline_tables", "toml_dotted_keys", "toml_table_header", "toml_array_of_tables_header",
        "json_objects", "json_arrays", "one_level_too_many"])
def test_nesting_deeper_than_max_depth_is_one_line(name, text, depth, tmp_path):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert refused(read_config, path) == (f"config file {str(path)!r} is nested {depth} levels deep; at most "
                                          f"{MAX_DEPTH} levels (sections, arrays and inline tables, the top level "
                                          "included)")


def test_max_depth_levels_are_read_and_brackets_in_strings_and_comments_do_not_count(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(nested_toml(MAX_DEPTH), encoding="utf-8")
    assert read_config(path)["problem"] == "p"
    many = "[{" * 100
    text = (f'a = "{many}\\"{many}"\nb = \'{many}\'\nc = """{many}\n"{many}"""\nd = \'\'\'\n{many}\'\'\'\n'
            f'# {many}\ne = [[1], {{k = "]]"}}]\n')
    assert text_depth(text, top=1) == 3
    strings = tmp_path / "s.toml"
    strings.write_text(text, encoding="utf-8")
    assert read_config(strings)["e"] == [[1], {"k": "]]"}]


@pytest.mark.parametrize("text,depth", [
    ("x=" + "[" * 5000 + "]" * 5000, 5000),
    ("+x={" + "a." * 5000 + "a = 1}", 5001),
], ids=["arrays", "inline_table_dotted_keys"])
def test_an_override_value_nested_too_deep_is_one_line(text, depth):
    line = refused(parse_override, text)
    assert line.startswith("override " + repr(text)[:50])
    assert f"is nested {depth} levels deep; at most {MAX_DEPTH}" in line and len(line) < 400
    with within(10), pytest.raises(ValueError, match=f"is nested {depth} levels deep"):
        parse_literal(text.split("=", 1)[1])   # the grammar of sweep values too


@pytest.mark.parametrize("text", ["+" + "a." * 5000 + "a=1", "a." * 5000 + "a=1", "~" + "a." * 5000 + "a",
                                  "+" + "a." * (MAX_DEPTH - 1) + "a=[1]"],
                         ids=["add", "set", "remove", "key_and_value"])
def test_an_override_key_nested_too_deep_is_one_line(text):
    assert "levels deep; at most 32 levels" in refused(parse_override, text)


def test_an_override_is_at_most_max_override_chars():
    text = "+x=\"" + "a" * MAX_OVERRIDE_CHARS + "\""
    line = refused(parse_override, text)
    assert line.endswith(f"is {len(text)} characters long; at most {MAX_OVERRIDE_CHARS}") and len(line) < 200


# -- error lines -------------------------------------------------------------------------------------------------------
def test_error_lines_are_printable_and_cut_to_max_line_chars():
    assert ConfigError(["key a\x1b[2J\x00b\u2028c\nd"]).lines == ["key a\\x1b[2J\\x00b c d"]
    long = "config " + "k" * 10**6 + " = 1: unknown key"
    line = ConfigError([long]).lines[0]
    assert len(line) < MAX_LINE_CHARS + 50 and line.startswith("config kkk") and line.endswith("kkk = 1: unknown key")
    assert f" ...({len(long) - MAX_LINE_CHARS} characters left out)... " in line


class _Pair(StrictModel):
    low: float = 0.0
    high: float = 1.0

    @model_validator(mode="after")
    def _ordered(self) -> "_Pair":
        if self.low > self.high:
            raise ValueError(f"config low = {self.low:g} must not exceed high = {self.high:g}")
        return self


def test_a_top_level_model_validator_says_its_message_once_without_the_config():
    with pytest.raises(ConfigError) as info:
        validate(_Pair, {"low": 2.0, "high": 1.0})
    assert info.value.lines == ["config low = 2 must not exceed high = 1"]


def test_read_config_file_gives_the_text_as_read(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('problem = "p"  # a comment\n', encoding="utf-8")
    assert read_config_file(path) == ('problem = "p"  # a comment\n', {"problem": "p"})
    assert files.read_text(path) == 'problem = "p"  # a comment\n'
