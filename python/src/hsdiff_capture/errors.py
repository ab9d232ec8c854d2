"""The exceptions the package raises for trouble the caller can fix (the CLI prints them as
`hsdiff-capture: error: …` and exits 2)."""


class CaptureError(Exception):
    """Bad input, a package asked for that does not import, a forward pass that failed, …"""


class HsdiffError(CaptureError):
    """The `hsdiff` binary is missing or of another version, or it exited 2 (trouble): the message
    is hsdiff's own (its stderr) or says which binary was found where."""
