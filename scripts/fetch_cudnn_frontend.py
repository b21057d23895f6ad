#!/usr/bin/env python3
"""Unpack the cuDNN frontend's C++ headers (header-only, MIT licence) from its
PyPI wheel into ~/.cache/anatomy/cudnn-frontend-VERSION/include, where
CMakeLists.txt looks for them. The build uses them for cuDNN's fused attention;
without them it keeps its own attention kernels. Nothing is committed.
The wheel's SHA-256 must equal the one the index gives in its link (PEP 503's
#sha256= fragment): a wheel that does not match is refused, and nothing unpacked."""
import hashlib
import html
import io
import os
import re
import sys
import urllib.parse
import urllib.request
import zipfile

VERSION = "1.32.0"


def main() -> int:
    dest = os.path.join(os.path.expanduser("~"), ".cache", "anatomy", f"cudnn-frontend-{VERSION}")
    if os.path.exists(os.path.join(dest, "include", "cudnn_frontend.h")):
        return 0
    index = "https://pypi.org/simple/nvidia-cudnn-frontend/"
    try:
        with urllib.request.urlopen(index, timeout=60) as r:
            page = r.read().decode()
        # The index's links; any x86_64 wheel of the version carries the same headers.
        wheels = [u for u in re.findall(r'href="([^"]+)"', page)
                  if f"nvidia_cudnn_frontend-{VERSION}-" in u and "x86_64" in u and ".whl" in u]
        if not wheels:
            raise RuntimeError(f"no x86_64 wheel of nvidia-cudnn-frontend {VERSION} in {index}")
        link = html.unescape(wheels[0])
        with urllib.request.urlopen(urllib.parse.urljoin(index, link), timeout=300) as r:
            data = r.read()
    except Exception as e:  # offline: the build goes on without cuDNN attention
        print(f"fetch_cudnn_frontend: {e}; building without cuDNN attention", file=sys.stderr)
        return 0
    expected = urllib.parse.urlparse(link).fragment
    if not expected.startswith("sha256="):
        print(f"fetch_cudnn_frontend: the index gives no sha256 for {link}; refusing the wheel", file=sys.stderr)
        return 1
    got = hashlib.sha256(data).hexdigest()
    if got != expected[len("sha256="):]:
        print(f"fetch_cudnn_frontend: the wheel's sha256 {got} is not the index's {expected[7:]}; refusing it",
              file=sys.stderr)
        return 1
    tmp = dest + ".part"
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for name in z.namelist():
            if name.startswith("include/"):
                z.extract(name, tmp)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.replace(tmp, dest)
    print(f"fetch_cudnn_frontend: headers in {dest}/include")
    return 0


if __name__ == "__main__":
    sys.exit(main())
