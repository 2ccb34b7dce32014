"""A model's failure in Triton's words: the type, the message, and where in the model's own code."""

from __future__ import annotations

from modelhost.backends.python.stub.errors import ExecuteError, error_text


def _fail() -> None:
    raise ValueError("bad value")


def test_an_exception_names_its_type_and_the_models_frames() -> None:
    try:
        _fail()
    except ValueError as e:
        text = error_text(e)
    assert text.startswith("ValueError: bad value\n\nAt:\n")
    assert f"{__file__}(" in text and "): _fail\n" in text
    # Innermost first, as Triton prints it.
    assert text.index("_fail") < text.index("test_an_exception_names_its_type")


def test_a_broken_contract_is_said_as_it_is() -> None:
    assert error_text(ExecuteError("Expected a list")) == "Expected a list"
    assert error_text(KeyError("k")) == "KeyError: 'k'"  # no traceback: nothing of the model's to show
