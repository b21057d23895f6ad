#!/usr/bin/env python3
"""build-wheel.py: the `anatomy` Python package as a wheel, with the built binary inside.

    scripts/build-wheel.py [--binary build/anatomy] [--out dist]

Writes dist/anatomy-<version>-py3-none-<platform>.whl holding python/anatomy/
(the module) and the binary as anatomy/bin/anatomy. Only the standard library
is used (a wheel is a zip with METADATA, WHEEL and RECORD), so it builds
offline; `pip install dist/anatomy-*.whl` installs it. The binary is whichever
build you point it at: a CPU build, or a CUDA build where the toolkit is
present (it then needs the CUDA driver on the machine that installs it).
"""

import argparse
import base64
import hashlib
import os
import re
import stat
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def project_version() -> str:
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(anatomy VERSION ([0-9.]+)", text)
    if not match:
        sys.exit("build-wheel.py: CMakeLists.txt: no `project(anatomy VERSION x.y.z ...)` line")
    return match.group(1)


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build" / "anatomy"), help="the built anatomy binary")
    parser.add_argument("--out", default=str(ROOT / "dist"), help="the directory to write the wheel to")
    options = parser.parse_args()

    binary = Path(options.binary)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        sys.exit(f"build-wheel.py: --binary {binary}: not an executable file (build it first: "
                 "cmake --build build --target anatomy)")
    version = project_version()
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"py3-none-{platform}"
    dist_info = f"anatomy-{version}.dist-info"

    files = []  # (path in the wheel, bytes, executable)
    for source in sorted((ROOT / "python" / "anatomy").rglob("*.py")):
        files.append((f"anatomy/{source.relative_to(ROOT / 'python' / 'anatomy').as_posix()}",
                      source.read_bytes(), False))
    files.append(("anatomy/bin/anatomy", binary.read_bytes(), True))
    readme = (ROOT / "docs" / "python.md")
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        "Name: anatomy",
        f"Version: {version}",
        "Summary: Train BERT-family models and explain their GPU memory byte by byte (the anatomy binary, "
        "with estimate() and train() for Python)",
        "Requires-Python: >=3.8",
        "Description-Content-Type: text/markdown",
        "",
        readme.read_text() if readme.exists() else "",
    ])
    files.append((f"{dist_info}/METADATA", metadata.encode(), False))
    wheel = "\n".join(["Wheel-Version: 1.0", "Generator: anatomy scripts/build-wheel.py", "Root-Is-Purelib: false",
                       f"Tag: {tag}", ""])
    files.append((f"{dist_info}/WHEEL", wheel.encode(), False))

    record_lines = [f"{path},{record_hash(data)},{len(data)}" for path, data, _ in files]
    record_lines.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record_lines) + "\n").encode(), False))

    out_dir = Path(options.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"anatomy-{version}-{tag}.whl"
    partial = path.with_suffix(".whl.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data, executable in files:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            mode = 0o755 if executable else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            archive.writestr(info, data)
    partial.replace(path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
