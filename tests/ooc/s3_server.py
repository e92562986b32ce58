"""An S3-compatible server on loopback (moto) with one fresh bucket, for the tests
that read and write object storage."""

import contextlib
import os
import uuid


@contextlib.contextmanager
def s3_bucket():
    """Start the server and make a bucket; yields ``(url, storage_options)``: the
    bucket's ``s3://`` URL and the fsspec options that reach it."""
    import boto3
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in ("AWS_EC2_METADATA_DISABLED", "AWS_CONFIG_FILE")}
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"  # never ask a cloud for credentials
    os.environ["AWS_CONFIG_FILE"] = os.devnull
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {
            "endpoint_url": f"http://{host}:{port}",
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }
        bucket = f"gradpipe-{uuid.uuid4().hex[:8]}"
        boto3.client(
            "s3",
            endpoint_url=options["endpoint_url"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        yield f"s3://{bucket}", options
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
