"""A tesseract API that does no work: the floor of `benchmarks/serve.py`'s protocol row.

It asks a real server (gradpipe's ``/tesseract``) once for the answers to the
benchmark's ``/apply`` and ``/vector_jacobian_product`` (the same inputs as
`peer_client_bench.py`: ``default_rng(0)``, ``x`` then the cotangent), then serves
them on the same HTTP stack as ``gradpipe serve`` (uvicorn with httptools,
Starlette, the allocator settings of `tune_malloc`): each request's body is read in
full and the stored answer sent. What a client spends against it is what no server
can save it: its own encoding and decoding, and moving the bytes.

    idle_server.py SOURCE_URL PORT SIZE
"""

import base64
import json
import sys

import httpx
import numpy as np
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gradpipe.serve._malloc import tune_malloc


def _array(values: np.ndarray) -> dict:
    buffer = base64.b64encode(values.tobytes()).decode()
    return {"shape": [values.size], "dtype": "float32",
            "data": {"buffer": buffer, "encoding": "base64"}}  # fmt: skip


def main() -> None:
    source, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tune_malloc()
    rng = np.random.default_rng(0)
    x = rng.normal(size=size).astype(np.float32)
    ct = rng.normal(size=size).astype(np.float32)
    requests = {
        "apply": {"inputs": {"x": _array(x)}},
        "vector_jacobian_product": {"inputs": {"x": _array(x)}, "vjp_inputs": ["x"],
                                    "vjp_outputs": ["y"], "cotangent_vector": {"y": _array(ct)}},
    }  # fmt: skip
    headers = {"Content-Type": "application/json", "Accept": "application/json+base64"}
    with httpx.Client(base_url=source, headers=headers, timeout=300) as client:
        answers = {}
        for name, document in requests.items():
            response = client.post(f"/{name}", content=json.dumps(document))
            response.raise_for_status()
            answers[name] = response.content
        schema = client.get("/openapi.json").content

    def answer(name: str):
        async def handle(request: Request) -> Response:
            await request.body()
            return Response(answers[name], media_type="application/json+base64")

        return Route(f"/{name}", handle, methods=["POST"])

    async def openapi(request: Request) -> Response:
        return Response(schema, media_type="application/json")

    async def health(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    routes = [answer(name) for name in answers]
    routes += [Route("/openapi.json", openapi), Route("/health", health)]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning",
                http="httptools", access_log=False)  # fmt: skip


if __name__ == "__main__":
    main()
