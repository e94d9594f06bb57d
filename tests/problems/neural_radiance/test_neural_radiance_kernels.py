"""neural_radiance's Slang kernels against numpy: ray generation, the compositing forward (float64 reference) and
its hand-written backward (central differences of that reference), the marcher's samples, the occupancy update."""

from __future__ import annotations

import math

import numpy as np
import pytest
import slangpy as spy

from sopt import Tape, nn
from sopt.runtime.device import get_device
from problems.neural_radiance.cameras import pixel_rays
from problems.neural_radiance.composite import Compositor
from problems.neural_radiance.march import RayMarcher
from problems.neural_radiance.occupancy import OccupancyGrid
from problems.neural_radiance.rays import CameraRays, TrainingRays
from problems.neural_radiance.scene import builtin_cameras, render
from problems.neural_radiance.views import Views


def tensor(a: np.ndarray) -> spy.Tensor:
    return spy.Tensor.from_numpy(get_device(), np.ascontiguousarray(a, np.float32))


def test_rays_match_numpy_and_training_rays_carry_their_pixels_colour():
    train, _ = builtin_cameras(3, 1, 12, seed=0)
    rays = CameraRays(train).rays(2, 7, 100).to_numpy().reshape(100, 6)
    o, d = pixel_rays(train, 2)
    np.testing.assert_allclose(rays[:, :3], o[7:107], atol=1e-6)
    np.testing.assert_allclose(rays[:, 3:], d[7:107], atol=1e-6)
    images, _ = render(train, (1.0, 1.0, 1.0))
    sampler = TrainingRays(Views(images, train), 64, seed=3, jitter=False)
    drawn, colours = (t.to_numpy().reshape(64, -1) for t in sampler.sample(5))
    every = np.concatenate([np.concatenate(pixel_rays(train, i), axis=1) for i in range(3)])
    match = np.argmin(np.abs(every[None] - drawn[:, None]).sum(axis=2), axis=1)   # the pixel each ray is
    np.testing.assert_allclose(every[match], drawn, atol=1e-5)
    np.testing.assert_array_equal(colours, images.reshape(-1, 3)[match])
    again = sampler.sample(5)[0].to_numpy().reshape(64, 6)
    np.testing.assert_array_equal(again, drawn)                       # a pure function of (seed, step)
    assert not np.array_equal(sampler.sample(6)[0].to_numpy().reshape(64, 6), drawn)


def test_jittered_training_rays_pass_through_a_random_point_of_their_pixel():
    train, _ = builtin_cameras(3, 1, 12, seed=0)
    images, _ = render(train, (1.0, 1.0, 1.0))
    sampler = TrainingRays(Views(images, train), 256, seed=3, jitter=True)
    drawn, colours = (t.to_numpy().reshape(256, -1).astype(np.float64) for t in sampler.sample(5))
    image = np.argmin(np.linalg.norm(drawn[:, None, :3] - train.c2w[None, :, :3, 3], axis=2), axis=1)
    np.testing.assert_allclose(drawn[:, :3], train.c2w[image, :3, 3], atol=1e-6)
    # back to the image plane: camera-space d = R^T d_world, x = cx + f d_x / -d_z, y = cy - f d_y / -d_z
    d = np.einsum("nji,nj->ni", train.c2w[image, :3, :3], drawn[:, 3:])
    x = 6.0 + train.focal * d[:, 0] / -d[:, 2]
    y = 6.0 - train.focal * d[:, 1] / -d[:, 2]
    px, py = np.floor(x).astype(int), np.floor(y).astype(int)
    assert px.min() >= 0 and px.max() < 12 and py.min() >= 0 and py.max() < 12
    np.testing.assert_array_equal(colours, images[image, py, px])      # the colour of the pixel the ray crosses
    fx, fy = x - px, y - py                                            # uniform in [0, 1): mean 1/2, sd 0.29
    assert abs(fx.mean() - 0.5) < 0.06 and abs(fy.mean() - 0.5) < 0.06
    assert 0.24 < fx.std() < 0.34 and 0.24 < fy.std() < 0.34
    np.testing.assert_array_equal(sampler.sample(5)[0].to_numpy().reshape(256, 6), drawn.astype(np.float32))


