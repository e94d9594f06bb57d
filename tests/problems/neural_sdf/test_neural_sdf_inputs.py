"""neural_sdf's inputs through ``sopt run``: without trimesh one line saying what to install; a PLY naming a texture
outside its folder loads without reading it or printing a traceback; damaged OBJ/STL/OFF/PLY files are one line
naming the file and its format; an open mesh is refused (its sign is undefined) unless ``unsigned = true``, which
trains the unsigned distance and reports ``distance_error``, not an IoU. Each refusal: exit 2, nothing written."""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest

from problems.neural_sdf import load_config
from problems.neural_sdf.default_mesh import DEFAULT_MESH
from problems.neural_sdf.mesh import open_edges, read_mesh
from problems.neural_sdf.problem import NeuralSDF
from tests.experiments.test_cli import listing
from tests.problems.runs import run_cli

trimesh = pytest.importorskip("trimesh", reason="the mesh extra (pip install 'sopt[mesh]') reads meshes")

SQUARE = "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nf 1 2 3\nf 1 3 4\n"
SMALL = {"steps": 60, "log_every": 30, "pool_size": 1 << 13, "batch_size": 1024, "eval_resolution": 16,
         "chamfer_points": 500, "image_size": 16}
OPEN = ("the mesh is not closed ({} edges border one triangle only), so the sign of its distance (inside or "
        "outside) is undefined; set unsigned = true to fit the unsigned distance, or close the mesh")


