"""Data for sopt's problems and examples: images as float arrays, image metrics."""

from sopt.data.image import generated_image, load_image, pixel_coordinates, save_image
from sopt.data.metrics import psnr

__all__ = ["generated_image", "load_image", "pixel_coordinates", "psnr", "save_image"]
