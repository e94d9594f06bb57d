"""The checkpoint reader's own parse of a zip's end record agrees with the archives zipfile writes."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from sopt.train.checkpoint import _central_directory_size


def _archive(path, members: int, comment: bytes, zip64: bool, monkeypatch) -> None:
    if zip64:   # zipfile writes the zip64 end records once the directory's offset passes ZIP64_LIMIT (4 GiB)
        monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 0)
    with zipfile.ZipFile(path, "w") as z:
        for i in range(members):
            z.writestr(f"m{i:03d}.npy", np.arange(i + 1, dtype=np.float32).tobytes())
        z.comment = comment
    monkeypatch.undo()


@pytest.mark.parametrize("members,comment,zip64", [(0, b"", False), (3, b"", False), (5, b"c" * 1000, False),
                                                   (7, b"", True), (4, b"PK\x05\x06 in a comment", True)])
def test_members_and_directory_size_as_zipfile_wrote_them(tmp_path, monkeypatch, members, comment, zip64):
    path = tmp_path / "a.npz"
    _archive(path, members, comment, zip64, monkeypatch)
    raw = path.read_bytes()
    end = raw.find(b"PK\x06\x06") if zip64 else raw.rfind(b"PK\x05\x06", 0, len(raw) - len(comment))
    assert end >= 0 and (b"PK\x06\x06" in raw) == zip64
    first_entry = raw.find(b"PK\x01\x02")
    expected_directory = end - first_entry if members else 0
    with open(path, "rb") as f:
        assert _central_directory_size(f) == (members, expected_directory)
        assert f.tell() == 0
    if b"PK\x05\x06" not in comment:   # zipfile itself takes the comment's signature for the record
        with zipfile.ZipFile(path) as z:
            assert len(z.infolist()) == members


def test_a_file_without_an_end_record_is_none(tmp_path):
    path = tmp_path / "b.npz"
    path.write_bytes(b"PK" + b"\0" * 100)
    with open(path, "rb") as f:
        assert _central_directory_size(f) is None
