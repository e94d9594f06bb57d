"""Configs: strict schemas with one-line errors (:mod:`~sopt.config.schema`)."""

from sopt.config.files import read_json_file
from sopt.config.schema import ConfigError, StrictModel, defaults, merge, parse_json, validate

__all__ = ["ConfigError", "StrictModel", "defaults", "merge", "parse_json", "read_json_file", "validate"]