def refused(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture, *words: str) -> str:
    """``sopt run --problem neural_sdf WORDS --out tmp/out``: asserts exit 2, one stderr line, nothing on stdout and
    nothing written; returns the line."""
    before = listing(tmp_path)
    code, stdout, stderr = run_cli(["run", "--problem", "neural_sdf", *words, "--out", str(tmp_path / "out"),
                                    "--no-progress"], capsys)
    assert code == 2 and stdout == "", (stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert listing(tmp_path) == before and not (tmp_path / "out").exists()
    return lines[0]


def test_without_trimesh_the_problem_is_one_line_saying_what_to_install(tmp_path: pathlib.Path,
                                                                       capsys: pytest.CaptureFixture,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trimesh", None)   # import trimesh now raises ImportError
    assert refused(tmp_path, capsys) == "error: neural_sdf needs trimesh (pip install 'sopt[mesh]')"
    (tmp_path / "box.obj").write_text(SQUARE)   # a named mesh, too: the same line, not an ImportError
    line = refused(tmp_path, capsys, f'mesh="{tmp_path / "box.obj"}"', "unsigned=true")
    assert line == "error: neural_sdf needs trimesh (pip install 'sopt[mesh]')"
    monkeypatch.setitem(sys.modules, "skimage", None)
    assert refused(tmp_path, capsys) == "error: neural_sdf needs trimesh and scikit-image (pip install 'sopt[mesh]')"


def test_a_ply_naming_a_texture_elsewhere_reads_nothing_else(tmp_path: pathlib.Path, capfd: pytest.CaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    box = trimesh.creation.box()
    text = box.export(file_type="ply", encoding="ascii").decode()
    path = tmp_path / "box.ply"
    path.write_text(text.replace("format ascii 1.0\n", "format ascii 1.0\ncomment TextureFile /etc/shadow\n", 1))
    opened = []
    real_open = open

    def watch(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)
    monkeypatch.setattr("builtins.open", watch)
    import os
    real_stat = os.stat
    looked = []
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: (looked.append(str(p)), real_stat(p, *a, **k))[1])
    mesh = read_mesh(path)
    monkeypatch.undo()
    assert len(mesh.faces) == 12 and open_edges(mesh) == 0
    assert not [p for p in opened + looked if "shadow" in p]
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""   # no traceback logged


GARBAGE = bytes(range(256)) * 2
DAMAGED = [
    ("bad.obj", GARBAGE, "is not an OBJ file: it holds binary data (a NUL byte at offset 0)"),
    ("bad.off", GARBAGE, "is not an OFF file: it holds binary data (a NUL byte at offset 0)"),
    ("bad.stl", GARBAGE, "is not an STL file: it holds binary data (a NUL byte at offset 0); a binary STL of N "
                         "triangles holds 84 + 50 N bytes as its header's N says, this file holds 512"),
    ("bad.ply", GARBAGE, "is not a PLY file trimesh can read: ValueError: Not a ply file!"),
    ("latin.obj", b"# caf\xe9\nhello\n", "holds no triangles read as an OBJ file"),
    ("words.stl", b"solid nothing here\nendsolid\n", "holds no triangles read as an STL file"),
    ("words.off", b"OFF\n3 1\n0 0\n", "is not an OFF file trimesh can read: ValueError:"),
    ("index.obj", b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 9\n",
     "is not an OBJ file trimesh can read: IndexError: index 8 is out of bounds for axis 0 with size 3"),
    ("index.ply", b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
                  b"element face 1\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n1 0 0\n0 1 0\n3 0 1 7\n",
     ": a triangle names vertex 7; the file has vertices 0 to 2"),
]


@pytest.mark.parametrize("name,data,expected", DAMAGED, ids=[d[0] for d in DAMAGED])
def test_a_damaged_mesh_is_one_line_naming_file_and_format(name: str, data: bytes, expected: str,
                                                           tmp_path: pathlib.Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    line = refused(tmp_path, capsys, f'mesh="{path}"')
    assert line.startswith("error: config mesh = '") and f": '{path}' {expected}".replace("' :", "':") in line, line
    assert "charset_normalizer" not in line


@pytest.mark.parametrize("name,text,edges", [
    ("triangle.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n", 3),
    ("square.obj", SQUARE, 4),
])
def test_an_open_mesh_is_refused_naming_the_unsigned_key(name: str, text: str, edges: int, tmp_path: pathlib.Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / name
    path.write_text(text)
    line = refused(tmp_path, capsys, f'mesh="{path}"')
    assert line.startswith("error: config mesh = '") and f": {OPEN.format(edges)} (" in line, line
    assert load_config(mesh=str(path), unsigned=True).unsigned
    # an STL stores each triangle's own corners: a closed box is closed once coincident corners merge
    stl = tmp_path / "box.stl"
    stl.write_bytes(trimesh.creation.box().export(file_type="stl"))
    assert open_edges(read_mesh(stl)) == 0 and load_config(mesh=str(stl)).mesh == str(stl)
    line = refused(tmp_path, capsys, f'mesh="{path}"', "unsigned=true", "target_iou=0.9")
    assert "config target_iou = 0.9: an unsigned distance has no inside, so no IoU is measured" in line


def test_an_open_mesh_trains_its_unsigned_distance(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    """A flat square, unsigned: the truth is |distance| (never negative), each record has distance_error (falling:
    an untrained field near 0 is off by about the mean distance), no IoU; slices and curves are written."""
    path = tmp_path / "square.obj"
    path.write_text(SQUARE)
    config = tmp_path / "c.json"
    config.write_text(json.dumps({**SMALL, "mesh": str(path), "unsigned": True}))
    out = tmp_path / "run"
    code, stdout, stderr = run_cli(["run", "--problem", "neural_sdf", str(config), "--out", str(out),
                                    "--no-progress"], capsys)
    assert code == 0, stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "distance_error" in r]
    assert [r["step"] for r in logged] == [30, 60] and not any("iou" in r for r in records)
    final = json.loads((out / "summary.json").read_text())["metrics"]
    assert "iou" not in final and "chamfer" not in final
    # the grid's mean distance to the square is about 0.3 box units; trained, the error is a small part of it
    assert final["distance_error"] < 0.05
    assert f"final mean |distance error|: {final['distance_error']:.4g}" in stdout
    assert (out / "slices.png").is_file() and (out / "curves.png").is_file() and not (out / "mesh.ply").exists()


def test_the_truth_of_an_unsigned_mesh_is_never_negative(tmp_path: pathlib.Path) -> None:
    from problems.neural_sdf.mesh import to_unit_box
    from problems.neural_sdf.truth import MeshTruth
    box = to_unit_box(trimesh.creation.box(), 0.2)
    points = np.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.95]], np.float32)   # the centre (inside), a point outside
    signed = MeshTruth(box.triangles).signed_distance(points).sdf
    unsigned = MeshTruth(box.triangles, unsigned=True).signed_distance(points).sdf
    np.testing.assert_allclose(signed, [-0.3, 0.15], atol=1e-6)
    np.testing.assert_allclose(unsigned, [0.3, 0.15], atol=1e-6)


def test_inward_faces_are_turned_outward(tmp_path: pathlib.Path) -> None:
    """A closed box with every face wound clockwise: its inside is found all the same (winding +1 there)."""
    from problems.neural_sdf.mesh import to_unit_box
    box = trimesh.creation.box()
    inverted = trimesh.Trimesh(box.vertices, box.faces[:, ::-1], process=False)
    assert inverted.volume < 0
    scaled = to_unit_box(inverted, 0.2)
    assert trimesh.Trimesh(scaled.vertices, scaled.faces, process=False).volume > 0


def test_the_problem_names_its_mesh_file(tmp_path: pathlib.Path) -> None:
    problem = NeuralSDF.__new__(NeuralSDF)   # input_files reads the config only
    problem.config = load_config()
    assert problem.input_files() == [DEFAULT_MESH]
    path = tmp_path / "box.obj"
    path.write_text(trimesh.creation.box().export(file_type="obj"))
    problem.config = load_config(mesh=str(path))
    assert problem.input_files() == [path]
