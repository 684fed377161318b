"""A gRPC C-core xDS client (Debian's python3-grpcio) for the e2e tests.

Usage: ccore_client.py TARGET PORT [PORT...]

Makes health Check RPCs to TARGET (an xds:// target, resolved through
the bootstrap in GRPC_XDS_BOOTSTRAP_CONFIG) until one is answered by the
backend on 127.0.0.1:PORT (which says its port in the x-backend-port
response header: this API does not show the peer's address), prints "reached PORT" and goes on to the next
PORT, so a test can change the configuration in between. Exits 1 with
the last outcome when a PORT is not reached within 60 seconds.
"""

import sys
import time

import grpc

TIMEOUT = 60.0


def reach(check, port):
    deadline = time.monotonic() + TIMEOUT
    last = "no RPC made"
    while time.monotonic() < deadline:
        try:
            _, call = check.with_call(b"", timeout=2)
            got = dict(call.initial_metadata()).get("x-backend-port", "?")
            if got == port:
                return None
            last = "answered by the backend on port " + got
        except grpc.RpcError as e:
            last = "%s: %s" % (e.code(), e.details())
        time.sleep(0.2)
    return last


def main():
    target, ports = sys.argv[1], sys.argv[2:]
    with grpc.insecure_channel(target) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        for port in ports:
            failed = reach(check, port)
            if failed:
                print("%s never reached port %s: %s" % (target, port, failed), file=sys.stderr)
                return 1
            print("reached " + port, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
