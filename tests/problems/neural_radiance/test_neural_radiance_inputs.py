"""Malformed NeRF-synthetic data through ``sopt run``: each is one ``error: config data = ...`` line naming the
transforms file, the frame and the key with what is allowed, exit status 2, before the device is reported, with
no run folder written; 16-bit frames load at their own levels; the problem names the files it reads."""

from __future__ import annotations

import json
import pathlib
import struct
import time
import zlib

import numpy as np
import pytest
from PIL import Image

from problems.neural_radiance import load_config
from problems.neural_radiance.problem import NeuralRadiance
from problems.neural_radiance.nerf_synthetic import load_split
from tests.experiments.test_cli import listing
from tests.problems.runs import run_cli

ALLOWED_POSE = "expected a camera-to-world matrix: 4 rows of 4 numbers, a rotation and a translation over the row " \
               "0 0 0 1"
ALLOWED_ANGLE = "expected the horizontal field of view, a number of radians from 0.001 to pi - 0.001 (Lego's: 0.6911)"


def png_bytes(width: int, height: int, pixels: bytes | None, colour_type: int, bit_depth: int = 8) -> bytes:
    """A PNG file: IHDR of ``width`` x ``height`` and one IDAT of ``pixels`` (rows unfiltered; None: a few bytes,
    enough for a header that is never decoded)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    idat = zlib.compress(pixels) if pixels is not None else b"\x78\x9c\x03\x00\x00\x00\x00\x01"
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def png16(array: np.ndarray) -> bytes:
    """A 16-bit PNG of ``array`` (H, W, C) uint16: C = 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA."""
    h, w, c = array.shape
    rows = b"".join(b"\0" + array[y].astype(">u2").tobytes() for y in range(h))
    return png_bytes(w, h, rows, {1: 0, 2: 4, 3: 2, 4: 6}[c], 16)


def pose(z: float) -> list[list[float]]:
    m = np.eye(4)
    m[:3, 3] = (0.0, 0.0, z)
    return m.tolist()


def dataset(folder: pathlib.Path, size: int = 12) -> None:
    """Two training frames and one test frame, RGBA of size x size pixels, at distances 4 and 5."""
    for split, count in (("train", 2), ("test", 1)):
        (folder / split).mkdir(parents=True, exist_ok=True)
        frames = []
        for i in range(count):
            rgba = np.full((size, size, 4), 200, np.uint8)
            Image.fromarray(rgba, "RGBA").save(folder / split / f"r_{i}.png")
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": pose(4.0 + i)})
        (folder / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": 0.5, "frames": frames}))


def edit_train(folder: pathlib.Path, change) -> str:
    """transforms_train.json after ``change(data)`` (which may return replacement text)."""
    path = folder / "transforms_train.json"
    data = json.loads(path.read_text())
    text = change(data)
    path.write_text(text if isinstance(text, str) else json.dumps(data))
    return str(path)


def set_entry(i: int, j: int, value):
    def change(data):
        data["frames"][1]["transform_matrix"][i][j] = value
    return change


def set_matrix(matrix):
    def change(data):
        data["frames"][1]["transform_matrix"] = matrix
    return change


def set_angle(value):
    def change(data):
        data["camera_angle_x"] = value
    return change


def deep(data):
    return '{"camera_angle_x": 0.5, "frames": ' + "[" * 100_000 + "]" * 100_000 + "}"


def nan_entry(data):
    data["frames"][1]["transform_matrix"][0][0] = "NAN_HERE"
    return json.dumps(data).replace('"NAN_HERE"', "NaN")


def big_frame(folder: pathlib.Path) -> None:
    (folder / "train" / "r_1.png").write_bytes(png_bytes(9000, 9000, None, 6))


ROTATION_ZERO = [[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 4.0], [0.0, 0.0, 0.0, 1.0]]
F1 = "frames[1].transform_matrix"
# (id, the change, what the one line says after "config data = '<folder>': '<folder>/transforms_train.json'")
CASES = [
    ("deeply_nested", deep, " is nested 100001 levels deep; at most 8 (a transforms file nests 4: the object, "
                            "frames, a frame, its matrix's rows)"),
    ("all_zero_matrix", set_matrix([[0.0] * 4] * 4),
     f" {F1}: the bottom row is [0.0, 0.0, 0.0, 0.0], not [0, 0, 0, 1]; {ALLOWED_POSE}"),
    ("singular_rotation", set_matrix(ROTATION_ZERO),
     f" {F1}: the rotation (the top left 3 x 3) is not orthonormal (|R^T R - I| up to 1, at most 0.001: scaled, "
     f"sheared or singular); {ALLOWED_POSE}"),
    ("scaled_rotation", set_matrix((np.diag([2.0, 2.0, 2.0, 1.0])).tolist()),
     f" {F1}: the rotation (the top left 3 x 3) is not orthonormal (|R^T R - I| up to 3, at most 0.001"),
    ("reflection", set_matrix((np.diag([-1.0, 1.0, 1.0, 1.0])).tolist()),
     f" {F1}: the rotation (the top left 3 x 3) is a reflection (determinant -1); {ALLOWED_POSE}"),
    ("string_entry", set_entry(0, 3, "4.0"), f' {F1}[0][3] is "4.0", not a number; {ALLOWED_POSE}'),
    ("bool_entry", set_entry(1, 1, True), f" {F1}[1][1] is true, not a number; {ALLOWED_POSE}"),
    ("entry_1e300", set_entry(2, 3, 1e300), f" {F1}[2][3] is 1e+300, which float32 stores as inf; {ALLOWED_POSE}"),
    ("nan_entry", nan_entry, f" {F1}[0][0] is nan, not a finite number; {ALLOWED_POSE}"),
    ("three_rows", set_matrix(pose(4.0)[:3]), f" {F1} is 3 rows of 4, 4, 4; {ALLOWED_POSE}"),
    ("flat_list", set_matrix([1.0] * 16), f" {F1} is 16 rows of a non-list"),
    ("far_camera", set_entry(2, 3, 1e7), f" {F1}: the camera is 1e+07 world units from the origin; at most 1e+06"),
    ("angle_true", set_angle(True), f": camera_angle_x is true, not a number; {ALLOWED_ANGLE}"),
    ("angle_string", set_angle("0.5"), f': camera_angle_x is "0.5", not a number; {ALLOWED_ANGLE}'),
    ("angle_1e-30", set_angle(1e-30), f": camera_angle_x is 1e-30 radians; {ALLOWED_ANGLE}"),
    ("angle_pi", set_angle(3.1416), f": camera_angle_x is 3.1416 radians; {ALLOWED_ANGLE}"),
    ("angle_negative", set_angle(-0.5), f": camera_angle_x is -0.5 radians; {ALLOWED_ANGLE}"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_malformed_transforms_file_is_one_line_naming_file_frame_and_key(case, tmp_path: pathlib.Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    name, change, expected = case
    folder = tmp_path / "scene"
    dataset(folder)
    path = edit_train(folder, change)
    before = listing(tmp_path)
    start = time.monotonic()
    code, stdout, stderr = run_cli(["run", "--problem", "neural_radiance", f'data="{folder}"',
                                    "--out", str(tmp_path / "out"), "--no-progress"], capsys)
    assert time.monotonic() - start < 10
    assert code == 2 and stdout == "", (stdout, stderr)   # before the device is reported or a folder named
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    # the key's value shown cut to 60 characters, then the file in full
    assert lines[0].startswith("error: config data = '") and f": '{path}'{expected}" in lines[0], (lines[0], expected)
    assert listing(tmp_path) == before and not (tmp_path / "out").exists()


def test_a_frame_too_large_is_refused_from_its_header(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    """A 9000 x 9000 frame (whose pixels were never written) is refused from its header, naming file and size."""
    folder = tmp_path / "scene"
    dataset(folder)
    big_frame(folder)
    frame = folder / "train" / "r_1.png"
    code, stdout, stderr = run_cli(["run", "--problem", "neural_radiance", f'data="{folder}"',
                                    "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: config data = '") and lines[0].endswith(
        f": '{folder / 'transforms_train.json'}' frames[1]: image '{frame}' is 9000 x 9000 pixels; at most 8192 pixels "
        "a side are decoded; downscale it first (NeRF-synthetic folder (transforms_train.json, transforms_test.json, "
        "PNG frames); None: the built-in scene)"), lines
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"frames\[1\]: image .*r_1.png' is 9000 x 9000 pixels; at most 8192"):
        load_split(folder, "train", (1.0, 1.0, 1.0), max_side=12)


def test_sixteen_bit_frames_load_at_their_levels(tmp_path: pathlib.Path) -> None:
    """A 16-bit RGBA frame of level 100 (of 65535), opaque, loads as 100/65535 (8 bits would give 0 or 0.392)."""
    folder = tmp_path / "scene"
    dataset(folder)
    frame = np.full((12, 12, 4), 100, np.uint16)
    frame[..., 3] = 65535
    frame[0, 0, :3] = (65535, 256, 1)
    (folder / "train" / "r_0.png").write_bytes(png16(frame))
    views = load_split(folder, "train", (0.0, 0.0, 0.0), max_side=12)
    assert abs(float(views.images[0, 5, 5, 0]) - 100 / 65535) < 1e-7
    np.testing.assert_allclose(views.images[0, 0, 0], [1.0, 256 / 65535, 1 / 65535], atol=1e-7)
    np.testing.assert_allclose(views.images[1, 0, 0], [(200 / 255) ** 2] * 3, atol=1e-7)   # 8-bit, alpha 200, on black
    # half alpha (32768 of 65535) on white: 100/65535 a + (1 - a)
    frame[..., 3] = 32768
    (folder / "train" / "r_0.png").write_bytes(png16(frame))
    a = 32768 / 65535
    views = load_split(folder, "train", (1.0, 1.0, 1.0), max_side=12)
    assert abs(float(views.images[0, 5, 5, 1]) - (100 / 65535 * a + 1 - a)) < 1e-7


def test_the_problem_names_the_files_it_reads(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "scene"
    dataset(folder)
    config = load_config(data=str(folder), train_views=1, test_views=1, image_size=12)
    problem = NeuralRadiance.__new__(NeuralRadiance)   # input_files reads the config only
    problem.config = config
    assert problem.input_files() == [folder / "transforms_train.json", folder / "train" / "r_0.png",
                                     folder / "transforms_test.json", folder / "test" / "r_0.png"]
    problem.config = load_config()
    assert problem.input_files() == []
