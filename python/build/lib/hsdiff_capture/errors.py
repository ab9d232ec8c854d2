"""The one exception the package raises for trouble the caller can fix (the CLI prints it as
`hsdiff-capture: error: …` and exits 2)."""


class CaptureError(Exception):
    """Bad input, a package asked for that does not import, a forward pass that failed, …"""
