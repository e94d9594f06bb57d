"""neural_field_image on the Problem protocol: its schema's one-line errors (before any GPU work), trainer_parts and
finish (the pictures, curves drawn with matplotlib, the final metrics)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
from PIL import Image

import sopt
from sopt.config.schema import ConfigError, defaults, merge, validate
from sopt.data import generated_image, psnr
from sopt.experiments.problem import Problem
from problems.neural_field_image import NeuralFieldImage, NeuralFieldImageConfig, load_config
from sopt.experiments.cli import main as sopt_main
from problems.neural_field_image.plot import plot_curves
from sopt.train import EarlyStopping, Evaluate, Trainer



def main(argv: list[str]) -> int:
    """``python -m problems.neural_field_image ARGV``: ``sopt run --problem neural_field_image ARGV``."""
    return sopt_main(["run", "--problem", "neural_field_image", *argv])


# the layer sizes of tests/train/test_fit_image.py: its kernels are compiled once
SMALL = {"image_size": 32, "encoding": {"n_frequencies": 4}, "network": {"n_neurons": 32}, "batch_size": 512}

MALFORMED = [   # (config file text or None, extra overrides, the one line expected on stderr)
    ('{"optimizer": {"learning_rate": "0.01"}}', [],
     "error: config optimizer.learning_rate = '0.01': must be a valid number"),
    ('{"network": {"n_neurons": 0}}', [], "error: config network.n_neurons = 0: must be greater than or equal to 1"),
    ('{"schedule": {"warmup_steps": "ten"}}', [], "error: config schedule.warmup_steps = 'ten': must be a valid integer"),
    ('{"optimizer": {"otype": "SGD", "momentum": 0.9, "nesterov": "no"}}', [],
     "error: config optimizer.nesterov = 'no': must be a valid boolean"),
    ('{"steps": 10, "steps": 20}', [], "error: config steps: duplicate key in file "),
    ('{"network": {"n_neurons": 32, "n_neurons": 16}}', [], "error: config network.n_neurons: duplicate key in file "),
    ('{"image_size": 30000}', [], "error: config image_size = 30000: must be less than or equal to 4096"),
    ('{"batch_size": 1099511627776}', [],
     "error: config batch_size = 1099511627776: must be less than or equal to 16777216"),
    (None, ['image=""'], "error: config image = '': string should have at least 1 character"),
    ('{"image": ""}', [], "error: config image = '': string should have at least 1 character"),
    ('{"optimizer": {"otype": "Adamm"}}', [], "error: config optimizer.otype: otype 'Adamm'; did you mean 'Adam'?"),
    ('{"encoding": {"n_frequncies": 4}}', [],
     "error: config encoding.n_frequncies = 4: unknown key; did you mean 'n_frequencies'?"),
    ('{"target_psnr": -3}', [], "error: config target_psnr = -3: must be greater than 0"),
    ('{"network": {"otype": "FullyFusedMLP", "n_neurons": 30}}', [],
     "error: config network.n_neurons = 30: must be a multiple of 4"),
    ('{"network": {"otype": "FullyFusedMLP"}, "encoding": {"n_frequencies": 20}}', [],
     "error: config encoding.n_frequencies = 20: the encoding gives 80 features; FullyFusedMLP takes at most 64"),
    ('{"encoding": {"otype": "HashGrid", "n_levels": 32, "n_features_per_level": 8, "log2_hashmap_size": 26}}', [],
     "error: config encoding.log2_hashmap_size = 26: the table would hold 12526987264 floats, more than 1073741824"),
    ('{"encoding": {"otype": "HashGrid", "gradient_precision": "float16"}, "deterministic": true}', [],
     "error: config encoding.gradient_precision = 'float16': float16 sums are not deterministic; use float32 with "
     "deterministic=true"),
    ('{"encoding": {"otype": "HashGrid", "gradient_precision": "float16", "n_features_per_level": 3}}', [],
     "error: config encoding.n_features_per_level = 3: gradient_precision float16 sums pairs of features: it must "
     "be even"),
    ('{"encoding": {"otype": "HashGrid", "gradient_precision": "half"}}', [],
     "error: config encoding.gradient_precision = 'half': "),
    ('{"image_size": 4096, "network": {"n_neurons": 512}}', [],
     "error: config image_size = 4096: evaluating the whole image needs 4096^2 pixels x 512 floats, more than "
     "2147483647"),
    ('{"batch_size": 16777216, "network": {"n_neurons": 256}}', [],
     "error: config batch_size = 16777216: a batch needs 16777216 pixels x 256 floats, more than 2147483647"),
]


@pytest.mark.parametrize("text,argv,line", MALFORMED, ids=[f"bad{i}" for i in range(len(MALFORMED))])
def test_a_malformed_input_is_one_line_naming_the_key_before_any_gpu_work(text: str | None, argv: list[str], line: str,
                                                                        tmp_path: pathlib.Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture) -> None:
    def no_gpu() -> None:
        raise AssertionError("the device was asked for before the config was checked")

    monkeypatch.setattr(sopt, "get_device", no_gpu)
    if text is not None:
        (tmp_path / "config.json").write_text(text, encoding="utf-8")
        argv = [str(tmp_path / "config.json"), *argv]
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(line), err
    assert not out.exists()


def test_a_bad_out_folder_is_one_line(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    file = tmp_path / "file.txt"
    file.write_text("x")
    for out, line in (("", "error: --out '' is empty; name a new folder"),
                      (str(file / "run"), f"error: --out {str(file / 'run')!r}: {str(file)!r} is a file")):
        assert main(["--out", out, "--no-progress"]) == 2
        assert capsys.readouterr().err.startswith(line)


def test_the_default_config_validates_and_a_new_otype_replaces_its_section() -> None:
    data = defaults(NeuralFieldImageConfig)
    assert data["problem"] == "neural_field_image" and list(data)[0] == "problem"
    assert validate(NeuralFieldImageConfig, data) == NeuralFieldImageConfig()
    assert data["encoding"] == {"otype": "Frequency", "n_frequencies": 6}
    assert data["optimizer"]["learning_rate"] == 0.02 and data["schedule"]["warmup_steps"] == 20
    grid = validate(NeuralFieldImageConfig, merge(data, {"encoding": {"otype": "HashGrid", "n_levels": 4}}))
    assert grid.encoding.model_dump() == {"otype": "HashGrid", "n_levels": 4, "n_features_per_level": 2,
                                          "log2_hashmap_size": 19, "base_resolution": 16, "per_level_scale": 2.0,
                                          "gradient_precision": "float32"}
    sgd = load_config(optimizer={"otype": "SGD"})
    assert sgd.optimizer.learning_rate == 0.01   # SGD's default: Adam's keys were not carried over


def test_the_problem_trains_through_its_trainer_parts_and_finish_writes_its_pictures(tmp_path: pathlib.Path) -> None:
    config = load_config(**SMALL, steps=60, eval_every=20, log_every=10)
    problem = NeuralFieldImage(config)
    assert isinstance(problem, Problem) and problem.schema is NeuralFieldImageConfig
    parts = problem.trainer_parts()
    assert set(parts) == {"model", "loss_fn", "sampler", "optimizer", "scheduler", "parameters", "callbacks"}
    assert list(parts["parameters"]) == [name for name, _ in problem.model.named_parameters()]
    assert [type(cb) for cb in parts["callbacks"]] == [Evaluate]
    assert parts["optimizer"].to_config() == config.optimizer and parts["scheduler"].to_config() == config.schedule
    result = Trainer(**parts, log_every=config.log_every, progress=False).fit(config.steps)
    history = result.history
    assert [r["step"] for r in history if "psnr" in r] == [20, 40, 60]
    final = problem.finish(tmp_path, history)
    assert set(final) == {"psnr", "loss"} and final["loss"] == history[-1]["loss"]
    assert final["psnr"] == pytest.approx(history[-1]["psnr"], abs=1e-6)
    # 60 steps of this net: ~21 dB; the mean colour gives ~14 dB (see tests/train/test_fit_image.py)
    assert final["psnr"] > 17.0
    assert problem.summary() == [f"final PSNR: {final['psnr']:.2f} dB"]
    with Image.open(tmp_path / "reconstruction.png") as img:
        saved = np.asarray(img.convert("RGB"), np.float64) / 255.0
    assert saved.shape == (32, 32, 3)
    np.testing.assert_allclose(saved, problem.reconstruction, atol=0.5 / 255 + 1e-6)
    assert psnr(saved.reshape(-1, 3), generated_image(32).reshape(-1, 3)) == pytest.approx(final["psnr"], abs=0.2)
    with Image.open(tmp_path / "target.png") as img:
        target = np.asarray(img.convert("RGB"), np.float64) / 255.0
    np.testing.assert_allclose(target, generated_image(32), atol=0.5 / 255 + 1e-6)
    _check_curves(tmp_path / "curves.png", panels_with_lines=2)


def _check_curves(path: pathlib.Path, panels_with_lines: int) -> None:
    """curves.png: 840 x 300, two panels; the line colour (matplotlib's first, #1f77b4) in as many panels as have
    data."""
    with Image.open(path) as img:
        assert img.size == (840, 300)
        rgb = np.asarray(img.convert("RGB")).astype(int)
    line = (np.abs(rgb - np.array([31, 119, 180])).sum(axis=2) < 40)
    halves = [line[:, :420].sum(), line[:, 420:].sum()]
    assert sum(h > 50 for h in halves) == panels_with_lines, halves


def test_the_curves_without_data_say_so(tmp_path: pathlib.Path) -> None:
    plot_curves([{"step": 10, "loss": 0.5}, {"step": 20, "loss": 0.25}], tmp_path / "loss_only.png")
    _check_curves(tmp_path / "loss_only.png", panels_with_lines=1)
    plot_curves([], tmp_path / "empty.png")
    _check_curves(tmp_path / "empty.png", panels_with_lines=0)


def test_a_target_psnr_adds_early_stopping() -> None:
    problem = NeuralFieldImage(load_config(**SMALL, steps=10, target_psnr=30.0))
    callbacks = problem.trainer_parts()["callbacks"]
    assert [type(cb) for cb in callbacks] == [Evaluate, EarlyStopping]


def test_an_image_file_is_fitted_at_image_size(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    pixels = (rng.uniform(0, 1, (48, 64, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(tmp_path / "photo.png")
    config = load_config(**{**SMALL, "image": str(tmp_path / "photo.png")})
    problem = NeuralFieldImage(config)
    assert problem.image.shape == (24, 32, 3)   # the longer side downscaled to image_size
    (tmp_path / "folder.png").mkdir()
    with pytest.raises(ConfigError, match=r"^config image = '.*: value error, is a folder; expected a PNG/JPEG/... file"):
        load_config(image=str(tmp_path / "folder.png"))


def test_fit_image_takes_a_config_dict(tmp_path: pathlib.Path) -> None:
    from problems.neural_field_image import fit_image

    with pytest.raises(ConfigError, match=r"^config network.n_neurons = 0: must be greater than or equal to 1"):
        fit_image(generated_image(32), {"network": {"n_neurons": 0}})
    result = fit_image(generated_image(32), {**SMALL, "steps": 5, "eval_every": 5, "log_every": 5}, progress=False)
    assert result.train.steps == 5 and result.psnr == result.train.metrics["psnr"]
    used: dict[str, Any] = result.problem.config.model_dump(mode="json")
    assert json.loads(json.dumps(used))["network"]["n_neurons"] == 32


@pytest.mark.parametrize("encoding", [{"otype": "Frequency", "n_frequencies": 4}, {"otype": "HashGrid", "n_levels": 8},
                                      {"otype": "Identity"}])
def test_a_tensor_core_mlp_fuses_frequency_and_runs_after_other_encodings(encoding: dict,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from problems.neural_field_image.build import build_model
    from tests.problems.tensor_core_stand_in import stand_in_tensor_core_mlp
    calls = stand_in_tensor_core_mlp(monkeypatch)
    config = load_config(network={"otype": "TensorCoreMLP", "n_neurons": 32}, encoding=encoding, seed=7,
                         deterministic=True)
    model = build_model(config)
    want_in = {"Frequency": 2, "HashGrid": 16, "Identity": 2}[encoding["otype"]]
    fused = config.encoding if encoding["otype"] == "Frequency" else None
    assert calls == [{"in_features": want_in, "out_features": 3, "encoding": fused, "seed": 7, "deterministic": True}]
    if encoding["otype"] != "HashGrid":   # Frequency: fused into it; Identity y = x: no encoding module at all
        assert isinstance(model, sopt.nn.FullyFusedMLP)
    else:
        assert isinstance(model, sopt.nn.Sequential) and model[0].out_features == want_in
        assert type(model[0]).__name__ == {"Frequency": "FrequencyEncoding", "HashGrid": "HashGridEncoding"}[
            encoding["otype"]]
