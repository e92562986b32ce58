"""Layer 1 of gradpipe.ooc: files on disk.

Paged files, zarr and HDF5 datasets opened in place, headers, scratch space and the
debris of interrupted writes. It imports nothing from the layers above it.
"""
