"""Errors a user can cause.

Anything raised as a ``BenchfillError`` reaches the terminal as one line and a
non-zero exit; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


# ``extra`` of a log record at WARNING that is news rather than a fault (an endpoint answering again, a
# release stamped after a clock behind): it reaches the same readers, and the CLI says it as ``note:``, not
# ``warning:``.
NOTE = {"benchfill_note": True}


class BenchfillError(Exception):
    """A problem with the user's input, configuration or environment: what a caller catches.

    Its message is one line naming the file, line or field at fault (code raising it must keep it so);
    ``exit_code`` is the CLI's exit status for it. Subclasses: ``DataError`` (a file's content),
    ``ConfigError`` (an option, config or spec) and ``EndpointError`` (a model endpoint). Anything else
    benchfill raises is a bug.
    """

    exit_code = 2


class DataError(BenchfillError):
    """A malformed items or responses file."""


class ConfigError(BenchfillError):
    """A bad configuration file, option or benchmark spec."""


class EndpointError(BenchfillError):
    """A model endpoint that cannot be reached or does not serve the named model."""

    exit_code = 3


class PromptRefused(EndpointError):
    """A probe refused an item's prompt itself as longer than its context holds (an HTTP 400 that says so):
    the item's fault, which a rerun would meet again. A new item is set aside for it (``probe_refused``);
    an original stops the run, as other endpoint errors do."""


# A field's name in the other of the two clients' spellings: an endpoint is `base_url` to a probe (the openai
# SDK's name) and `api_base` to the rewriter and judge (litellm's).
_OTHER_NAME = {"base_url": " (the rewriter and judge name their endpoint api_base, as litellm does)",
               "api_base": " (a probe names its endpoint base_url, as the openai SDK does)"}


def validation_line(src: str, exc: ValidationError, prefix: str = "") -> str:
    """A pydantic validation error as one line naming the source and the first bad field."""
    # a misspelt key shows as two errors, the field it should have been "required" and the key given "extra";
    # the second names what the user wrote
    errors = exc.errors()
    err = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
    loc = ".".join(str(p) for p in ((prefix,) if prefix else ()) + tuple(err["loc"]))
    said = err["msg"].removeprefix("Value error, ")  # pydantic's label for our own validators' messages
    rest = len(errors) - 1
    if err.get("type") == "extra_forbidden":
        said = "not a field here"
        said += _OTHER_NAME.get(str(err["loc"][-1]), "") if err["loc"] else ""
        wanted = [str(e["loc"][-1]) for e in errors if e.get("type") == "missing" and e["loc"][:-1] == err["loc"][:-1]]
        if wanted:  # the required field beside it is, most likely, what the key was meant to be
            said += f" (is it {wanted[0]}, which is missing?)"
            rest -= 1
    if err.get("type") == "list_type" and isinstance(err.get("input"), dict) and err["loc"]:
        said += f" (in TOML, a list of tables is written [[{err['loc'][-1]}]], once per entry)"
    more = f" (and {rest} more)" if rest > 0 else ""
    return f"{src}: field {loc}: {said}{more}"


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, `kill`), ended as Ctrl-C ends a command: every cleanup Ctrl-C runs
    (temp files, stopped servers, a half-built release) runs for it too, where the default handler would
    end the process on the spot. The CLI says so and exits 128 + the signal: 143 for SIGTERM, 129 for the
    SIGHUP a command that asks for it turns into this too."""

    def __init__(self, signum: int = 15) -> None:  # 15: SIGTERM (the signal module is not needed here)
        super().__init__()
        self.signum = signum
