"""neural_sdf through ``sopt run``: a short run at small size reaches its IoU threshold with every metric in each
metrics record and in summary.json, and writes its mesh (in the input's coordinates), picture, slices and curves; a
user's OBJ is read and scaled into the box; malformed configs are one line naming the key, before any GPU work."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from PIL import Image

from sopt.config.schema import ConfigError
from problems.neural_sdf import NeuralSDF, load_config
from problems.neural_sdf.mesh import read_mesh, to_unit_box
from tests.problems.runs import assert_bad_config_refused, run_problem

trimesh = pytest.importorskip("trimesh", reason="the mesh extra (pip install 'sopt[mesh]') reads meshes")

SMALL = {"steps": 80, "log_every": 40, "pool_size": 1 << 14, "batch_size": 2048, "eval_resolution": 24,
         "chamfer_points": 2000, "image_size": 24}
METRICS = ("iou", "chamfer", "normal_consistency")


def test_a_short_run_reaches_its_iou_and_writes_its_files(tmp_path: pathlib.Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "small.json"
    config.write_text(json.dumps(SMALL), encoding="utf-8")
    out = tmp_path / "run"
    code, stdout, stderr = run_problem(NeuralSDF, [str(config), "--out", str(out), "--no-progress"], capsys)
    assert code == 0, stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "loss" in r]
    assert [r["step"] for r in logged] == [40, 80]
    for r in logged:
        assert all(isinstance(r[k], float) for k in METRICS), r
    summary = json.loads((out / "summary.json").read_text())
    final = summary["metrics"]
    assert summary["status"] == "finished" and set(METRICS) <= set(final)
    # 80 steps at this size: IoU ~0.95 on the 24^3 grid (an untrained field's is 0: no inside)
    assert final["iou"] > 0.9
    assert final["chamfer"] < 0.02 and final["normal_consistency"] > 0.9
    assert f"final IoU: {final['iou']:.4f}" in stdout
    extracted = trimesh.load(out / "mesh.ply", force="mesh")
    source = read_mesh(None)
    # in the input file's coordinates: the same bounding box within a grid cell of the 24^3 grid
    cell = np.ptp(source.vertices, axis=0).max() / 0.8 / 23
    np.testing.assert_allclose(extracted.bounds, source.bounds, atol=1.5 * cell)
    with Image.open(out / "render.png") as img:
        render = np.asarray(img.convert("RGB"))
    assert render.shape == (24, 24, 3) and (render < 250).any(axis=2).mean() > 0.1   # the surface, not all background
    for name, size in (("slices.png", (1050, 960)), ("curves.png", (840, 300))):
        with Image.open(out / name) as img:
            assert img.size == size


def test_a_user_obj_is_read_and_scaled_into_the_box(tmp_path: pathlib.Path) -> None:
    box = trimesh.creation.box(extents=(2.0, 1.0, 0.5))
    box.apply_translation((10.0, -3.0, 1.0))
    path = tmp_path / "box.obj"
    path.write_text(box.export(file_type="obj"))
    config = load_config(mesh=str(path), margin=0.25)
    assert config.mesh == str(path.resolve())
    scaled = to_unit_box(read_mesh(config.mesh), config.margin)
    np.testing.assert_allclose(scaled.vertices.min(0), [0.25, 0.375, 0.4375], atol=1e-6)
    np.testing.assert_allclose(scaled.vertices.max(0), [0.75, 0.625, 0.5625], atol=1e-6)
    assert scaled.scale == pytest.approx(0.25)


@pytest.mark.parametrize("override,expected", [
    ({"mesh": "no_such_mesh.ply"}, "mesh = 'no_such_mesh.ply'"),
    ({"uniform_fraction": 0.7, "surface_fraction": 0.5}, "surface_fraction = 0.5: uniform_fraction + surface_fraction"),
    ({"near_sigma": 0}, "near_sigma = 0: "),
    ({"pool_size": 1 << 23}, "pool_size = 8388608: "),
    ({"network": {"n_neurons": 30}}, "network.n_neurons = 30: must be a multiple of 4"),
    ({"encoding": {"n_levels": 20, "n_features_per_level": 4}},
     "encoding.n_levels = 20: the encoding gives 80 features; FullyFusedMLP takes at most 64"),
])
def test_a_malformed_config_is_one_line_naming_the_key(override: dict, expected: str, tmp_path: pathlib.Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    assert_bad_config_refused(NeuralSDF, override, expected, tmp_path, capsys)


def test_a_file_that_is_no_mesh_is_refused_naming_it(tmp_path: pathlib.Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match=r"^config mesh = .*notes.txt.*suffix '.txt'; allowed: .obj, .ply"):
        load_config(mesh=str(tmp_path / "notes.txt"))
    (tmp_path / "empty.ply").write_bytes(b"ply\nformat ascii 1.0\nelement vertex 0\nend_header\n")
    with pytest.raises(ConfigError, match=r"^config mesh = .*empty.ply"):
        load_config(mesh=str(tmp_path / "empty.ply"))
    (tmp_path / "flat.obj").write_text("v 0 0 0\nv 1 0 0\nv 2 0 0\nf 1 2 3\n")
    with pytest.raises(ConfigError, match=r"^config mesh = .*flat.obj.*: its triangles have no area"):
        load_config(mesh=str(tmp_path / "flat.obj"))


@pytest.mark.parametrize("encoding, width", [({"otype": "HashGrid", "n_levels": 8}, 16)])
def test_a_tensor_core_mlp_runs_after_the_encoding_in_a_sequential(encoding: dict, width: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from sopt.nn import Sequential
    from problems.neural_sdf.build import build_model
    from tests.problems.tensor_core_stand_in import stand_in_tensor_core_mlp
    calls = stand_in_tensor_core_mlp(monkeypatch)
    model = build_model(load_config(network={"otype": "TensorCoreMLP", "n_neurons": 16}, encoding=encoding))
    assert isinstance(model, Sequential) and model[0].out_features == width
    assert [(c["in_features"], c["out_features"], c["encoding"]) for c in calls] == [(width, 1, None)]


def test_the_ground_truth_phases_say_their_size_before_they_run(tmp_path: pathlib.Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """The evaluation grid's ground truth (building the problem) and the training pool's (recorded into the first
    step) each print one line with points x triangles first; a later batch of the same pool prints nothing."""
    import sopt

    path = tmp_path / "cube.obj"
    path.write_text(trimesh.creation.box(extents=(1.0, 1.0, 1.0)).export(file_type="obj"))   # 12 triangles
    problem = NeuralSDF(load_config(mesh=str(path), eval_resolution=8, pool_size=64, batch_size=16,
                                    chamfer_points=100, image_size=16))
    err = capsys.readouterr().err
    assert ("sopt: neural_sdf: ground truth of the 8^3 evaluation grid: 512 points x 12 triangles (6.1e+03 "
            "point-triangle distances) ...\n") in err, err
    for step in (0, 1):
        encoder = sopt.runtime.device.create_command_encoder()
        problem.sampler.sample(step, encoder)
        sopt.runtime.device.submit(encoder)
    err = capsys.readouterr().err
    assert err.count("sopt: neural_sdf: ") == 1, err
    assert ("sopt: neural_sdf: ground truth of the training pool: 64 points x 12 triangles (7.7e+02 point-triangle "
            "distances), computed with the first step ...\n") in err, err
    assert np.all(np.isfinite(problem.sampler.sdf.to_numpy()))
