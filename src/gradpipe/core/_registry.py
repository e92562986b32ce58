"""`Registry`: a content-addressed store of operators and their weights on disk.

Layout under the root directory::

    objects/<sha256>/config.json   the operator's state as JSON, keys in their order
    objects/<sha256>/weights.bin   the weights blob (possibly empty)
    tags/<tag>                     the sha256 a tag points to

The address is the sha256 of the config JSON and the weights bytes, each prefixed
by its length so that no two (config, weights) pairs share an input. It is checked
again on every load, so a file changed on disk is an error rather than a model that
quietly differs from the one that was stored. Nothing is ever unpickled. Dict keys
keep their order (they are not sorted): an operator may read a configuration dict
in order, and a reloaded one must do what the stored one did.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from ._config import from_state, state_to_json
from ._operator import Operator

__all__ = ["Registry", "RegistryError", "content_address"]

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class RegistryError(Exception):
    """A registry entry is missing, corrupted, or a name is not allowed."""


def content_address(config_json: bytes, weights: bytes) -> str:
    """The sha256 address of a (config, weights) pair."""
    digest = hashlib.sha256()
    for part in (config_json, weights):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _SAFE_NAME.match(name) or ".." in name:
        raise RegistryError(
            f"{kind} {name!r} is not allowed: use 1-128 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit, without '..'. Names cannot leave the "
            f"registry's directory."
        )
    return name


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Registry:
    """A local directory of operators, addressed by content and named by tags.

    **Arguments:**

    - `root`: the directory (created if missing).

    ```python
    reg = Registry("models")
    ref = reg.store(op, weights=op.serialize_weights(), tags=["best"])
    op2 = reg.load("best")            # or reg.load(ref)
    blob = reg.load_weights(ref)      # the exact bytes stored
    ```
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        (self.root / "tags").mkdir(parents=True, exist_ok=True)

    # -- writing -----------------------------------------------------------------

    def store(
        self,
        op: Operator,
        *,
        weights: bytes = b"",
        tags: list[str] | tuple[str, ...] = (),
        force: bool = False,
    ) -> str:
        """Store ``op`` with ``weights``; return its sha256 address.

        Storing the same pair twice is a no-op that returns the same address.
        `force` lets the given tags move from another entry to this one.
        """
        if not isinstance(weights, (bytes, bytearray, memoryview)):
            raise TypeError(f"weights must be bytes, got {type(weights).__name__}.")
        for tag in tags:
            _check_name("Tag", tag)
        config_json = state_to_json(op.state).encode()
        weights = bytes(weights)
        ref = content_address(config_json, weights)
        target = self.root / "objects" / ref
        if not target.exists():
            staging = Path(tempfile.mkdtemp(dir=self.root / "objects", prefix=".staging-"))
            try:
                for name, data in (("config.json", config_json), ("weights.bin", weights)):
                    with open(staging / name, "wb") as handle:
                        handle.write(data)
                        handle.flush()
                        os.fsync(handle.fileno())
                try:
                    os.rename(staging, target)
                except OSError:
                    if not target.exists():  # not a concurrent store of the same pair
                        raise
            finally:
                if staging.exists():
                    for child in staging.iterdir():
                        child.unlink()
                    staging.rmdir()
        for tag in tags:
            self.tag(ref, tag, force=force)
        return ref

    def tag(self, ref: str, tag: str, *, force: bool = False) -> None:
        """Point ``tag`` at the entry ``ref``; moving an existing tag needs ``force``."""
        address = self.resolve(ref)
        path = self.root / "tags" / _check_name("Tag", tag)
        if path.exists() and not force:
            current = path.read_text().strip()
            if current != address:
                raise RegistryError(
                    f"Tag {tag!r} already points to {current[:12]}; pass force=True to "
                    f"move it to {address[:12]}."
                )
            return
        _write_atomic(path, address.encode())

    # -- reading -----------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """The sha256 address of ``ref``: an address, a unique prefix, or a tag."""
        if not isinstance(ref, str):
            raise TypeError(f"A registry reference is a str, got {type(ref).__name__}.")
        if _SHA256.match(ref) and (self.root / "objects" / ref).is_dir():
            return ref
        tag_path = self.root / "tags" / _check_name("Reference", ref)
        if tag_path.is_file():
            return tag_path.read_text().strip()
        if re.fullmatch(r"[0-9a-f]{6,63}", ref):
            matches = [p.name for p in (self.root / "objects").iterdir() if p.name.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise RegistryError(
                    f"Reference {ref!r} matches {len(matches)} entries; use more digits."
                )
        raise RegistryError(f"No registry entry or tag named {ref!r} in {self.root}.")

    def _read_verified(self, ref: str) -> tuple[bytes, bytes]:
        address = self.resolve(ref)
        folder = self.root / "objects" / address
        try:
            config_json = (folder / "config.json").read_bytes()
            weights = (folder / "weights.bin").read_bytes()
        except FileNotFoundError as error:
            raise RegistryError(f"Registry entry {address[:12]} is incomplete: {error}.") from None
        actual = content_address(config_json, weights)
        if actual != address:
            raise RegistryError(
                f"Registry entry {address[:12]} fails its hash check (content hashes to "
                f"{actual[:12]}): a file under {folder} was modified. Store the operator again."
            )
        return config_json, weights

    def load_state(self, ref: str) -> dict[str, Any]:
        """The verified state stored under ``ref``."""
        config_json, _ = self._read_verified(ref)
        return json.loads(config_json)

    def load(self, ref: str) -> Operator:
        """The operator stored under ``ref``, rebuilt from its verified state.

        Weights are not applied here: operators that hold weights (gradpipe.jax)
        load them with ``load_weights``.
        """
        return from_state(self.load_state(ref))

    def load_weights(self, ref: str) -> bytes:
        """The exact weight bytes stored under ``ref`` (verified)."""
        return self._read_verified(ref)[1]

    def list(self, tag: str | None = None) -> list[dict[str, Any]]:
        """The entries, each ``{"ref", "class", "tags"}``; only ``tag``'s when given."""
        tags: dict[str, list[str]] = {}
        for path in sorted((self.root / "tags").iterdir()):
            if path.name.startswith("."):
                continue
            tags.setdefault(path.read_text().strip(), []).append(path.name)
        entries = []
        for folder in sorted((self.root / "objects").iterdir()):
            if folder.name.startswith("."):
                continue
            entry_tags = tags.get(folder.name, [])
            if tag is not None and tag not in entry_tags:
                continue
            state = json.loads((folder / "config.json").read_bytes())
            entries.append(
                {
                    "ref": folder.name,
                    "class": f"{state['module']}:{state['class']}",
                    "tags": entry_tags,
                }
            )
        return entries
