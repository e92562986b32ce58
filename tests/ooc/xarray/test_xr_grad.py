"""Losses written with xarray over gradpipe-backed data and JAX parameters run under
``jax.grad``, ``jax.value_and_grad`` and ``jax.jit``, with the gradients of the same
computation on in-memory JAX arrays. DiskArrays are passed as arguments (never
closed over) and wrapped in DataArrays inside the loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from xrfiles import SMALL, xr

from gradpipe import ooc


def _wrap(t, coords_from):
    """A DataArray over ``t`` (a DiskArray, traced or not, or a JAX array) with the
    dims and coordinates of ``coords_from``."""
    return xr.DataArray(t, dims=coords_from.dims, coords=coords_from.coords)


LOSSES = {
    # a linear model over lon, its anomaly from the mean over time, squared
    "anomaly": lambda t, w: (
        ((t * xr.DataArray(w, dims="lon")).sum("lon") - 280).pipe(lambda p: p - p.mean("time")) ** 2
    ).mean(),
    # an area-weighted mean of a weighted field
    "weighted": lambda t, w: (
        t.weighted(np.cos(np.deg2rad(t["lat"])))
        .mean(("lat", "lon"))
        .pipe(lambda m: (m * w.sum()) ** 2)
        .sum()
    ),
    # a masked product by name (xr.dot) with fixed weights, scaled by the parameters
    "dot and where": lambda t, w: (
        xr.dot(t.where(t > 275, 275.0), xr.DataArray(np.linspace(0, 1, 20), dims="lon")).std("time")
        * w.sum()
    ).sum(),
    # a product by name with the parameters (opt_einsum, as xr.dot uses when installed)
    "dot with parameters": lambda t, w: (
        xr.dot(t, xr.DataArray(w, dims="lon"), dim="lon").var("time").mean()
    ),
    # a selection
    "sel": lambda t, w: (
        (t.sel(time="2001").isel(lat=slice(2, 9)) * xr.DataArray(w, dims="lon")).max("lat").mean()
    ),
}


def _data(climate):
    t = climate["t"].fillna(280.0)  # JAX's mean does not skip NaNs: compare without them
    return t


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("mode", ["grad", "jit", "value_and_grad"])
def test_gradients_with_respect_to_jax_parameters(climate, name, mode):
    t_np = _data(climate)
    loss = LOSSES[name]
    w0 = jnp.asarray(np.linspace(0.5, 1.5, 20, dtype=np.float32) / 20)

    def on_disk(x, w):
        return loss(_wrap(x, t_np), w).data

    def in_memory(x, w):
        return loss(_wrap(x, t_np), w).data

    want_v, want_g = jax.value_and_grad(in_memory, argnums=1)(jnp.asarray(t_np.values), w0)
    x = ooc.DiskArray.from_numpy(t_np.values)
    with SMALL:
        if mode == "grad":
            got_v, got_g = on_disk(x, w0), jax.grad(on_disk, argnums=1)(x, w0)
        elif mode == "jit":
            got_v = jax.jit(on_disk)(x, w0)
            got_g = jax.jit(jax.grad(on_disk, argnums=1))(x, w0)
        else:
            got_v, got_g = jax.jit(jax.value_and_grad(on_disk, argnums=1))(x, w0)
    np.testing.assert_allclose(np.asarray(got_v), np.asarray(want_v), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(got_g), np.asarray(want_g), rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_gradient_with_respect_to_the_data_is_a_disk_array(climate, jit):
    t_np = _data(climate)
    w0 = jnp.asarray(np.linspace(0.5, 1.5, 20, dtype=np.float32) / 20)
    loss = LOSSES["anomaly"]

    def f(x):
        return loss(_wrap(x, t_np), w0).data

    want = jax.grad(f)(jnp.asarray(t_np.values))
    grad = jax.jit(jax.grad(f)) if jit else jax.grad(f)
    with SMALL:
        got = grad(ooc.DiskArray.from_numpy(t_np.values))
    assert isinstance(got, ooc.DiskArray)
    np.testing.assert_allclose(got.to_numpy(), np.asarray(want), rtol=1e-3, atol=1e-8)


@pytest.mark.parametrize("name", ["weighted", "dot and where"])
def test_without_opt_einsum_xarray_asks_the_namespace(climate, name):
    t_np = _data(climate)
    w0 = jnp.asarray(np.linspace(0.5, 1.5, 20, dtype=np.float32) / 20)

    def loss(x, w):
        return LOSSES[name](_wrap(x, t_np), w).data

    want = jax.grad(loss, argnums=1)(jnp.asarray(t_np.values), w0)
    x = ooc.DiskArray.from_numpy(t_np.values)
    with SMALL, xr.set_options(use_opt_einsum=False):
        got = jax.jit(jax.grad(loss, argnums=1))(x, w0)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-3, atol=1e-6)


def test_a_parameter_may_be_a_dataarray_with_dims(climate):
    t_np = _data(climate)
    x = ooc.DiskArray.from_numpy(t_np.values)
    w = xr.DataArray(jnp.ones(20, jnp.float32) / 20, dims="lon")

    def loss(x, w_data):
        t = _wrap(x, t_np)
        return ((t * w.copy(data=w_data)).sum("lon").var("time")).mean().data

    want = jax.grad(loss, argnums=1)(jnp.asarray(t_np.values), w.data)
    with SMALL:
        got = jax.jit(jax.grad(loss, argnums=1))(x, w.data)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-3)


def test_reading_into_memory_under_a_trace_is_refused(climate):
    t_np = _data(climate)
    x = ooc.DiskArray.from_numpy(t_np.values)

    def loss(x):
        return float(_wrap(x, t_np).mean().values)

    with pytest.raises(Exception, match=r"traced|Tracer|concrete"):
        jax.jit(loss)(x)
