"""The one device of `gradpipe.ooc`: the disk (where every `DiskArray`'s data lives)."""

from __future__ import annotations

__all__ = ["DISK", "Device", "check_device"]


class Device:
    """The device of every `DiskArray`: data on disk, worked on in tiles by the host.

    There is one; ``x.device`` returns it, and creation functions accept it (or
    ``None``) as their ``device=``.
    """

    def __repr__(self) -> str:
        return "Device('disk')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device)

    def __hash__(self) -> int:
        return hash(Device)


DISK = Device()


def check_device(device: object) -> None:
    """Refuse a device other than the disk (or ``None``, meaning the disk)."""
    if device is not None and device != DISK and device != "disk":
        raise ValueError(
            f"gradpipe.ooc arrays live on disk: device={device!r} is not supported (pass "
            "None or x.device). Move data into memory with x.to_numpy() or jnp.asarray."
        )
