"""Errors that end a run with one line for the user, and the exit codes of the CLI."""

EXIT_PROVED = 0
EXIT_COUNTEREXAMPLE = 1
EXIT_UNKNOWN = 2
EXIT_BAD_INPUT = 3
EXIT_INTERNAL = 4     # a bug in addrsim itself (one line on stderr)


class AddrsimError(Exception):
    """Base class: ``str(err)`` is the one line shown to the user; ``exit_code`` the CLI's status."""

    exit_code = EXIT_BAD_INPUT


class UnmodelledError(AddrsimError):
    """A kernel that no kernel family of the models describes: refused, never given a verdict
    (its arguments would be free symbols and its expected offsets meaningless).  Exit 2, as
    scan lists such a code object as skipped."""

    exit_code = EXIT_UNKNOWN

    def __init__(self, path, symbol: str):
        self.path = str(path)
        super().__init__(f"{path}: kernel {symbol}: no kernel family in the models describes it: not checked "
                         f"(scan lists it as skipped; a family in a --model file would model it)")


class InputError(AddrsimError):
    """A code object, listing or model file that cannot be used (names the file)."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        # one line, even when a name taken from the input holds line breaks
        super().__init__(" ".join(f"{self.path}: {problem}".splitlines()))


class ToolError(AddrsimError):
    """A missing or unusable external tool (llvm-objdump), with what to install."""


class NotEmulatedError(AddrsimError):
    """A kernel or input the emulator does not run yet (a causal mask, group mode, an
    instruction without emulated semantics): exit 2, like an undecided check."""

    exit_code = EXIT_UNKNOWN


def unknown_name(kind: str, name: str, known) -> str:
    """``unknown KIND 'name'`` with the closest known name ("did you mean 'lse'?": a case
    slip, or difflib's nearest), then every known name."""
    import difflib
    known = sorted(known)
    near = [k for k in known if k.lower() == str(name).lower()] or difflib.get_close_matches(str(name), known, 1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"unknown {kind} {name!r}{hint}; the models define: {', '.join(known)}"
