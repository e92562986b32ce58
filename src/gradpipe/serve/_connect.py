"""`connect`: a remote component for a server of either protocol, gradpipe's own
(`RemoteComponent`) or tesseract-core's (`TesseractRemote`). Above both modules, so
that neither imports the other."""

from __future__ import annotations

from ._remote import RemoteComponent
from ._tesseract_remote import TesseractRemote

__all__ = ["connect"]


def connect(
    url: str, *, token: str | None = None, encoding: str = "binary", timeout: float = 300.0
) -> RemoteComponent:
    """A remote component for the server at ``url``, speaking its protocol.

    It checks ``/health`` and reads ``/openapi.json``: a gradpipe server gives a
    `RemoteComponent`; a tesseract-core runtime (``tesseract-runtime serve``, or a
    gradpipe server's ``/tesseract`` API) gives a `TesseractRemote` (with its default
    options; build one yourself for others). Both are the same JAX function.

    **Arguments:** as `RemoteComponent`.

    **Returns:** the connected `RemoteComponent` or `TesseractRemote`.
    """
    remote = RemoteComponent(url, token=token, encoding=encoding, timeout=timeout)
    remote.health()
    document = remote.client.get("openapi.json")
    if "x-gradpipe" in document:
        remote._schema = document
        return remote
    remote.close()
    tesseract = TesseractRemote(url, token=token, timeout=timeout)
    try:
        tesseract.info  # noqa: B018 - reads the schema, or says why it is not one
    except ValueError as exc:
        tesseract.close()
        raise ValueError(
            f"{url} is neither a gradpipe server nor a tesseract API: {exc}."
        ) from None
    return tesseract
