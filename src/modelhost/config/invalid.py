"""The internal signal of the validators: one broken rule, in Triton's wording.

`validate_config` turns it into a ModelConfigError that also names the config's source.
"""

from __future__ import annotations


class InvalidConfig(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


__all__ = ["InvalidConfig"]
