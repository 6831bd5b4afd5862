"""Builds the kiln wheel a serving container needs: the `kiln` package with libkiln.so
inside (kiln/lib/, found before any other: kiln/_capi.py), nothing else of kiln.

    python3 client/python/make_wheel.py --libkiln build/client/libkiln.so --out build/dist

(`cmake --build build --target kiln_wheel` runs it.) Writes
dist/kiln-<version>-py3-none-manylinux_<glibc>_<arch>.whl: pure Python over the C API, so
one wheel serves every Python >= 3.9 (`requires-python`), tagged manylinux for the glibc of
the machine that built libkiln.so (Debian 12: manylinux_2_36_x86_64). libkiln.so links the
system's libstdc++ (GCC 12's) and OpenSSL 3's libcrypto.so.3 dynamically, as a PyTorch
serving image (Ubuntu 22.04 or later, Debian 12) has them; it is not an auditwheel-repaired
manylinux wheel. Metadata comes from client/python/pyproject.toml. Written directly
as a zip (the wheel format, PEP 427), so no build backend is needed and the result is the
same bytes for the same inputs. Prints the wheel's path.
"""
import argparse
import base64
import hashlib
import os
import platform
import sys
import tomllib
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
EPOCH = (2020, 1, 1, 0, 0, 0)  # fixed zip timestamps: reproducible bytes


def platform_tag():
    libc, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    if libc != "glibc":
        sys.exit(f"make_wheel.py: {libc} is not glibc; kiln's wheel is built on a glibc system")
    major, minor = version.split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


def metadata(project):
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project.get('description', '')}", f"Requires-Python: {project.get('requires-python', '')}",
             f"License: {(project.get('license') or {}).get('text', '')}"]
    for extra, reqs in sorted((project.get("optional-dependencies") or {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines.extend(f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs)
    readme = os.path.join(HERE, project.get("readme", "README.md"))
    body = open(readme).read() if os.path.exists(readme) else ""
    return "\n".join(lines) + "\nDescription-Content-Type: text/markdown\n\n" + body


def files(libkiln):
    """(path in the wheel, bytes, executable) of the package: its .py files, py.typed and
    libkiln.so."""
    out = []
    root = os.path.join(HERE, "kiln")
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "lib"))
        for name in sorted(names):
            if name.endswith(".py") or name == "py.typed":
                path = os.path.join(folder, name)
                out.append((os.path.relpath(path, HERE), open(path, "rb").read(), False))
    out.append(("kiln/lib/libkiln.so", stripped(libkiln), True))
    return out


def stripped(path):
    """libkiln.so without its debug sections (33 MB -> a few MB in a RelWithDebInfo build),
    when binutils' strip is there; else as it is."""
    import shutil
    import subprocess
    import tempfile

    strip = shutil.which("strip")
    if strip is None:
        return open(path, "rb").read()
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "libkiln.so")
        subprocess.run([strip, "--strip-debug", "-o", copy, path], check=True)
        return open(copy, "rb").read()


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libkiln", required=True, help="the libkiln.so to carry")
    ap.add_argument("--out", required=True, help="the folder the wheel is written to")
    a = ap.parse_args()
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    name, version = project["name"], project["version"]
    tag = f"py3-none-{platform_tag()}"
    info = f"{name}-{version}.dist-info"
    entries = files(a.libkiln)
    entries.append((f"{info}/METADATA", metadata(project).encode(), False))
    entries.append((f"{info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: kiln make_wheel.py\n"
                                      f"Root-Is-Purelib: false\nTag: {tag}\n").encode(), False))
    entries.append((f"{info}/top_level.txt", b"kiln\n", False))
    record = "\n".join(record_line(n, d) for n, d, _ in entries) + f"\n{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode(), False))
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{name}-{version}-{tag}.whl")
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        for n, data, executable in entries:
            zi = zipfile.ZipInfo(n, EPOCH)
            zi.external_attr = (0o755 if executable else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(path + ".tmp", path)
    print(path)


if __name__ == "__main__":
    main()
