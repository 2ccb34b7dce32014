"""The logging extension: read and change the log settings at run time (HTTP /v2/logging, gRPC LogSettings).

The settings are the --log-* options; a change reinstalls the log handler with the new values. As in Triton,
the log file cannot be changed over the network.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from modelhost.errors import InvalidArgument
from modelhost.observability.logs import configure_logging
from modelhost.options.log import LOG_FORMATS, LogOptions

log = logging.getLogger("modelhost.logging")

_BOOLS = {"log_info": "info", "log_warning": "warning", "log_error": "error"}


class LogSettings:
    def __init__(self, options: LogOptions) -> None:
        self.options = options

    def get(self) -> dict[str, Any]:
        o = self.options
        return {
            "log_file": o.file or "",
            "log_info": o.info,
            "log_warning": o.warning,
            "log_error": o.error,
            "log_verbose_level": o.verbose,
            "log_format": o.format,
        }

    def update(self, changes: dict[str, Any], *, announce: bool = True) -> dict[str, Any]:
        """Apply `changes` (all or nothing) and return the settings in force; InvalidArgument if any is wrong.
        `announce`: log the change (a frontend process applying the engine's change does not say it again)."""
        updates: dict[str, Any] = {}
        for key, value in changes.items():
            if key == "log_file":
                raise InvalidArgument("log file location can not be updated through network protocol")
            if key in _BOOLS:
                if not isinstance(value, bool):
                    raise InvalidArgument(f"expecting a boolean value for '{key}'")
                updates[_BOOLS[key]] = value
            elif key == "log_verbose_level":
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise InvalidArgument("expecting a non-negative integer value for 'log_verbose_level'")
                updates["verbose"] = value
            elif key == "log_format":
                if value not in LOG_FORMATS:
                    raise InvalidArgument(
                        f"invalid value for 'log_format': '{value}', expected one of {', '.join(LOG_FORMATS)}"
                    )
                updates["format"] = value
            else:
                raise InvalidArgument(f"trying to update an unknown log setting '{key}'")
        if updates:
            self.options = dataclasses.replace(self.options, **updates)
            configure_logging(self.options)
            if announce:
                log.info(
                    "log settings updated: %s", ", ".join(f"log_{k}={v}" for k, v in sorted(updates.items()))
                )
        return self.get()
