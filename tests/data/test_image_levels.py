"""sopt.data.image reads files at their own levels: 16-bit PNGs (grey, grey + alpha, RGB, RGBA) keep their 16 bits
(Pillow alone cuts colour ones to 8), 8-bit grey, grey + alpha, palette and RGBA ones their 8; and a file too large
to decode is refused from its header, before a pixel is decoded."""

from __future__ import annotations

import pathlib
import time
import tracemalloc

import numpy as np
import pytest
from PIL import Image

from sopt.data.image import image_size_problem, load_image, read_levels
from tests.problems.neural_radiance.test_neural_radiance_inputs import png16, png_bytes


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_sixteen_bit_pngs_load_at_their_levels(channels: int, tmp_path: pathlib.Path) -> None:
    pixels = np.full((3, 5, channels), 100, np.uint16)
    pixels[0, 0] = (65535, 256, 1, 65280)[:channels]
    path = tmp_path / f"c{channels}.png"
    path.write_bytes(png16(pixels))
    levels = read_levels(path)
    assert levels.shape == (3, 5, channels) and levels.dtype == np.float32
    assert abs(float(levels[1, 2, 0]) - 100 / 65535) < 1e-7   # 8 bits would give 0 (or 0.392 read as 100 of 255)
    np.testing.assert_allclose(levels[0, 0], np.array((65535, 256, 1, 65280)[:channels]) / 65535, atol=1e-7)
    rgb = load_image(path)
    assert rgb.shape == (3, 5, 3)
    np.testing.assert_allclose(rgb[1, 2], [100 / 65535] * 3, atol=1e-7)   # grey replicated, alpha dropped


def test_eight_bit_grey_alpha_palette_and_rgba_load_at_their_levels(tmp_path: pathlib.Path) -> None:
    Image.fromarray(np.full((2, 3), 7, np.uint8), "L").save(tmp_path / "l.png")
    Image.fromarray(np.dstack([np.full((2, 3), 7, np.uint8), np.full((2, 3), 9, np.uint8)]), "LA").save(
        tmp_path / "la.png")
    Image.fromarray(np.tile(np.array([7, 8, 9, 10], np.uint8), (2, 3, 1)), "RGBA").save(tmp_path / "rgba.png")
    palette = Image.new("P", (3, 2), 1)
    palette.putpalette([0, 0, 0, 10, 20, 30] + [0, 0, 0] * 254)
    palette.save(tmp_path / "p.png")
    palette.save(tmp_path / "pt.png", transparency=1)   # index 1 transparent
    expected = {"l.png": [7], "la.png": [7, 9], "rgba.png": [7, 8, 9, 10], "p.png": [10, 20, 30],
                "pt.png": [10, 20, 30, 0]}
    for name, values in expected.items():
        levels = read_levels(tmp_path / name)
        assert levels.shape == (2, 3, len(values)), name
        np.testing.assert_allclose(levels[1, 2], np.array(values) / 255, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(load_image(tmp_path / "la.png")[0, 0], [7 / 255] * 3, atol=1e-7)


def test_a_file_too_large_to_decode_is_refused_from_its_header(tmp_path: pathlib.Path) -> None:
    """A 9000 x 9000 PNG whose pixels were never written: refused at once, without decoding (no memory taken)."""
    path = tmp_path / "huge.png"
    path.write_bytes(png_bytes(9000, 9000, None, 6))
    tracemalloc.start()
    start = time.monotonic()
    with pytest.raises(ValueError) as info:
        load_image(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert str(info.value) == (f"image '{path}' is 9000 x 9000 pixels; at most 8192 pixels a side are decoded; "
                               "downscale it first")
    assert time.monotonic() - start < 2 and peak < 16 * 2**20
    # within the side limit, the pixel budget is half the memory available
    assert image_size_problem(4000, 4000, memory=2**30) == (
        "is 4000 x 4000 pixels; decoding it takes about 0.715 GiB, more than half of the 1 GiB of host memory "
        "available")
    assert image_size_problem(4000, 4000, memory=2 * 2**30) is None
