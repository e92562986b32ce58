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

Several processes may share one registry. An entry appears whole or not at all
(it is written in a staging folder and renamed into place); a tag is created with
a hard link, which fails when the tag exists, so of several processes tagging
without ``force`` exactly one wins and the others get `RegistryError`. A damaged
entry (a file changed, truncated or removed) is repaired by storing the operator
again, and `Registry.list` lists the intact entries and warns about the others.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from ._atomic_files import write_atomic, write_new
from ._config import from_state, state_to_json
from ._operator import Operator

__all__ = ["Registry", "RegistryError", "RegistryWarning", "content_address"]

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class RegistryError(Exception):
    """A registry entry is missing, corrupted, or a name is not allowed."""


class RegistryWarning(UserWarning):
    """Damaged entries or dangling tags met while listing a registry."""


def content_address(config_json: bytes, weights: bytes) -> str:
    """The sha256 address of a (config, weights) pair."""
    digest = hashlib.sha256()
    for part in (config_json, weights):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or ".." in name:
        raise RegistryError(
            f"{kind} {name!r} is not allowed: use 1-128 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit, without '..'. Names cannot leave the "
            f"registry's directory."
        )
    return name


def _operator_states(state: Any) -> list[dict]:
    """Every operator state in ``state`` (itself and nested ``$operator`` ones)."""
    found, stack = [], [state]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if {"module", "class", "config"} <= set(value) and isinstance(value["class"], str):
                found.append(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


def _check_importable(state: dict) -> None:
    """Refuse a state that names a class no other process can import.

    A class defined in ``__main__`` (the script being run) or inside a function
    stores fine, but another process looking for ``__main__:Model`` finds its own
    script instead, so the entry could never be loaded there.
    """
    for inner in _operator_states(state):
        name = f"{inner['module']}:{inner['class']}"
        if inner["module"] == "__main__":
            where = "in __main__ (the script being run)"
        elif "<locals>" in inner["class"]:
            where = "inside a function"
        else:
            continue
        raise RegistryError(
            f"Cannot store {name}: the class is defined {where}, so no other process "
            f"can import it to load this entry. Move the class to an importable module "
            f"(e.g. models.py next to the script) and import it from there; or pass "
            f"store(..., allow_unimportable=True) for an entry only this program reloads."
        )


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
        allow_unimportable: bool = False,
    ) -> str:
        """Store ``op`` with ``weights``; return its sha256 address.

        Storing the same pair twice returns the same address; when the stored entry
        is damaged, storing it again repairs it. `force` lets the given tags move
        from another entry to this one. An operator whose class (or a nested
        operator's class) is defined in ``__main__`` or inside a function is refused,
        since no other process could load it, unless `allow_unimportable` is true.
        """
        if not isinstance(weights, (bytes, bytearray, memoryview)):
            raise TypeError(f"weights must be bytes, got {type(weights).__name__}.")
        for tag in tags:
            _check_name("Tag", tag)
        state = op.state
        if not allow_unimportable:
            _check_importable(state)
        config_json = state_to_json(state).encode()
        weights = bytes(weights)
        ref = content_address(config_json, weights)
        target = self.root / "objects" / ref
        if target.exists() and self._problem(ref) is not None:
            self._set_aside(target)
        if not target.exists():
            staging = Path(tempfile.mkdtemp(dir=self.root / "objects", prefix=".staging-"))
            try:
                for name, data in (("config.json", config_json), ("weights.bin", weights)):
                    with open(staging / name, "wb") as handle:
                        handle.write(data)
                        handle.flush()
                        os.fsync(handle.fileno())
                _move_in(staging, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        for tag in tags:
            self.tag(ref, tag, force=force)
        return ref

    def _set_aside(self, target: Path) -> None:
        """Move a damaged entry out of the way (then delete it) so it can be rewritten."""
        aside = Path(tempfile.mkdtemp(dir=self.root / "objects", prefix=".damaged-"))
        try:
            # Gone already: another process set it aside first.
            with contextlib.suppress(FileNotFoundError):
                os.rename(target, aside / target.name)
        finally:
            shutil.rmtree(aside, ignore_errors=True)

    def tag(self, ref: str, tag: str, *, force: bool = False) -> None:
        """Point ``tag`` at the entry ``ref``; moving an existing tag needs ``force``.

        Without ``force`` the tag is created atomically: of several processes
        tagging at once, exactly one wins and the others get `RegistryError`
        (unless they asked for the same entry).
        """
        address = self.resolve(ref)
        path = self.root / "tags" / _check_name("Tag", tag)
        if force:
            write_atomic(path, address.encode())
            return
        if write_new(path, address.encode()):
            return
        current = path.read_text().strip()
        if current != address:
            raise RegistryError(
                f"Tag {tag!r} already points to {current[:12]}; pass force=True to "
                f"move it to {address[:12]}."
            )

    # -- reading -----------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """The sha256 address of ``ref``: an address, a unique prefix, or a tag."""
        if not isinstance(ref, str):
            raise TypeError(f"A registry reference is a str, got {type(ref).__name__}.")
        if _SHA256.match(ref) and (self.root / "objects" / ref).is_dir():
            return ref
        tag_path = self.root / "tags" / _check_name("Reference", ref)
        if tag_path.is_file():
            address = tag_path.read_text().strip()
            if not _SHA256.fullmatch(address) or not (self.root / "objects" / address).is_dir():
                raise RegistryError(
                    f"Tag {ref!r} points to {address[:64]!r}, which is not an entry of "
                    f"{self.root} (removed, or the tag file was changed). Store the "
                    f"operator again and move the tag: store(op, tags=[{ref!r}], force=True)."
                )
            return address
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
            raise RegistryError(
                f"Registry entry {address[:12]} is incomplete ({error.filename} is missing). "
                f"Store the operator again to repair it."
            ) from None
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

    def _problem(self, address: str) -> str | None:
        """Why the entry ``address`` is damaged, or None when it is intact."""
        try:
            self._read_verified(address)
        except (RegistryError, OSError) as error:
            return str(error)
        return None

    def damaged(self) -> dict[str, str]:
        """Every damaged entry and dangling tag, mapped to what is wrong with it.

        Each entry is read in full and its hash checked, so this reads every
        weights file; `list` makes only the cheap checks.
        """
        problems: dict[str, str] = {}
        for folder in sorted((self.root / "objects").iterdir()):
            if folder.name.startswith("."):
                continue
            if not _SHA256.fullmatch(folder.name):
                problems[folder.name] = "not a registry entry"
            elif (problem := self._problem(folder.name)) is not None:
                problems[folder.name] = problem
        for name, problem in self._tags()[1].items():
            problems[f"tag {name}"] = problem
        return problems

    def _tags(self) -> tuple[dict[str, list[str]], dict[str, str]]:
        """Tags by address, and the dangling tags with what is wrong with each."""
        tags: dict[str, list[str]] = {}
        dangling: dict[str, str] = {}
        for path in sorted((self.root / "tags").iterdir()):
            if path.name.startswith("."):
                continue
            try:
                address = path.read_text().strip()
            except (OSError, UnicodeDecodeError) as error:
                dangling[path.name] = f"unreadable: {error}"
                continue
            if not _SHA256.fullmatch(address) or not (self.root / "objects" / address).is_dir():
                dangling[path.name] = f"points to {address[:64]!r}, which is not an entry"
                continue
            tags.setdefault(address, []).append(path.name)
        return tags, dangling

    def list(self, tag: str | None = None) -> list[dict[str, Any]]:
        """The entries, each ``{"ref", "class", "tags"}``; only ``tag``'s when given.

        A damaged entry (an unreadable or missing file) or a tag that points to no
        entry is left out and named in one `RegistryWarning`, so one bad entry
        never hides the others. Store the operator again to repair an entry;
        `damaged` checks every entry's hash.
        """
        tags, dangling = self._tags()
        problems = [f"tag {name!r} {why}" for name, why in dangling.items()]
        entries = []
        for folder in sorted((self.root / "objects").iterdir()):
            if folder.name.startswith("."):
                continue
            entry_tags = tags.get(folder.name, [])
            if tag is not None and tag not in entry_tags:
                continue
            try:
                if not _SHA256.fullmatch(folder.name):
                    raise ValueError("not a registry entry")
                if not (folder / "weights.bin").is_file():
                    raise ValueError("weights.bin is missing")
                state = json.loads((folder / "config.json").read_bytes())
                name = f"{state['module']}:{state['class']}"
            except (OSError, ValueError, KeyError, TypeError) as error:
                problems.append(f"entry {folder.name[:12]}: {error}")
                continue
            entries.append({"ref": folder.name, "class": name, "tags": entry_tags})
        if problems:
            warnings.warn(
                f"Registry {self.root} has {len(problems)} damaged item(s), left out of "
                f"the list: {'; '.join(problems)}. Store the operators again to repair "
                f"the entries; move dangling tags with tag(..., force=True).",
                RegistryWarning,
                stacklevel=2,
            )
        return entries


def _move_in(staging: Path, target: Path, attempts: int = 8) -> None:
    """Rename the written ``staging`` folder to ``target``. A concurrent store of the
    same pair may have put it there first (then that one stands); one that a
    concurrent repair set aside between the two (a damaged entry) is written again."""
    for _ in range(attempts):
        try:
            os.rename(staging, target)
            return
        except OSError as error:
            if target.exists():  # a concurrent store of the same pair
                return
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    raise RegistryError(
        f"Could not store the entry {target.name}: other processes kept setting it aside "
        "(a damaged copy being repaired). Store it again."
    )