def composite_reference(raw: np.ndarray, deltas: np.ndarray, samples: int, background: np.ndarray,
                        activation: str) -> np.ndarray:
    """composite.slang's forward in float64: (R S, 4) raw, (R S,) deltas -> (R, 3)."""
    raw, deltas = raw.astype(np.float64), deltas.astype(np.float64)   # float32 scalars would keep products float32
    out = np.zeros((raw.shape[0] // samples, 3))
    for r in range(len(out)):
        transmittance, colour = 1.0, np.zeros(3)
        for j in range(r * samples, (r + 1) * samples):
            if deltas[j] == 0.0:
                break
            x = raw[j, 0]
            sigma = math.exp(min(x, 15.0)) if activation == "exp" else math.log1p(math.exp(x))
            e = math.exp(-sigma * deltas[j])
            colour += transmittance * (1.0 - e) / (1.0 + np.exp(-raw[j, 1:]))
            transmittance *= e
            if transmittance < 1e-4:
                break
        out[r] = colour + transmittance * background
    return out


@pytest.mark.parametrize("activation", ["exp", "softplus"])
def test_compositing_and_its_backward_match_a_float64_reference(activation: str):
    rays, samples = 6, 8
    rng = np.random.default_rng(1)
    raw = rng.normal(0.0, 1.0, (rays * samples, 4)).astype(np.float32)
    raw[4 * samples:5 * samples, 0] += 6.0                    # ray 4 turns opaque: early termination
    deltas = np.full(rays * samples, 0.3, np.float32)
    deltas[2 * samples + 5:3 * samples] = 0.0                 # ray 2: the marcher's padding after 5 samples
    deltas[5 * samples:] = 0.0                                # ray 5: no samples, the background
    background = np.array([1.0, 0.5, 0.0])
    g = rng.normal(0.0, 1.0, (rays, 3))
    raw_t = tensor(raw).with_grads(zero=True)
    tape = Tape()
    with tape:
        rgb, depth, opacity = Compositor(samples, activation, tuple(background))(
            raw_t, tensor(deltas[:, None]), tensor(np.arange(rays * samples, dtype=np.float32)[:, None]))
    tape.backward(grads={rgb: g.astype(np.float32)})
    tape.submit()
    expected = composite_reference(raw, deltas, samples, background, activation)
    np.testing.assert_allclose(rgb.to_numpy().reshape(rays, 3), expected, atol=2e-6)
    np.testing.assert_allclose(rgb.to_numpy().reshape(rays, 3)[5], background)
    assert opacity.to_numpy().reshape(-1)[4] > 0.9999 and opacity.to_numpy().reshape(-1)[5] == 0.0
    grad = raw_t.grad.to_numpy().reshape(rays * samples, 4)
    numeric = np.zeros_like(grad, np.float64)
    h = 1e-4
    for j in range(rays * samples):
        for k in range(4):
            up, down = raw.astype(np.float64), raw.astype(np.float64)
            up[j, k] += h
            down[j, k] -= h
            numeric[j, k] = np.sum((composite_reference(up, deltas, samples, background, activation) -
                                    composite_reference(down, deltas, samples, background, activation)) * g) / (2 * h)
    assert np.abs(numeric).max() > 0.05
    np.testing.assert_allclose(grad, numeric, atol=2e-6)
    assert np.all(grad[2 * samples + 5:3 * samples] == 0.0) and np.all(grad[5 * samples:] == 0.0)


def test_marching_keeps_occupied_cells_and_strides_within_the_budget():
    bound, res, dt, samples = 1.0, 8, 2 * math.sqrt(3) / 64, 12
    occupancy = OccupancyGrid(res, update_every=1, warmup_steps=0, decay=0.5, min_optical_thickness=0.01, dt=dt,
                              activation=0, seed=0)
    grid = np.zeros((res, res, res), np.float32)   # (z, y, x)
    grid[3:5, 3:5, 2:7] = 100.0                    # a slab of occupied cells
    occupancy.parameter.load(grid.reshape(-1))
    marcher = RayMarcher(bound, dt, samples, occupancy, seed=0)
    o = np.array([[-3.0, 0.0, 0.0], [-3.0, -0.01, 0.01], [0.0, 0.0, -3.0], [0.0, 3.0, 0.9]])
    d = np.array([[1.0, 0.0, 0.0], [1.0, 0.02, -0.01], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    rays = tensor(np.concatenate([o, d], axis=1))
    tape = Tape()
    with tape:
        occupancy.ensure_mean(tape)
        points, deltas, depths = marcher.march(rays, step=1, jitter=True)
    tape.submit()
    p, delta, t = (a.to_numpy().reshape(4 * samples, -1) for a in (points, deltas, depths))
    delta, t = delta[:, 0].reshape(4, samples), t[:, 0].reshape(4, samples)
    p = p.reshape(4, samples, 3)
    for r in range(4):
        used = delta[r] > 0
        world = o[r] + t[r, used, None] * d[r]
        np.testing.assert_allclose(p[r, used], world / (2 * bound) + 0.5, atol=1e-5)
        cells = np.floor(p[r, used] * res).astype(int)
        assert np.all(grid[cells[:, 2], cells[:, 1], cells[:, 0]] > 0)   # only occupied cells
        steps = np.diff(t[r, used]) / dt
        np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)   # on the ray's dt grid
    # the x axis crosses 5 occupied cells (1.25 world units = 23 steps): more than 12, so every 2nd step
    used = delta[0] > 0
    assert used.sum() == 12 and np.allclose(delta[0, used], 2 * dt)
    np.testing.assert_allclose(np.diff(t[0, used]), 2 * dt, rtol=1e-4)
    # along z through the slab's 2 cells (0.5 world units, about 9 steps): every step
    assert np.allclose(delta[2, delta[2] > 0], dt) and 8 <= (delta[2] > 0).sum() <= 10
    assert not np.any(delta[3] > 0)                 # passes beside the slab: no samples


def test_occupancy_update_is_a_decayed_max_of_the_density():
    res, decay = 6, 0.5
    grid = OccupancyGrid(res, update_every=4, warmup_steps=8, decay=decay, min_optical_thickness=0.01, dt=0.01,
                         activation=0, seed=0)
    model = nn.Linear(3, 4)   # a constant output: the density is exp(bias[0]) at every point
    weight = np.zeros((4, 3), np.float32)
    assert [grid.due(s) for s in (7, 8, 10, 12)] == [False, True, False, True] and not grid.active(7)

    def update(step: int, bias0: float) -> np.ndarray:
        model.load_state_dict({"weight": weight, "bias": np.array([bias0, 0, 0, 0], np.float32)})
        tape = Tape()
        with tape:
            grid.update(model, step, tape)
        tape.submit()
        return grid.parameter.numpy()

    np.testing.assert_allclose(update(8, 1.0), math.e, rtol=1e-6)               # the first update replaces
    np.testing.assert_allclose(update(12, -1.0), max(decay * math.e, math.exp(-1)), rtol=1e-6)
    np.testing.assert_allclose(update(16, 2.0), math.exp(2.0), rtol=1e-6)
    assert grid._mean.to_numpy()[0] == pytest.approx(math.exp(2.0), rel=1e-5)   # a float32 sum of 216 cells
