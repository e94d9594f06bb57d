"""neural_radiance on the host: the cameras' convention, the built-in scene's exact renderer, the NeRF-synthetic
loader on a small fake dataset written here, SSIM's settings and the config's one-line errors. No device."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest
from PIL import Image

from sopt.config.schema import ConfigError
from problems.neural_radiance import load_config
from problems.neural_radiance.cameras import Cameras, look_at, pixel_rays, sphere_poses
from problems.neural_radiance.nerf_synthetic import load_split
from problems.neural_radiance.scene import AMBIENT, LIGHT, SHAPES, Box, Sphere, builtin_cameras, render, trace
from problems.neural_radiance.ssim import ssim


def test_pixel_rays_follow_the_nerf_synthetic_convention():
    # identity pose: the camera at the origin looks along -z, +y up; pixel (0, 0) is the top left
    cams = Cameras(np.eye(4)[None], 4, 2, 2 * math.atan(2.0))   # focal = W / (2 tan(a/2)) = 1
    assert cams.focal == pytest.approx(1.0)
    origins, dirs = pixel_rays(cams, 0)
    raw = np.array([(0.5 - 2.0, -(0.5 - 1.0), -1.0), (3.5 - 2.0, -(1.5 - 1.0), -1.0)])
    np.testing.assert_allclose(dirs[[0, 7]], raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-12)
    np.testing.assert_array_equal(origins, 0.0)
    # a look_at camera sees its target at the image centre, with the world's +z up in the picture
    pose = look_at(np.array([3.0, -1.0, 2.0]), np.array([0.2, 0.1, -0.3]))
    centre = pose[:3, :3] @ np.array([0.0, 0.0, -1.0])
    towards = np.array([0.2, 0.1, -0.3]) - np.array([3.0, -1.0, 2.0])
    np.testing.assert_allclose(centre, towards / np.linalg.norm(towards), atol=1e-12)
    assert (pose[:3, :3] @ np.array([0.0, 1.0, 0.0]))[2] > 0.0
    poses = sphere_poses(5, 3.2, seed=1)
    np.testing.assert_allclose(np.linalg.norm(poses[:, :3, 3], axis=1), 3.2)
    np.testing.assert_allclose(np.einsum("nij,nkj->nik", poses[:, :3, :3], poses[:, :3, :3]), np.eye(3)[None].repeat(5, 0),
                               atol=1e-12)


def test_the_scene_renderer_is_exact_ray_intersection():
    sphere = Sphere((0.1, -0.2, 0.3), 0.4, (0.8, 0.5, 0.2))
    origin = np.array([[0.1, -0.2, 3.0]])
    down = np.array([[0.0, 0.0, -1.0]])
    colour, hit, depth = trace(origin, down, (sphere,))
    assert hit[0] and depth[0] == pytest.approx(3.0 - 0.3 - 0.4)
    # the top of the sphere faces +z: shade = ambient + (1 - ambient) * l_z
    np.testing.assert_allclose(colour[0], np.array(sphere.albedo) * (AMBIENT + (1 - AMBIENT) * LIGHT[2]), rtol=1e-12)
    box = Box((0.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.1, 0.2, 0.3), (0.9, 0.8, 0.7), checker=0.25)
    _, hit, depth = trace(np.array([[0.1, 0.1, -4.0], [5.0, 5.0, 5.0]]), np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]),
                          (box,))
    assert hit.tolist() == [True, False] and depth[0] == pytest.approx(3.5) and math.isinf(depth[1])
    # every hit pixel of a rendered view lies on some shape's surface at its depth; misses show the background
    _, test = builtin_cameras(2, 1, 24, seed=0)
    images, depths = render(test, (0.0, 0.0, 0.0))
    o, d = pixel_rays(test, 0)
    t = depths[0].reshape(-1).astype(np.float64)
    hits = np.isfinite(t)
    assert 0.2 < hits.mean() < 0.9
    assert np.all(images[0].reshape(-1, 3)[~hits] == 0.0)
    p = o[hits] + t[hits, None] * d[hits]
    distance = np.full(len(p), np.inf)
    for s in SHAPES:
        if isinstance(s, Sphere):
            gap = np.abs(np.linalg.norm(p - s.centre, axis=1) - s.radius)
        else:
            q = np.abs(p - s.centre) - s.half
            gap = np.where(np.all(q <= 1e-4, axis=1), np.abs(q.max(axis=1)), np.inf)
        distance = np.minimum(distance, gap)
    assert distance.max() < 1e-4   # float32 depths of distances about 3



def test_supersampled_pixels_average_the_rays_over_their_area():
    """render(supersample=n) against the brute-force mean of n x n sub-pixel rays at every pixel: equal on the
    pixels an edge may cross (the border and mixed neighbourhoods), within 0.01 elsewhere (smooth shading at the
    centre ray); n = 1 is the centre rays."""
    _, test = builtin_cameras(2, 1, 16, seed=0)
    background = np.array([1.0, 1.0, 1.0])
    centre, centre_depth = render(test, tuple(background))
    o, d = pixel_rays(test, 0)
    colour, hit, depth = trace(o, d)
    np.testing.assert_allclose(centre[0].reshape(-1, 3), np.where(hit[:, None], colour, background), atol=1e-7)
    n = 4
    images, depths = render(test, tuple(background), supersample=n)
    np.testing.assert_array_equal(depths, centre_depth)                  # depth stays the centre ray's
    total = np.zeros((16 * 16, 3))
    for a in range(n):
        for b in range(n):
            so, sd = pixel_rays(test, 0, ((b + 0.5) / n, (a + 0.5) / n))
            sub, sub_hit, _ = trace(so, sd)
            total += np.where(sub_hit[:, None], sub, background)
    brute = (total / n**2).reshape(16, 16, 3)
    gap = np.abs(images[0] - brute).max(axis=2)
    assert gap.max() < 0.01
    mixed = np.abs(brute - centre[0]).max(axis=2) > 0.05                 # pixels where aliasing shows
    assert mixed.sum() >= 10
    np.testing.assert_allclose(images[0][mixed], brute[mixed], atol=1e-6)
    with pytest.raises(ValueError, match="supersample"):
        render(test, tuple(background), supersample=0)

def _fake_dataset(folder: pathlib.Path) -> None:
    """Two training frames and one test frame of 8 x 6 RGBA pixels; pixel (0, 0) half transparent red."""
    for split, count in (("train", 2), ("test", 1)):
        (folder / split).mkdir(parents=True)
        frames = []
        for i in range(count):
            rgba = np.zeros((6, 8, 4), np.uint8)
            rgba[..., 1] = 40 * (i + 1)
            rgba[..., 3] = 255
            rgba[0, 0] = (255, 0, 0, 128)
            Image.fromarray(rgba, "RGBA").save(folder / split / f"r_{i}.png")
            pose = np.eye(4)
            pose[:3, 3] = (0.0, 0.0, 4.0 + i)
            frames.append({"file_path": f"./{split}/r_{i}", "rotation": 0.1, "transform_matrix": pose.tolist()})
        (folder / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": 0.5, "frames": frames}))


def test_the_loader_reads_the_nerf_synthetic_layout(tmp_path: pathlib.Path):
    _fake_dataset(tmp_path)
    train = load_split(tmp_path, "train", (1.0, 1.0, 1.0), max_side=8)
    assert train.images.shape == (2, 6, 8, 3) and train.cameras.camera_angle_x == 0.5
    assert train.cameras.c2w[1, 2, 3] == 5.0
    a = 128 / 255
    np.testing.assert_allclose(train.images[0, 0, 0], [a + (1 - a), 1 - a, 1 - a], atol=1e-6)   # on white
    np.testing.assert_allclose(train.images[1, 3, 3], [0.0, 80 / 255, 0.0], atol=1e-6)
    black = load_split(tmp_path, "test", (0.0, 0.0, 0.0), max_side=4)   # downscaled 2x by area averaging
    assert black.images.shape == (1, 3, 4, 3) and black.cameras.width == 4
    np.testing.assert_allclose(black.images[0, 0, 0], [a / 4, 3 * 40 / 255 / 4, 0.0], atol=1e-6)
    # the problem's config accepts the folder; a missing frame is named
    assert load_config(data=str(tmp_path)).data == str(tmp_path.resolve())
    (tmp_path / "train" / "r_1.png").unlink()
    with pytest.raises(ValueError, match=r"transforms_train.json' frames\[1\]: the frame .*r_1.png' does not exist"):
        load_split(tmp_path, "train", (1.0, 1.0, 1.0), max_side=8)
    (tmp_path / "transforms_test.json").write_text("{\"frames\": []}")
    with pytest.raises(ValueError, match="non-empty 'frames' list"):
        load_split(tmp_path, "test", (1.0, 1.0, 1.0), max_side=8)


def test_ssim_uses_the_papers_gaussian_window_statistics():
    # constant images: SSIM = (2 a b + C1) / (a^2 + b^2 + C1) (no structure term)
    a, b, c1 = 0.3, 0.6, 0.01 ** 2
    value = ssim(np.full((16, 16, 3), a), np.full((16, 16, 3), b))
    assert value == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), rel=1e-12)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (20, 20, 3))
    assert ssim(x, x) == pytest.approx(1.0)
    assert 0.5 < ssim(x, np.clip(x + rng.normal(0, 0.1, x.shape), 0, 1)) < 0.99
    assert ssim(x, 1.0 - x) < -0.9   # inverted structure: covariance -var


def test_config_errors_name_the_key(tmp_path: pathlib.Path):
    with pytest.raises(ConfigError, match="network.output_activation = 'Sigmoid': must be 'None'"):
        load_config(network={"output_activation": "Sigmoid"})
    with pytest.raises(ConfigError, match="data = .*does not exist; expected a NeRF-synthetic folder"):
        load_config(data=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="data = .*has no transforms_train.json"):
        load_config(data=str(tmp_path))
    with pytest.raises(ConfigError, match="background = 'grey'"):
        load_config(background="grey")


def test_a_tensor_core_mlp_fuses_a_frequency_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    from sopt.nn import Sequential
    from problems.neural_radiance.field import build_model
    from tests.problems.tensor_core_stand_in import stand_in_tensor_core_mlp
    calls = stand_in_tensor_core_mlp(monkeypatch)
    config = load_config(network={"otype": "TensorCoreMLP", "n_neurons": 16},
                         encoding={"otype": "Frequency", "n_frequencies": 6})
    model = build_model(config)
    assert not isinstance(model, Sequential)
    assert [(c["in_features"], c["out_features"], c["encoding"]) for c in calls] == [(3, 4, config.encoding)]
